//! Giving the run's leases back: one release, the session's close for
//! several held under one (or one release-all without), retried within a
//! budget at the end of the run.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::supervisor::Supervisor;
use crate::client::BrokerError;

/// Budget for the final release.
const RELEASE_BUDGET: Duration = Duration::from_secs(5);

/// Releases, retrying transient failures within [`RELEASE_BUDGET`]; a
/// retried release of a lease already released still answers success.
pub async fn release(supervisor: &Supervisor<'_>) -> Result<(), BrokerError> {
    let deadline = Instant::now() + RELEASE_BUDGET;
    let mut pause = Duration::from_millis(100);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = left.max(Duration::from_millis(100));
        match release_once(supervisor, timeout).await {
            Ok(()) => return Ok(()),
            Err(error) if error.is_transient() && Instant::now() + pause < deadline => {
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            Err(error) => return Err(error),
        }
    }
}

/// One release attempt whose outcome does not matter (the lease may be
/// gone already); it frees the lock early if it is not.
pub async fn release_quietly(supervisor: &Supervisor<'_>) {
    let _ = release_once(supervisor, Duration::from_secs(2)).await;
}

/// One release of every lease: a single release, the close of their
/// session, or one release-all for several. A lease release-all could not
/// release counts as that lease's own release error (`lease_lost` for one
/// already gone), a session that is not open as `session_lost`.
async fn release_once(supervisor: &Supervisor<'_>, timeout: Duration) -> Result<(), BrokerError> {
    let broker = supervisor.broker;
    if let Some(session) = &supervisor.session {
        return super::session::close(broker, session, timeout).await;
    }
    if !supervisor.several() {
        let first = supervisor.first();
        let family = supervisor.family();
        return broker
            .release(family, &first.name, &first.token, timeout)
            .await
            .map(drop);
    }
    let leases: Vec<(&str, &str)> = supervisor
        .leases
        .iter()
        .map(|lease| (lease.name.as_str(), lease.token.as_str()))
        .collect();
    let answer = broker.release_all(&leases, timeout).await?;
    let Some(results) = answer.get("results").and_then(Value::as_array) else {
        return Err(BrokerError::Unexpected(
            "the release-all answer lacks results".to_owned(),
        ));
    };
    let refusals = results.iter().filter_map(|result| {
        if result.get("released") == Some(&Value::Bool(true)) {
            return None;
        }
        let error = result.get("error").and_then(Value::as_object).cloned();
        Some(match error {
            Some(error) => BrokerError::of_lease(error),
            None => BrokerError::Unexpected("a release-all result without its error".to_owned()),
        })
    });
    // A lost lease says the most about the run: report it first.
    let mut refusals: Vec<BrokerError> = refusals.collect();
    refusals.sort_by_key(|error| error.code() != "lease_lost");
    match refusals.into_iter().next() {
        Some(error) => Err(error),
        None => Ok(()),
    }
}
