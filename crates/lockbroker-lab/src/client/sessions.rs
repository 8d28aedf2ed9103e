//! The load's session steps: open, acquire under a session, keepalive and
//! close, each one request never retried. A keepalive and a close answer
//! for the session as a whole; the load records what each means for every
//! lease of the session (see `load/sessions.rs`).

use lockbroker_api::{
    AcquireBody, LeaseResponse, LockMode, PermitResponse, Secret, SemaphoreAcquireBody,
    SessionOpenBody, SessionRenewalResponse, SessionResponse, SessionTokenBody,
};
use lockbroker_client::{LeaseKind, Route};

use super::answers::{decode, failed, not_the_api, refusal, timed};
use super::{now_us, BrokerClient, Outcome, Timed};
use crate::history::family;

/// A session as its opening answered it.
pub struct OpenSession {
    /// Its id, for its routes.
    pub id: String,
    /// Its token.
    pub token: String,
}

/// What a keepalive answered: for the session, `Renewed` (with fence 0)
/// when it was kept, `Lost` on `session_lost`, else `Failed`; and the
/// names of its leases that had ended.
pub struct Kept {
    /// When it was sent and answered, and the answer.
    pub timed: Timed,
    /// The leases the answer named ended (lock or semaphore names).
    pub ended: Vec<String>,
}

/// `session_lost` read as the loss of the session: `Lost`.
fn session_outcome(outcome: Outcome) -> Outcome {
    match outcome {
        Outcome::Failed { status: 409, code } if code == "session_lost" => Outcome::Lost,
        other => other,
    }
}

impl BrokerClient {
    /// `POST /v1/sessions` with `ttl_ms`; `None` unless it opened.
    pub async fn open_session(&self, ttl_ms: u64) -> Option<OpenSession> {
        let body = SessionOpenBody {
            ttl_ms: Some(ttl_ms),
            ..SessionOpenBody::default()
        };
        let answer = self.send(Route::OpenSession, &body, 0).await.ok()?;
        let opened: SessionResponse = decode(answer)?;
        Some(OpenSession {
            id: opened.id,
            token: opened.token,
        })
    }

    /// An acquire of a lease of `kind` on `name` under the session of
    /// `session_token`; on a grant, the lease's token comes back too.
    pub async fn acquire_in_session(
        &self,
        name: &str,
        kind: LeaseKind,
        session_token: &str,
        wait_ms: u64,
    ) -> (Timed, Option<String>) {
        let route = Route::Acquire(family(kind), name);
        let session = Some(Secret(session_token.to_owned()));
        let send_us = now_us();
        let answer = match kind {
            LeaseKind::Exclusive | LeaseKind::Shared => {
                let body = AcquireBody {
                    mode: (kind == LeaseKind::Shared).then_some(LockMode::Shared),
                    wait_ms: Some(wait_ms),
                    session,
                    ..AcquireBody::default()
                };
                self.send(route, &body, wait_ms).await.map(|body| {
                    decode::<LeaseResponse>(body)
                        .map(|l| (l.token, l.fence, l.ttl_ms, l.expires_at_ms))
                })
            }
            LeaseKind::Permit { limit } => {
                let body = SemaphoreAcquireBody {
                    limit: Some(u64::from(limit)),
                    wait_ms: Some(wait_ms),
                    session,
                    ..SemaphoreAcquireBody::default()
                };
                self.send(route, &body, wait_ms).await.map(|body| {
                    decode::<PermitResponse>(body)
                        .map(|p| (p.token, p.fence, p.ttl_ms, p.expires_at_ms))
                })
            }
        };
        match answer {
            Ok(Some((token, fence, ttl_ms, expires_at_ms))) => {
                let outcome = Outcome::Granted {
                    fence,
                    ttl_ms,
                    expires_at_ms,
                };
                (timed(send_us, outcome), Some(token))
            }
            Ok(None) => (timed(send_us, not_the_api()), None),
            Err(error) => (timed(send_us, refusal(error).0), None),
        }
    }

    /// `POST /v1/sessions/{id}/keepalive`.
    pub async fn keep_session(&self, session: &OpenSession) -> Kept {
        let body = SessionTokenBody::new(session.token.as_str());
        let send_us = now_us();
        let (outcome, ended) = match self.send(Route::KeepSession(&session.id), &body, 0).await {
            Ok(body) => match decode::<SessionRenewalResponse>(body) {
                Some(kept) => (
                    Outcome::Renewed {
                        fence: 0,
                        ttl_ms: kept.ttl_ms,
                        expires_at_ms: kept.expires_at_ms,
                    },
                    kept.ended.into_iter().map(|lease| lease.name).collect(),
                ),
                None => (not_the_api(), Vec::new()),
            },
            Err(error) => (session_outcome(refusal(error).0), Vec::new()),
        };
        Kept {
            timed: timed(send_us, outcome),
            ended,
        }
    }

    /// `POST /v1/sessions/{id}/close`: `Released` (with fence 0) when it
    /// closed, `Lost` on `session_lost`, else `Failed`.
    pub async fn close_session(&self, session: &OpenSession) -> Timed {
        let body = SessionTokenBody::new(session.token.as_str());
        let send_us = now_us();
        let outcome = match self.send(Route::CloseSession(&session.id), &body, 0).await {
            Ok(body) if body.get("closed") == Some(&serde_json::Value::Bool(true)) => {
                Outcome::Released { fence: 0 }
            }
            Ok(_) => failed(0, None),
            Err(error) => session_outcome(refusal(error).0),
        };
        timed(send_us, outcome)
    }
}
