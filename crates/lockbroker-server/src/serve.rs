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
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

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
        .header_read_timeout(options.header_read_timeout);
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
        let connection = Connection {
            http: http.clone(),
            router: router.clone(),
            peer,
            handshake_timeout: options.header_read_timeout,
        };
        let watcher = graceful.watcher();
        let tls = options.tls.clone();
        tokio::spawn(async move {
            let _slot = slot;
            connection.run(stream, tls, watcher).await;
        });
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
    async fn run(
        self,
        stream: TcpStream,
        tls: Option<TlsAcceptor>,
        watcher: hyper_util::server::graceful::Watcher,
    ) {
        let peer = self.peer;
        // Handlers may read the peer address like with `axum::serve`.
        let service = self
            .router
            .map_request(move |mut request: Request<Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            });
        let service = TowerToHyperService::new(service);
        let result = match tls {
            None => {
                watcher
                    .watch(self.http.serve_connection(TokioIo::new(stream), service))
                    .await
            }
            Some(acceptor) => {
                let stream =
                    match tokio::time::timeout(self.handshake_timeout, acceptor.accept(stream))
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
                watcher
                    .watch(self.http.serve_connection(TokioIo::new(stream), service))
                    .await
            }
        };
        if let Err(error) = result {
            tracing::debug!(%peer, %error, "connection ended with an error");
        }
    }
}
