//! [`Application`]: bind, serve, and shut down gracefully.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lockbroker_core::{LockService, StoreError};
use lockbroker_redis::RedisLockStore;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::{ConfigError, Settings};
use crate::http;
use crate::serve::ServeOptions;
use crate::tls::{self, TlsError};
use crate::Service;

/// Why the broker could not start. Printed as one line before exiting.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The configured address.
        addr: SocketAddr,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The Redis client could not be built from the settings.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The settings break a security rule (API keys, insecure listener).
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The HTTPS certificate or key cannot be used.
    #[error("{0}")]
    Tls(#[from] TlsError),
}

/// A bound, ready-to-serve broker.
pub struct Application {
    listener: TcpListener,
    local_addr: SocketAddr,
    service: Arc<Service>,
    router: axum::Router,
    grace: Duration,
    serve: ServeOptions,
}

impl Application {
    /// Connects to Redis (in the background) and binds the listener.
    ///
    /// Refuses settings that break the security rules even when they were
    /// built in code: no unauthenticated listener beyond loopback unless
    /// `auth.allow_insecure`, and API keys that parse.
    pub async fn build(settings: Settings) -> Result<Self, StartupError> {
        settings.check_security()?;
        let keys = Arc::new(settings.key_ring().map_err(|e| ConfigError::Invalid {
            layer: "settings".into(),
            message: e.to_string(),
        })?);
        let http_settings = &settings.http;
        let tls = if http_settings.tls_cert_path.is_empty() {
            None
        } else {
            Some(tls::acceptor(
                Path::new(&http_settings.tls_cert_path),
                Path::new(&http_settings.tls_key_path),
            )?)
        };
        let serve = ServeOptions {
            header_read_timeout: Duration::from_millis(http_settings.header_read_timeout_ms),
            max_connections: http_settings.max_connections,
            tls,
        };
        let store = RedisLockStore::connect(settings.redis_settings())?;
        let service = Arc::new(LockService::new(store, settings.lock_policy()));
        let listener =
            TcpListener::bind(settings.listen)
                .await
                .map_err(|source| StartupError::Bind {
                    addr: settings.listen,
                    source,
                })?;
        let local_addr = listener.local_addr().map_err(|source| StartupError::Bind {
            addr: settings.listen,
            source,
        })?;
        let router = http::router(Arc::clone(&service), &settings.http, keys);
        Ok(Self {
            listener,
            local_addr,
            service,
            router,
            grace: Duration::from_millis(settings.shutdown_grace_ms),
            serve,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The lock service this application serves.
    pub fn service(&self) -> Arc<Service> {
        Arc::clone(&self.service)
    }

    /// Serves until `shutdown` completes, then stops accepting, answers waiting
    /// acquires at once, and gives in-flight requests the grace period to finish.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let Self {
            listener,
            local_addr,
            service,
            router,
            grace,
            serve,
        } = self;
        let (stop_tx, mut stop_rx) = watch::channel(false);
        let https = serve.tls.is_some();
        let server = crate::serve::serve(listener, router, serve, async move {
            let _ = stop_rx.wait_for(|stop| *stop).await;
        });
        tokio::pin!(server);
        tracing::info!(%local_addr, https, "lockbroker listening");

        tokio::select! {
            () = &mut server => return Ok(()),
            () = shutdown => {}
        }
        tracing::info!(grace_ms = grace.as_millis() as u64, "shutting down");
        service.begin_shutdown();
        let _ = stop_tx.send(true);
        let result = match tokio::time::timeout(grace, &mut server).await {
            Ok(()) => Ok(()),
            Err(_) => {
                tracing::warn!("grace period over; dropping unfinished requests");
                Ok(())
            }
        };
        service.store().disconnect().await;
        result
    }
}

/// Completes on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
