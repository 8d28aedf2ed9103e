//! The accept loop around the router: a cap on open connections, TLS
//! handshakes, HTTP/1.1 or HTTP/2 by connection, the header read timeout,
//! and graceful shutdown.
//!
//! Written on hyper directly (rather than `axum::serve`) because the header
//! read timeout, the one defence against clients that trickle their headers
//! forever (slowloris), needs hyper's timer, which `axum::serve` does not set.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::future::RouteFuture;
use axum::Router;
use futures_util::future::{Either, FutureExt};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2 as h2_conn};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

mod http2;
mod parse_errors;

use http2::{Activity, Counted};
use parse_errors::JsonParseErrors;

/// The bytes a connection buffers for writing, in the broker and in the
/// kernel each: far above any answer but a long listing page, and what a
/// stalled event-stream reader can hold up before it is told it lagged.
const CONNECTION_BUFFER: usize = 64 * 1024;

/// How connections are accepted and read.
#[derive(Clone)]
pub struct ServeOptions {
    /// A connection must deliver its request headers (and finish its TLS
    /// handshake) within this, or it is closed.
    pub header_read_timeout: Duration,
    /// Open connections at once; the next waits in the accept queue.
    pub max_connections: usize,
    /// Requests an HTTP/2 connection may have open at once.
    pub max_streams_per_connection: u32,
    /// Serve HTTPS with this acceptor (HTTP/2 or HTTP/1.1 as the client's
    /// ALPN chooses); plain HTTP when `None` (HTTP/2 for a connection that
    /// opens with its preface, HTTP/1.1 otherwise).
    pub tls: Option<TlsAcceptor>,
}

/// Serves `router` on `listener` until `shutdown` completes, then stops
/// accepting, lets every open connection finish its request in flight, and
/// returns once all are closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
    let mut http1 = http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout)
        .max_buf_size(CONNECTION_BUFFER);
    let mut http2 = h2_conn::Builder::new(TokioExecutor::new());
    http2
        .timer(TokioTimer::new())
        .max_concurrent_streams(options.max_streams_per_connection.max(1))
        .max_send_buf_size(CONNECTION_BUFFER)
        // The header section HTTP/1.1 takes (its read buffer's limit), where
        // HTTP/2's default would refuse more than 16 KiB.
        .max_header_list_size(CONNECTION_BUFFER as u32);
    let served = Arc::new(Served {
        http1,
        http2,
        router,
        handshake_timeout: options.header_read_timeout,
    });
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: pause instead of
                    // spinning on an error that persists for a moment.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        // A fixed send buffer: an event stream whose reader stalls fills it
        // and then lags, instead of the kernel growing it to megabytes.
        let _ = socket2::SockRef::from(&stream).set_send_buffer_size(CONNECTION_BUFFER);
        let connection = Connection {
            served: Arc::clone(&served),
            peer,
        };
        let watcher = graceful.watcher();
        // Two kinds of task, so a plain connection does not carry the room a
        // TLS session needs for as long as it stays open.
        match options.tls.clone() {
            None => tokio::spawn(
                connection
                    .run_plain(stream, watcher)
                    .map(move |()| drop(slot)),
            ),
            Some(acceptor) => tokio::spawn(async move {
                let _slot = slot;
                connection.run_tls(stream, acceptor, watcher).await;
            }),
        };
    }
    drop(listener);
    graceful.shutdown().await;
}

/// One accepted connection and what it needs to be served.
struct Connection {
    served: Arc<Served>,
    peer: SocketAddr,
}

/// What every connection is served with. Shared rather than copied into
/// each connection's task, which lives as long as the connection: a waiting
/// acquire holds one of those for all of its wait.
struct Served {
    http1: http1::Builder,
    http2: h2_conn::Builder<TokioExecutor>,
    router: Router,
    handshake_timeout: Duration,
}

impl Connection {
    /// Serves a plain connection: HTTP/2 when it opens with the preface,
    /// else HTTP/1.1. Written with combinators rather than as an `async fn`:
    /// the future is the connection task's for as long as the connection
    /// lives (a waiting acquire's whole wait), and an `async fn` keeps the
    /// connection and its stream twice beside the server's future.
    fn run_plain(self, stream: TcpStream, watcher: Watcher) -> impl Future<Output = ()> + Send {
        let opening = http2::preface_of(stream);
        tokio::time::timeout(self.served.handshake_timeout, opening).then(move |opened| {
            match opened {
                // Boxed, so the task of every HTTP/1.1 connection does not
                // carry the room of an HTTP/2 one.
                Ok((stream, Ok(true))) => Either::Left(Box::pin(self.run_http2(stream, watcher))),
                Ok((stream, Ok(false))) => {
                    Either::Right(Either::Left(self.run_http1(stream, watcher)))
                }
                Ok((_, Err(_))) | Err(_) => Either::Right(Either::Right(std::future::ready(()))),
            }
        })
    }

    async fn run_tls(self, stream: TcpStream, acceptor: TlsAcceptor, watcher: Watcher) {
        let peer = self.peer;
        let stream = match tokio::time::timeout(
            self.served.handshake_timeout,
            acceptor.accept(stream),
        )
        .await
        {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => {
                tracing::debug!(%peer, %error, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%peer, "TLS handshake timed out");
                return;
            }
        };
        if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
            return Box::pin(self.run_http2(stream, watcher)).await;
        }
        self.run_http1(stream, watcher).await;
    }

    /// Serves HTTP/1.1, with hyper's bare parse-error answers made JSON
    /// ([`JsonParseErrors`]), until the client closes or the broker shuts
    /// down.
    fn run_http1<I>(self, stream: I, watcher: Watcher) -> impl Future<Output = ()> + Send
    where
        I: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let service = TowerToHyperService::new(self.served.router.clone());
        let io = TokioIo::new(JsonParseErrors::new(stream));
        let served = watcher.watch(self.served.http1.serve_connection(io, service));
        served.map(move |result| self.ended(result))
    }

    /// Serves HTTP/2 until the client closes, the broker shuts down, or the
    /// connection has been idle for the header read timeout
    /// ([`Activity::idle_for`]): hyper's HTTP/2 server has no timeout of
    /// its own for a client that opens a connection and sends nothing.
    async fn run_http2<I>(self, stream: I, watcher: Watcher)
    where
        I: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let activity = Arc::new(Activity::default());
        let counted = Arc::clone(&activity);
        let router = self.served.router.clone();
        let counting = move |answer: RouteFuture<Infallible>| {
            let request = counted.begin();
            async move {
                let response = answer.await?;
                Ok::<_, Infallible>(response.map(|body| Counted::body(body, request)))
            }
        };
        let service = TowerToHyperService::new(ServiceExt::<hyper::Request<Incoming>>::map_future(
            router, counting,
        ));
        let served = watcher.watch(
            self.served
                .http2
                .serve_connection(TokioIo::new(stream), service),
        );
        let result = tokio::select! {
            result = served => result,
            () = activity.idle_for(self.served.handshake_timeout) => Ok(()),
        };
        self.ended(result);
    }

    fn ended(&self, result: hyper::Result<()>) {
        if let Err(error) = result {
            let peer = self.peer;
            tracing::debug!(%peer, %error, "connection ended with an error");
        }
    }
}
