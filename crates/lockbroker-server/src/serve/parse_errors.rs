//! JSON bodies for the errors hyper answers by itself.
//!
//! A request hyper cannot parse (a bad request line, a NUL in a header,
//! conflicting `Content-Length`s, a path or header section over its limits)
//! never reaches the router: hyper writes a bare `400`, `414` or `431` with an
//! empty body and closes the connection, and offers no hook to change it. So
//! the connection's writer recognises exactly that bare answer and sends the
//! documented `{"error": {...}}` shape in its place. Every response the router
//! makes carries a JSON body, so a bodiless `4xx` can only be hyper's own.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection whose bodiless parse-error answers are replaced by JSON ones.
pub struct JsonParseErrors<T> {
    inner: T,
    /// A replacement being written: its bytes, how many went out, and how
    /// many bytes of hyper's own answer it stands for.
    replacing: Option<(Vec<u8>, usize, usize)>,
}

impl<T> JsonParseErrors<T> {
    /// Wraps one accepted connection.
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            replacing: None,
        }
    }
}

/// The JSON answer standing for hyper's bodiless one in `written`, if that is
/// what `written` is.
///
/// Every write of every response passes here, so the cheap byte tests come
/// first: an answer with a body never ends with the blank line.
fn replacement(written: &[u8]) -> Option<Vec<u8>> {
    if !written.ends_with(b"\r\n\r\n") || !written.starts_with(b"HTTP/1.1 4") {
        return None;
    }
    let head = std::str::from_utf8(written).ok()?;
    let rest = head.strip_prefix("HTTP/1.1 ")?;
    if !head
        .to_ascii_lowercase()
        .contains("\r\ncontent-length: 0\r\n")
    {
        return None;
    }
    let (status, code, message) = match rest.get(..4)? {
        "400 " => (
            "400 Bad Request",
            "invalid_request",
            "the request is not valid HTTP/1.1: check the request line, the header names and \
             values, and that Content-Length is sent once",
        ),
        "414 " => (
            "414 URI Too Long",
            "uri_too_long",
            "the request path is longer than this broker accepts",
        ),
        "431 " => (
            "431 Request Header Fields Too Large",
            "headers_too_large",
            "the request headers are larger or more numerous than this broker accepts",
        ),
        _ => return None,
    };
    let body = format!(r#"{{"error":{{"code":"{code}","message":"{message}"}}}}"#);
    Some(
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<T: AsyncWrite + Unpin> JsonParseErrors<T> {
    /// Writes out the replacement in progress; ready with the length of
    /// hyper's answer once all of it is sent.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Some((bytes, sent, stands_for)) = &mut self.replacing else {
            return Poll::Ready(Ok(0));
        };
        while *sent < bytes.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *sent += n;
        }
        let stands_for = *stands_for;
        self.replacing = None;
        Poll::Ready(Ok(stands_for))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for JsonParseErrors<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for JsonParseErrors<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.replacing.is_none() {
            match replacement(buf) {
                Some(json) => this.replacing = Some((json, 0, buf.len())),
                None => return Pin::new(&mut this.inner).poll_write(cx, buf),
            }
        }
        this.poll_replacement(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.replacing.is_none() {
            // hyper's bare answer is one buffer: a head without a body.
            let mut filled = bufs.iter().filter(|b| !b.is_empty());
            match (filled.next().and_then(|b| replacement(b)), filled.next()) {
                (Some(json), None) => {
                    let stands_for = bufs.iter().map(|b| b.len()).sum();
                    this.replacing = Some((json, 0, stands_for));
                }
                _ => return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs),
            }
        }
        this.poll_replacement(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bodiless_parse_error_answer_is_replaced() {
        let bare = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\
                     date: Tue, 01 Dec 2026 03:00:00 GMT\r\n\r\n";
        let json = String::from_utf8(replacement(bare).expect("replaced")).expect("utf-8");
        assert!(json.starts_with("HTTP/1.1 431 "));
        let body = json.split("\r\n\r\n").nth(1).expect("body");
        let value: serde_json::Value = serde_json::from_str(body).expect("JSON body");
        assert_eq!(value["error"]["code"], "headers_too_large");

        let routed = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\
                       content-length: 61\r\n\r\n";
        assert!(
            replacement(routed).is_none(),
            "a router answer keeps its body"
        );
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert!(replacement(ok).is_none());
    }
}
