//! [`SessionBook`]: the sessions this broker opened or last kept alive, by
//! API key, for its metrics and its limit of sessions per key. A broker
//! cannot see the others' sessions: both are this broker's share.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::Principal;
use crate::session::SessionId;

/// The most sessions the book follows; beyond it, the metric undercounts
/// and the per-key limit counts only the sessions followed.
const CAPACITY: usize = 100_000;

/// The sessions this broker knows open, by key.
#[derive(Default)]
pub(in crate::service) struct SessionBook {
    state: Mutex<BookState>,
}

#[derive(Default)]
struct BookState {
    /// When each known session expires unless kept, and whose it is.
    sessions: HashMap<SessionId, (Instant, String)>,
    /// How many of them each key holds.
    per_key: HashMap<String, u32>,
    /// Sessions that expired without a close, since the broker started.
    expired: u64,
}

impl SessionBook {
    fn lock(&self) -> MutexGuard<'_, BookState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `principal` may open another session: it holds fewer than
    /// `max` that this broker knows open.
    pub(in crate::service) fn may_open(&self, principal: &Principal, max: u32) -> bool {
        let mut state = self.lock();
        state.prune(Instant::now());
        state.per_key.get(principal.as_str()).copied().unwrap_or(0) < max
    }

    /// Session `id` of `principal` was opened or kept, valid `validity_ms`.
    pub(in crate::service) fn kept(&self, id: &SessionId, principal: &Principal, validity_ms: u64) {
        let mut state = self.lock();
        state.prune(Instant::now());
        let until = Instant::now() + Duration::from_millis(validity_ms);
        if let Some((known, _)) = state.sessions.get_mut(id) {
            *known = until;
        } else if state.sessions.len() < CAPACITY {
            let key = principal.as_str().to_owned();
            *state.per_key.entry(key.clone()).or_default() += 1;
            state.sessions.insert(id.clone(), (until, key));
        }
    }

    /// Session `id` was closed.
    pub(in crate::service) fn ended(&self, id: &SessionId) {
        let mut state = self.lock();
        if let Some((_, key)) = state.sessions.remove(id) {
            state.release(&key);
        }
    }

    /// Sessions open and sessions expired so far, as this broker knows them.
    pub(in crate::service) fn counts(&self) -> (u64, u64) {
        let mut state = self.lock();
        state.prune(Instant::now());
        (state.sessions.len() as u64, state.expired)
    }
}

impl BookState {
    fn prune(&mut self, now: Instant) {
        let gone: Vec<SessionId> = (self.sessions.iter())
            .filter(|(_, (until, _))| *until <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            if let Some((_, key)) = self.sessions.remove(&id) {
                self.release(&key);
                self.expired += 1;
            }
        }
    }

    fn release(&mut self, key: &str) {
        if let Some(count) = self.per_key.get_mut(key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_key.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_key_opens_sessions_up_to_its_limit_and_again_once_one_ends() {
        let book = SessionBook::default();
        let (alice, bob) = (Principal::key("alice"), Principal::key("bob"));
        let (first, second) = (SessionId::generate(), SessionId::generate());
        book.kept(&first, &alice, 1_000);
        book.kept(&second, &alice, 5_000);
        assert!(!book.may_open(&alice, 2), "two of two");
        assert!(book.may_open(&bob, 2), "another key's count");
        book.kept(&first, &bob, 1_000);
        assert!(
            !book.may_open(&alice, 2),
            "a keepalive counts the session once"
        );
        book.ended(&second);
        assert!(book.may_open(&alice, 2), "closed");
        tokio::time::advance(Duration::from_millis(1_500)).await;
        assert_eq!(book.counts(), (0, 1), "expired without a close");
    }
}
