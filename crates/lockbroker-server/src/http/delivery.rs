//! A response body that tells the lock service when a grant was handed over.
//!
//! If the client disconnects while its acquire is in flight, hyper drops the
//! response before sending it; the [`Grant`] inside is dropped unconfirmed and
//! releases the lease at once, instead of leaving a lease nobody holds. A
//! lease whose answer cannot be written is released the same way, and the
//! caller told `500`: an empty `200` would confirm a grant it never saw.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use http_body::{Frame, SizeHint};
use lockbroker_core::{Grant, Lease, LockStore};

use super::error::ApiError;

/// A JSON body carrying unconfirmed grants; confirmed when hyper takes the bytes.
struct ConfirmOnSend<S: LockStore> {
    bytes: Option<Bytes>,
    grants: Vec<Grant<S>>,
}

impl<S: LockStore> http_body::Body for ConfirmOnSend<S> {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        for grant in this.grants.drain(..) {
            grant.delivered();
        }
        Poll::Ready(this.bytes.take().map(|bytes| Ok(Frame::data(bytes))))
    }

    fn is_end_stream(&self) -> bool {
        self.bytes.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.bytes.as_ref().map_or(0, |b| b.len() as u64))
    }
}

/// The `200` answer of `grant`, its lease written by `json`, whose sending
/// confirms the grant. When `json` fails, the grant is dropped unconfirmed
/// (which releases its lease) and the answer is `500`.
pub fn grant_answer<S: LockStore>(
    grant: Grant<S>,
    json: impl FnOnce(&Lease) -> serde_json::Result<Vec<u8>>,
) -> Result<Response, ApiError> {
    grants_answer(vec![grant], |leases| json(leases[0]))
}

/// The `200` answer of several `grants` at once, written by `json`, whose
/// sending confirms them all; all are released when it is never sent or
/// when `json` fails (then the answer is `500`).
pub fn grants_answer<S: LockStore>(
    grants: Vec<Grant<S>>,
    json: impl FnOnce(&[&Lease]) -> serde_json::Result<Vec<u8>>,
) -> Result<Response, ApiError> {
    let leases: Vec<&Lease> = grants.iter().map(Grant::lease).collect();
    match json(&leases) {
        Ok(json) => Ok(json_confirming(json, grants)),
        Err(error) => {
            drop(grants);
            Err(ApiError::Internal {
                event: "a granted lease could not be written; it was released",
                cause: error.to_string(),
            })
        }
    }
}

/// A `200` JSON response whose sending confirms `grants`.
fn json_confirming<S: LockStore>(json: Vec<u8>, grants: Vec<Grant<S>>) -> Response {
    let body = ConfirmOnSend {
        bytes: Some(Bytes::from(json)),
        grants,
    };
    let mut response = Response::new(Body::new(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use lockbroker_core::memory::MemoryStore;
    use lockbroker_core::{AcquireRequest, LockName, LockPolicy, LockService};
    use serde::ser::Error as _;
    use serde::{Serialize, Serializer};

    use super::*;

    /// A view whose serialization always fails.
    struct Unwritable;

    impl Serialize for Unwritable {
        fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(S::Error::custom("this view cannot be written"))
        }
    }

    #[tokio::test]
    async fn a_grant_whose_answer_cannot_be_written_is_released_and_answers_500() {
        let service = Arc::new(LockService::new(MemoryStore::new(), LockPolicy::default()));
        let name = LockName::parse("unwritable").expect("name");
        let ask = || AcquireRequest {
            ttl_ms: Some(60_000),
            ..AcquireRequest::default()
        };
        let grant = service.acquire(&name, ask()).await.expect("granted");
        let answer = grant_answer(grant, |_| serde_json::to_vec(&Unwritable))
            .expect_err("no answer to write")
            .into_response();
        assert_eq!(answer.status(), StatusCode::INTERNAL_SERVER_ERROR);

        // The release runs in the background: the lock frees within moments.
        let mut held = true;
        for _ in 0..100 {
            held = service.status(&name).await.expect("status").held;
            if !held {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!held, "the unanswered lease still holds the lock");
        let again = service.acquire(&name, ask()).await.expect("free again");
        again.delivered();
    }
}
