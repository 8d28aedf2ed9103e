//! A response body that tells the lock service when a grant was handed over.
//!
//! If the client disconnects while its acquire is in flight, hyper drops the
//! response before sending it; the [`Grant`] inside is dropped unconfirmed and
//! releases the lease at once, instead of leaving a lease nobody holds.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use http_body::{Frame, SizeHint};
use lockbroker_core::{Grant, LockStore};

/// A JSON body carrying an unconfirmed grant; confirmed when hyper takes the bytes.
struct ConfirmOnSend<S: LockStore> {
    bytes: Option<Bytes>,
    grant: Option<Grant<S>>,
}

impl<S: LockStore> http_body::Body for ConfirmOnSend<S> {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(grant) = this.grant.take() {
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

/// A `200` JSON response whose sending confirms `grant`.
pub fn json_confirming<S: LockStore>(json: Vec<u8>, grant: Grant<S>) -> Response {
    let body = ConfirmOnSend {
        bytes: Some(Bytes::from(json)),
        grant: Some(grant),
    };
    let mut response = Response::new(Body::new(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
