//! The session of a run over several locks (`run --lock`): opened before the
//! acquire-all, whose leases are taken under it, kept alive while the
//! acquire waits, then by the supervisor (one keepalive every third of the
//! TTL instead of a renewal per lease), and closed at the end, which
//! releases every lease.
//!
//! A keepalive that finds one of the run's leases gone (the broker names it
//! among `ended`: an operator force-released it, or it reached the broker's
//! max hold) counts as that lease's own renewal failing, for the `reason`
//! the broker gives, as a renewal's answer would. (A broker older than
//! `reason` is asked with the lease's own extend, which it still allowed.)

use std::future::Future;
use std::pin::pin;
use std::time::{Duration, Instant};

use futures_util::future::{select, Either};
use lockbroker_api::Secret;
use serde_json::{json, Value};

use super::supervisor::{Answer, Lease, Renewal};
use crate::client::{AcquireOptions, Broker, BrokerError, Family};

/// An open session: its id (not a secret) and its token (a secret, which
/// `Debug` leaves out).
#[derive(Clone, Debug)]
pub struct Session {
    pub id: String,
    pub token: Secret,
}

/// Opens the session a run's leases are taken under, its TTL the leases'
/// and its owner theirs. `Ok(None)` from a broker from before sessions (the
/// route is not there): the leases are then renewed one by one.
pub async fn open(
    broker: &Broker,
    options: &AcquireOptions,
) -> Result<Option<Session>, BrokerError> {
    let answer = broker
        .open_session(options.ttl, options.owner.clone(), options.lock_delay)
        .await;
    let body = match answer {
        Ok(body) => body,
        Err(BrokerError::Rejected {
            status: 404 | 405, ..
        }) => return Ok(None),
        Err(error) => return Err(error),
    };
    let text = |key: &str| body.get(key).and_then(Value::as_str).map(str::to_owned);
    match (text("id"), text("token")) {
        (Some(id), Some(token)) => Ok(Some(Session {
            id,
            token: Secret(token),
        })),
        _ => Err(BrokerError::Unexpected(
            "the session's opening lacks its id or token".to_owned(),
        )),
    }
}

/// `work` (the acquire-all), with `session` kept alive meanwhile every
/// third of `ttl`, so that a wait may last longer than the TTL.
pub async fn kept_while<T>(
    broker: &Broker,
    session: Option<&Session>,
    ttl: Duration,
    work: impl Future<Output = T>,
) -> T {
    let Some(session) = session else {
        return work.await;
    };
    let keeping = pin!(keep_alive(broker, session, ttl));
    match select(pin!(work), keeping).await {
        Either::Left((done, _)) => done,
        Either::Right(((), work)) => work.await,
    }
}

/// Keeps `session` alive every third of `ttl` until it is found lost (then
/// the acquire answers so). A failure is tried again sooner.
async fn keep_alive(broker: &Broker, session: &Session, ttl: Duration) {
    let interval = ttl / 3;
    let retry = (ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut next = Instant::now() + interval;
    loop {
        tokio::time::sleep_until(next.into()).await;
        let sent = Instant::now();
        next = match broker
            .keep_session(&session.id, &session.token, interval)
            .await
        {
            Ok(_) => sent + interval,
            Err(error) if error.code() == "session_lost" => return,
            Err(_) => Instant::now() + retry,
        };
    }
}

/// Closes `session` within `timeout`, releasing every lease under it.
pub async fn close(
    broker: &Broker,
    session: &Session,
    timeout: Duration,
) -> Result<(), BrokerError> {
    broker
        .close_session(&session.id, &session.token, timeout)
        .await
        .map(drop)
}

/// One close whose outcome does not matter: a run that holds nothing (the
/// acquire failed) ends its session early instead of leaving it to expire.
pub async fn close_quietly(broker: &Broker, session: Option<&Session>) {
    if let Some(session) = session {
        let _ = close(broker, session, Duration::from_secs(2)).await;
    }
}

/// One keepalive as one round of renewals: sent at `sent`, the session's
/// TTL asked for. Its answer is about the session (lock `""`) unless it
/// names one of `leases` as ended: then that lease's own extend answers.
pub fn keepalive<'a>(
    broker: &'a Broker,
    session: Session,
    leases: Vec<Lease>,
    ttl: Duration,
    timeout: Duration,
) -> Renewal<'a> {
    Box::pin(async move {
        let sent = Instant::now();
        let answer = broker
            .keep_session(&session.id, &session.token, timeout)
            .await;
        let gone = answer
            .as_ref()
            .ok()
            .and_then(|body| first_ended(body, &leases));
        // Fewer leases renewed than the run holds, none named: the answer
        // that named it was lost, and the broker has forgotten it since.
        let renewed = answer
            .as_ref()
            .ok()
            .and_then(|body| body.get("leases")?.as_u64());
        let (lock, result) = match gone {
            None if renewed.is_some_and(|n| n < leases.len() as u64) => {
                (String::new(), Err(left_the_session()))
            }
            None => (String::new(), answer),
            Some((lease, Some(error))) => (lease.name.clone(), Err(error)),
            Some((lease, None)) => {
                let again = broker
                    .extend(Family::Locks, &lease.name, &lease.token, ttl, timeout)
                    .await;
                (
                    lease.name.clone(),
                    again.and_then(|_| Err(left_the_session())),
                )
            }
        };
        Answer {
            sent,
            asked: ttl,
            lock,
            result,
        }
    })
}

/// The first of `leases` that a keepalive's answer names as ended, with
/// the error its own extend would have answered when the answer says why.
fn first_ended<'l>(body: &Value, leases: &'l [Lease]) -> Option<(&'l Lease, Option<BrokerError>)> {
    let ended = body.get("ended").and_then(Value::as_array)?;
    leases.iter().find_map(|lease| {
        let gone = ended.iter().find(|gone| {
            gone.get("name").and_then(Value::as_str) == Some(lease.name.as_str())
                && gone.get("space").and_then(Value::as_str) == Some("lock")
        })?;
        Some((lease, why_ended(&lease.name, gone)))
    })
}

/// The error an extend of the lease `name` would have answered, from the
/// `reason` a keepalive gave for it (`None` when it gave none).
fn why_ended(name: &str, gone: &Value) -> Option<BrokerError> {
    let reason = gone.get("reason").and_then(Value::as_str)?;
    let mut error = serde_json::Map::new();
    let (code, message) = match reason {
        "max_hold_exceeded" => (
            "max_hold_exceeded",
            format!("the lease on {name:?} reached the broker's max hold and runs out at its TTL"),
        ),
        "released" => (
            "lease_lost",
            format!("the lease on {name:?} was released by its holder"),
        ),
        "force_released" => {
            let by = gone
                .get("force_released_by")
                .cloned()
                .unwrap_or(json!("anonymous"));
            error.insert("force_released_by".to_owned(), by);
            (
                "lease_lost",
                format!("the lease on {name:?} was force-released"),
            )
        }
        _ => ("lease_lost", format!("the lease on {name:?} was lost")),
    };
    error.insert("code".to_owned(), json!(code));
    error.insert("message".to_owned(), json!(message));
    Some(BrokerError::of_lease(error))
}

/// A lease that left the run's session although an extend still found it.
fn left_the_session() -> BrokerError {
    let mut error = serde_json::Map::new();
    error.insert("code".to_owned(), json!("lease_lost"));
    error.insert(
        "message".to_owned(),
        json!("the lease is no longer under the run's session"),
    );
    BrokerError::of_lease(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(name: &str) -> Lease {
        Lease {
            name: name.to_owned(),
            token: format!("token-{name}"),
            fence: 1,
        }
    }

    #[test]
    fn a_lease_of_the_run_named_among_the_ended_is_found() {
        let leases = [lease("ledger:a"), lease("ledger:b")];
        let body = json!({"ended": [
            {"name": "other", "space": "lock"},
            {"name": "ledger:b", "space": "lock"},
        ]});
        let found = first_ended(&body, &leases);
        assert_eq!(
            found.as_ref().map(|(l, _)| l.name.as_str()),
            Some("ledger:b")
        );
        assert!(
            found.is_some_and(|(_, why)| why.is_none()),
            "no reason given: the lease is asked"
        );
        let none = json!({"ended": [{"name": "ledger:a", "space": "semaphore"}]});
        assert!(first_ended(&none, &leases).is_none());
        assert!(first_ended(&json!({"ended": []}), &leases).is_none());
        assert_eq!(left_the_session().code(), "lease_lost");
    }

    #[test]
    fn an_ended_leases_reason_is_what_its_own_extend_would_have_answered() {
        let leases = [lease("ledger:a")];
        for (reason, code) in [
            ("released", "lease_lost"),
            ("force_released", "lease_lost"),
            ("lost", "lease_lost"),
            ("max_hold_exceeded", "max_hold_exceeded"),
        ] {
            let body = json!({"ended": [
                {"name": "ledger:a", "space": "lock", "reason": reason, "force_released_by": "ops"},
            ]});
            let why = first_ended(&body, &leases).and_then(|(_, why)| why);
            assert_eq!(why.as_ref().map(BrokerError::code), Some(code), "{reason}");
        }
    }

    #[test]
    fn a_session_never_shows_its_token() {
        let session = Session {
            id: "0123456789abcdef".to_owned(),
            token: Secret("0123456789abcdef.sekrit".to_owned()),
        };
        let shown = format!("{session:?}");
        assert!(
            !shown.contains("sekrit") && shown.contains("0123456789abcdef"),
            "{shown}"
        );
    }
}
