//! What HTTP/2 needs beside hyper's own connection: telling it from
//! HTTP/1.1 on a plain connection, and closing connections that sit idle.
//!
//! HTTP/2 lets one connection carry many requests at once, so a client
//! holding many waiting acquires needs one connection (and its buffers) for
//! all of them instead of one each. hyper's HTTP/2 server has no header read
//! timeout: a connection that sends its preface and then nothing, or a
//! request's headers a byte at a time, would hold one of
//! `http.max_connections` for good. [`Activity`] stands in for that timeout.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use tokio::net::TcpStream;

/// The bytes every HTTP/2 connection opens with (RFC 9113, section 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How long to wait for the rest of a preface that arrived in parts, so
/// that peeking again does not spin on the bytes already there.
const PREFACE_PAUSE: Duration = Duration::from_millis(5);

/// Whether a plain connection opens with the HTTP/2 preface (HTTP/2 with
/// prior knowledge, "h2c"). Peeks without consuming, so whichever server
/// takes the connection reads it from its first byte. An HTTP/1.1 request
/// differs from the preface by its second byte at the latest; a connection
/// that closes first is left to the HTTP/1.1 server, which ends it. Gives
/// the stream back with the answer, for the server that takes it.
pub(super) async fn preface_of(stream: TcpStream) -> (TcpStream, std::io::Result<bool>) {
    let opens = opens_with_preface(&stream).await;
    (stream, opens)
}

async fn opens_with_preface(stream: &TcpStream) -> std::io::Result<bool> {
    let mut first = [0_u8; PREFACE.len()];
    loop {
        let read = stream.peek(&mut first).await?;
        if read == 0 || first[..read] != PREFACE[..read] {
            return Ok(false);
        }
        if read == PREFACE.len() {
            return Ok(true);
        }
        tokio::time::sleep(PREFACE_PAUSE).await;
    }
}

/// The requests of one HTTP/2 connection: how many are in progress (until
/// their answer's body is sent or dropped), and a count of every request
/// that began or ended.
#[derive(Default)]
pub(super) struct Activity {
    in_progress: AtomicUsize,
    changes: AtomicU64,
}

impl Activity {
    /// Counts one request in progress until the returned guard is dropped.
    pub(super) fn begin(self: &Arc<Self>) -> InProgress {
        self.in_progress.fetch_add(1, Ordering::Relaxed);
        self.changes.fetch_add(1, Ordering::Relaxed);
        InProgress(Arc::clone(self))
    }

    /// Completes once the connection has had no request in progress, and
    /// none beginning or ending, for a whole `period`: between one and two
    /// periods after its last request ended (or after it opened).
    pub(super) async fn idle_for(&self, period: Duration) {
        let mut seen = self.changes.load(Ordering::Relaxed);
        loop {
            tokio::time::sleep(period).await;
            let now = self.changes.load(Ordering::Relaxed);
            if now == seen && self.in_progress.load(Ordering::Relaxed) == 0 {
                return;
            }
            seen = now;
        }
    }
}

/// One request in progress on an HTTP/2 connection.
pub(super) struct InProgress(Arc<Activity>);

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.in_progress.fetch_sub(1, Ordering::Relaxed);
        self.0.changes.fetch_add(1, Ordering::Relaxed);
    }
}

/// An answer's body that keeps its request in progress until it is sent
/// or dropped: an event stream is a request in progress for as long as it
/// is open.
pub(super) struct Counted {
    body: Body,
    _request: InProgress,
}

impl Counted {
    /// `body`, with `request` counted until it ends.
    pub(super) fn body(body: Body, request: InProgress) -> Body {
        Body::new(Self {
            body,
            _request: request,
        })
    }
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_only_after_a_whole_period_without_a_request() {
        let activity = Arc::new(Activity::default());
        let period = Duration::from_secs(10);
        let request = activity.begin();
        let watch = tokio::spawn({
            let activity = Arc::clone(&activity);
            async move { activity.idle_for(period).await }
        });
        tokio::time::sleep(Duration::from_secs(25)).await;
        assert!(!watch.is_finished(), "a request in progress is not idle");
        drop(request);
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert!(!watch.is_finished(), "a request ended in the last period");
        drop(activity.begin());
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!watch.is_finished(), "a request began in the last period");
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(watch.is_finished(), "a whole period without a request");
    }
}
