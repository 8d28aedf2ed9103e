//! The candidates of `campaign` steps: each one's election and where its
//! campaign is, and its own account for `leader_state`.

use lockbroker_client::{Election, Error, Leadership};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::{object, Failure, Fields, Outcome, AWAIT_LIMIT};

/// A `campaign` step's candidate: its election, and where its campaign is.
pub(super) struct Candidate {
    pub(super) election: Election,
    pub(super) term: Term,
}

/// Where a candidate's campaign is.
pub(super) enum Term {
    /// Campaigning in a task of its own (an `async` step not yet taken up).
    Campaigning(JoinHandle<Result<Leadership, Error>>),
    /// Won: the term, renewed until lost or resigned.
    Won(Leadership),
    /// The campaign gave up; the error, until a step hands it on.
    Failed(Option<Error>),
    /// [`Leadership::resign`] took the term (or a resign ended the campaign).
    Resigned,
}

impl Candidate {
    /// Takes up the campaign's answer once it finished (when `wait`, waits
    /// for it first); a campaign still running stays as it is.
    pub(super) async fn settle(&mut self, wait: bool, label: &str) -> Result<(), Failure> {
        let Term::Campaigning(task) = &mut self.term else {
            return Ok(());
        };
        if !wait && !task.is_finished() {
            return Ok(());
        }
        self.term = match timeout(AWAIT_LIMIT, &mut *task).await {
            Ok(Ok(Ok(leadership))) => Term::Won(leadership),
            Ok(Ok(Err(error))) => Term::Failed(Some(error)),
            Ok(Err(error)) => return Err(format!("{label}: the campaign failed: {error}")),
            Err(_) => {
                task.abort();
                let limit = AWAIT_LIMIT.as_secs();
                return Err(format!("{label}: not elected within {limit} s"));
            }
        };
        Ok(())
    }

    /// The election's outcome as a step's: the term won, or why it gave up.
    pub(super) fn elected(&mut self, label: &str) -> Result<Outcome, Failure> {
        match &mut self.term {
            Term::Won(leadership) => {
                Ok(Outcome::fields(object(json!({"term": leadership.term()}))))
            }
            Term::Failed(error) => {
                let error = error
                    .take()
                    .ok_or_else(|| format!("{label}: awaited twice"))?;
                Ok(Outcome::of(Err(error), |()| Fields::new()))
            }
            Term::Campaigning(_) | Term::Resigned => {
                Err(format!("{label}: the candidate was not elected"))
            }
        }
    }
}

/// The candidate's own account: its term while it leads and whether that
/// term was lost (none before it won or once it resigned, when it holds no
/// [`Leadership`]), and who leads as the election tells it.
pub(super) async fn leader_state(candidate: &Candidate) -> Outcome {
    let leadership = match &candidate.term {
        Term::Won(leadership) => Some(leadership),
        _ => None,
    };
    let is_leader = leadership.is_some_and(Leadership::is_leader);
    let term = leadership.filter(|_| is_leader).map(Leadership::term);
    let lost_reason = leadership.and_then(Leadership::lost_reason);
    Outcome::of(candidate.election.leader().await, |current| {
        object(json!({
            "is_leader": is_leader, "term": term, "lost": lost_reason.is_some(),
            "lost_reason": lost_reason.map(|reason| reason.as_str()),
            "leader": current.as_ref().and_then(|c| c.owner.as_deref()),
            "leader_term": current.as_ref().map(|c| c.term),
        }))
    })
}
