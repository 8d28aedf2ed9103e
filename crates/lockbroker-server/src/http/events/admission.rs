//! Who may open an event stream: each API key up to its share of the
//! broker's streams, the last few kept for admin keys, and only so many
//! opening states read from the store at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::{Caller, Scope};
use crate::config::HttpSettings;
use crate::http::error::{ApiError, StreamLimit};

/// The stream limits above the broker's own count of open streams.
pub struct StreamAdmission {
    /// The streams a broker serves (`http.max_event_streams`).
    max_streams: usize,
    /// The most one key may hold.
    share: usize,
    /// How many of the last streams only admin keys may take.
    admin_reserve: usize,
    /// Open streams by key id.
    held: Mutex<HashMap<String, usize>>,
    /// One permit per opening-state page being read from the store.
    state_reads: Arc<Semaphore>,
}

/// A stream's place in its key's share; given back when dropped.
pub struct StreamPass {
    admission: Arc<StreamAdmission>,
    key: Option<String>,
}

impl StreamAdmission {
    /// The limits `settings` name.
    pub fn new(settings: &HttpSettings) -> Self {
        let max_streams = settings.max_event_streams;
        let part = |percent: u32| max_streams * percent as usize / 100;
        Self {
            max_streams,
            share: part(settings.event_stream_share_percent).max(1),
            admin_reserve: part(settings.event_stream_admin_reserve_percent),
            held: Mutex::new(HashMap::new()),
            state_reads: Arc::new(Semaphore::new(settings.max_stream_state_reads)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets `caller` open a stream while `open` streams are open on the
    /// broker, or says which limit it met. Without API keys every caller is
    /// the same anonymous one, so neither the share nor the reserve applies.
    pub fn admit(self: &Arc<Self>, caller: &Caller, open: usize) -> Result<StreamPass, ApiError> {
        let Caller::Key(key) = caller else {
            return Ok(StreamPass {
                admission: Arc::clone(self),
                key: None,
            });
        };
        let left = self.max_streams.saturating_sub(open);
        if left <= self.admin_reserve && !caller.has_scope(Scope::Admin) {
            return Err(ApiError::TooManyStreams(StreamLimit::AdminReserve));
        }
        let mut held = self.lock();
        let count = held.entry(key.id().to_owned()).or_default();
        if *count >= self.share {
            return Err(ApiError::TooManyStreams(StreamLimit::KeyShare));
        }
        *count += 1;
        Ok(StreamPass {
            admission: Arc::clone(self),
            key: Some(key.id().to_owned()),
        })
    }

    /// A permit to read a stream's first page now, or `429` when the broker
    /// reads as many as it allows.
    pub fn try_read_state(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        Arc::clone(&self.state_reads)
            .try_acquire_owned()
            .map_err(|_| ApiError::TooManyStreams(StreamLimit::StateReads))
    }

    /// The semaphore an open stream waits on for its next page.
    pub fn state_reads(&self) -> Arc<Semaphore> {
        Arc::clone(&self.state_reads)
    }
}

impl Drop for StreamPass {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else {
            return;
        };
        let mut held = self.admission.lock();
        if let Some(count) = held.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                held.remove(&key);
            }
        }
    }
}
