//! The session steps, through [`Client::session`] and the plain session
//! calls, and the session helper's own account for `session_state`.

use lockbroker_client::{Session, SessionAcquireOptions, SessionEnd, SessionOptions};

use super::operations::granted;
use super::*;

/// A session's TTL when the step names none, as [`SessionOptions`] has it.
const SESSION_TTL: Duration = DEFAULT_TTL;

impl Replay {
    /// Runs one session step through the client's public API.
    pub(super) async fn session_step(
        &mut self,
        label: &str,
        op: &str,
        step: &Fields,
    ) -> Result<Outcome, Failure> {
        let outcome = match op {
            "open_session" => {
                let Some(name) = step.get("as").and_then(Value::as_str) else {
                    return Err(format!("{label}: a session needs as"));
                };
                let lock_delay = match step.contains_key("lock_delay_ms") {
                    true => Some(self.duration(label, step, "lock_delay_ms", None)?),
                    false => None,
                };
                let options = SessionOptions {
                    ttl: self.duration(label, step, "ttl_ms", Some(SESSION_TTL))?,
                    owner: self.optional_text(label, step, "owner")?,
                    lock_delay,
                };
                match self.client.session(options).await {
                    Ok(session) => {
                        let fields = object(json!({
                            "id": session.id(), "ttl_ms": ms(session.ttl()),
                            "owner": session.owner(), "lock_delay_ms": ms(session.lock_delay()),
                        }));
                        if let Some(replaced) = self.sessions.insert(name.to_owned(), session) {
                            let _ = replaced.close().await;
                        }
                        Outcome::fields(fields)
                    }
                    Err(error) => Outcome::of(Err(error), |()| Fields::new()),
                }
            }
            "session_acquire" | "session_acquire_permit" => {
                let options = SessionAcquireOptions {
                    wait: self.duration(label, step, "wait_ms", Some(Duration::ZERO))?,
                    owner: self.optional_text(label, step, "owner")?,
                    mode: match self.arg(label, step, "shared")? {
                        Value::Bool(true) => LockMode::Shared,
                        _ => LockMode::Exclusive,
                    },
                    ..SessionAcquireOptions::default()
                };
                let session = self.session(label, step)?;
                let answer = if op == "session_acquire" {
                    let name = self.name(label, step, "lock")?;
                    session.lock(name).acquire(options).await
                } else {
                    let limit = self.whole_arg(label, step, "limit")?;
                    let limit = u32::try_from(limit)
                        .map_err(|_| format!("{label}: limit {limit} is past a semaphore's"))?;
                    let name = self.name(label, step, "semaphore")?;
                    session.semaphore(name, limit).acquire(options).await
                };
                match answer {
                    Ok(lease) => Outcome {
                        result: Ok(granted(&self.prefix, &lease)),
                        lease: Some(Arc::new(lease)),
                    },
                    Err(error) => Outcome::of(Err(error), |()| Fields::new()),
                }
            }
            "session_status" => Outcome::of(self.session(label, step)?.status().await, |s| {
                object(json!({
                    "open": s.open, "owner": s.owner, "leases": s.leases, "ttl_ms": s.ttl_ms,
                }))
            }),
            "session_state" => {
                let session = self.session(label, step)?;
                Outcome::fields(object(json!({"state": session_state(label, session)?})))
            }
            "close_session" => Outcome::of(self.session(label, step)?.close().await, |closed| {
                object(json!({"leases_released": closed.leases_released}))
            }),
            "end_session_elsewhere" => {
                let session = self.session(label, step)?;
                let closed = self.client.close_session(session.id(), session.token());
                Outcome::of(closed.await, |_| Fields::new())
            }
            _ => return Err(format!("{label}: this client cannot express the operation")),
        };
        Ok(outcome)
    }

    fn session(&self, label: &str, step: &Fields) -> Result<&Session, Failure> {
        let name = self.text(label, step, "session")?;
        self.sessions
            .get(&name)
            .ok_or_else(|| format!("{label}: no session {name:?}"))
    }
}

/// The session helper's own account, with its loss signal (`lost()` and its
/// cancellation tokens) required to agree: done once ended, not while open.
fn session_state(label: &str, session: &Session) -> Result<&'static str, Failure> {
    let state = match session.end() {
        None => "open",
        Some(SessionEnd::Closed) => "closed",
        Some(SessionEnd::Lost(_)) => "lost",
    };
    let ended = session.lost().now_or_never().is_some();
    let cancelled = session.cancellation().is_cancelled();
    if (ended, cancelled) != (state != "open", state != "open") {
        return Err(format!(
            "{label}: the session is {state} but lost() is {ended} and its cancellation {cancelled}"
        ));
    }
    Ok(state)
}

/// A duration as the scenarios' whole milliseconds.
fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
