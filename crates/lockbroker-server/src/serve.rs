//! The accept loop around the router: a cap on open connections, TLS
//! handshakes, the header read timeout, and graceful shutdown.
//!
//! Written on hyper directly (rather than `axum::serve`) because the header
//! read timeout, the one defence against clients that trickle their headers
//! forever (slowloris), needs hyper's timer, which `axum::serve` does not set.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request};
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

mod parse_errors;

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
    /// Serve HTTPS with this acceptor; plain HTTP when `None`.
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
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout)
        .max_buf_size(CONNECTION_BUFFER);
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
            http: http.clone(),
            router: router.clone(),
            peer,
            handshake_timeout: options.header_read_timeout,
        };
        let watcher = graceful.watcher();
        // Two kinds of task, so a plain connection does not carry the room a
        // TLS session needs for as long as it stays open.
        match options.tls.clone() {
            None => tokio::spawn(async move {
                let _slot = slot;
                connection.run_plain(stream, watcher).await;
            }),
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
    http: http1::Builder,
    router: Router,
    peer: SocketAddr,
    handshake_timeout: Duration,
}

impl Connection {
    async fn run_plain(self, stream: TcpStream, watcher: Watcher) {
        let service = with_peer(&self.router, self.peer);
        let result = watcher
            .watch(
                self.http
                    .serve_connection(TokioIo::new(JsonParseErrors::new(stream)), service),
            )
            .await;
        self.ended(result);
    }

    async fn run_tls(self, stream: TcpStream, acceptor: TlsAcceptor, watcher: Watcher) {
        let peer = self.peer;
        let stream =
            match tokio::time::timeout(self.handshake_timeout, acceptor.accept(stream)).await {
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
        let service = with_peer(&self.router, self.peer);
        let result = watcher
            .watch(
                self.http
                    .serve_connection(TokioIo::new(JsonParseErrors::new(stream)), service),
            )
            .await;
        self.ended(result);
    }

    fn ended(&self, result: hyper::Result<()>) {
        if let Err(error) = result {
            let peer = self.peer;
            tracing::debug!(%peer, %error, "connection ended with an error");
        }
    }
}

/// The router as hyper's service; handlers may read the peer address like
/// with `axum::serve`.
fn with_peer(
    router: &Router,
    peer: SocketAddr,
) -> TowerToHyperService<
    impl tower::Service<
            Request<Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
            Future = impl Send,
        > + Clone,
> {
    TowerToHyperService::new(
        router
            .clone()
            .map_request(move |mut request: Request<Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            }),
    )
}
