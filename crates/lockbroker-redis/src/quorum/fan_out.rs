//! One fan-out for every step the quorum runs on its nodes: the step is sent
//! to every node at once, and the caller is answered as soon as the answers
//! in hand decide it, without waiting for the slowest node. The answers that
//! come later are handed to a settle step in the background (a late grant
//! is given the agreed fence or undone), so a slow minority costs a request
//! nothing and still ends up consistent.
//!
//! A node whose answer timed out is known slow: the next steps are still
//! sent to it (and settled), but once a majority answered a decision does
//! not wait for it, until it answers within its timeout again. Its state is logged when it changes
//! and shown as the `lockbroker_quorum_node_slow` gauge.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use lockbroker_core::StoreError;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::QuorumStore;
use crate::store::RedisLockStore;

/// Each node's answer to one step, by its place in the node list; `None`
/// while it has not answered.
pub(super) type Answers<T> = Vec<Option<Result<T, StoreError>>>;

/// What a strategy is shown after each answer: the answers in hand, and how
/// many nodes not known slow may still answer.
pub(super) struct Progress<'a, T> {
    pub answers: &'a Answers<T>,
    pub awaited: usize,
}

impl<T> Progress<'_, T> {
    /// The answers that came, whatever they said.
    pub fn answered(&self) -> usize {
        self.answers
            .iter()
            .filter(|a| matches!(a, Some(Ok(_))))
            .count()
    }

    /// How many answers say `what`.
    pub fn count(&self, what: impl Fn(&T) -> bool) -> usize {
        (self.answers.iter().flatten().flatten())
            .filter(|answer| what(answer))
            .count()
    }
}

type NodeAnswer<T> = Pin<Box<dyn Future<Output = (usize, Result<T, StoreError>)> + Send>>;

/// The answers of the nodes that had not answered when the step was
/// decided. They run on whether or not anyone settles them: a step once
/// sent is never abandoned halfway by the broker.
pub(super) struct Late<T> {
    rest: FuturesUnordered<NodeAnswer<T>>,
}

impl<T: Send + 'static> Late<T> {
    /// Whether every node answered before the decision.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// Runs `settle` on each late answer as it comes, in the background.
    pub fn settle<F, Fut>(mut self, mut settle: F) -> JoinHandle<()>
    where
        F: FnMut(usize, Result<T, StoreError>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        tokio::spawn(async move {
            while let Some((at, answer)) = self.rest.next().await {
                settle(at, answer).await;
            }
        })
    }

    /// Lets the late answers come in the background with nothing to settle
    /// (an extend or a release applies itself on the node).
    pub fn finish(self) {
        if !self.is_empty() {
            drop(self.settle(|_, _| async {}));
        }
    }
}

/// Which nodes answered their last step too late, as this broker saw it.
pub(super) struct Slowness {
    slow: Vec<AtomicBool>,
    endpoints: Vec<String>,
    /// A node's own timeout: an answer that failed after about this long
    /// timed out.
    timeout: Duration,
}

impl Slowness {
    pub fn new(endpoints: Vec<String>, timeout: Duration) -> Self {
        Self {
            slow: endpoints.iter().map(|_| AtomicBool::new(false)).collect(),
            endpoints,
            timeout,
        }
    }

    /// Whether node `at` timed out last time and has not answered in time
    /// since.
    pub fn is_slow(&self, at: usize) -> bool {
        self.slow.get(at).is_some_and(|s| s.load(Ordering::Relaxed))
    }

    /// Per node: whether it is known slow, for the gauges.
    pub fn flags(&self) -> Vec<bool> {
        (0..self.slow.len()).map(|at| self.is_slow(at)).collect()
    }

    /// Notes how node `at` answered a step that took `elapsed`: a lost or
    /// missing answer after about the node's timeout makes it slow, an
    /// answer within the timeout makes it fast again (an error says nothing
    /// of its speed: it may not have been asked).
    fn record<T>(&self, at: usize, answer: &Result<T, StoreError>, elapsed: Duration) {
        let Some(flag) = self.slow.get(at) else {
            return;
        };
        let timed_out = matches!(
            answer,
            Err(StoreError::OutcomeUnknown(_) | StoreError::Unavailable(_))
        ) && elapsed >= self.timeout.mul_f64(0.9);
        let endpoint = self.endpoints[at].as_str();
        if timed_out {
            if !flag.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    node = at,
                    endpoint,
                    "quorum node is slow: its answers are no longer waited for until it \
                     answers within its timeout again"
                );
            }
        } else if answer.is_ok() && elapsed < self.timeout && flag.swap(false, Ordering::Relaxed) {
            tracing::info!(node = at, endpoint, "quorum node answers in time again");
        }
    }
}

impl QuorumStore {
    /// Sends `step` to every node at once and gathers answers until
    /// `decided` says the answers in hand decide the step, or no node is
    /// left to answer. Once a majority answered, a node known slow is
    /// passed over (it counts as a node that will not answer); before, it
    /// may be the answer that makes any decision, and is waited for up to
    /// its timeout, as is every node while fewer than a majority are fast.
    /// A misconfigured node is not asked: it answers as a node that is
    /// down, so it counts toward no majority.
    pub(super) async fn fan_out<T, Fut>(
        &self,
        step: impl Fn(usize, RedisLockStore) -> Fut,
        decided: impl Fn(&Progress<'_, T>) -> bool,
    ) -> (Answers<T>, Late<T>)
    where
        T: Send + 'static,
        Fut: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let inner = &self.inner;
        let count = inner.nodes.len();
        let mut answers: Answers<T> = (0..count).map(|_| None).collect();
        let rest = FuturesUnordered::new();
        for (at, node) in inner.nodes.iter().enumerate() {
            if inner.standing.is_misconfigured(at) {
                answers[at] = Some(Err(StoreError::Unavailable(
                    "the node is misconfigured (a replica, or a server listed twice)".into(),
                )));
                continue;
            }
            let answer = step(at, node.clone());
            let slowness = std::sync::Arc::clone(&inner.slowness);
            rest.push(Box::pin(async move {
                let started = Instant::now();
                let answer = answer.await;
                slowness.record(at, &answer, started.elapsed());
                (at, answer)
            }) as NodeAnswer<T>);
        }
        let mut late = Late { rest };
        let trust_slowness =
            (0..count).filter(|at| !inner.slowness.is_slow(*at)).count() >= inner.majority;
        loop {
            // A slow node is passed over only once a majority answered: until
            // then it may be the one answer that makes a decision at all.
            let answered = answers.iter().filter(|a| matches!(a, Some(Ok(_)))).count();
            let pass_slow = trust_slowness && answered >= inner.majority;
            let awaited = (0..count)
                .filter(|at| answers[*at].is_none())
                .filter(|at| !(pass_slow && inner.slowness.is_slow(*at)))
                .count();
            let progress = Progress {
                answers: &answers,
                awaited,
            };
            if awaited == 0 || decided(&progress) {
                break;
            }
            match late.rest.next().await {
                Some((at, answer)) => answers[at] = Some(answer),
                None => break,
            }
        }
        (answers, late)
    }
}

/// The answers as the tallies take them: a node that had not answered when
/// the step was decided counts as one that did not answer.
pub(super) fn in_hand<T>(answers: Answers<T>) -> Vec<Result<T, StoreError>> {
    answers
        .into_iter()
        .map(|answer| {
            answer.unwrap_or_else(|| {
                Err(StoreError::Unavailable(
                    "the node had not answered when a majority decided the step".into(),
                ))
            })
        })
        .collect()
}
