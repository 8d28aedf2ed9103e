//! [`Application`]: bind, serve, and shut down gracefully.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lockbroker_core::listing::{ListLimit, ListRequest, MAX_LIST_LIMIT};
use lockbroker_core::{LockService, Space, StoreError};
use lockbroker_redis::connection::endpoint;
use lockbroker_redis::quorum::QuorumStore;
use lockbroker_redis::{RedisLockStore, RedisStore, StoreObserver};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::{ConfigError, RedisMode, Settings};
use crate::http;
use crate::metrics::{Families, Metrics};
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
    metrics: Arc<Metrics>,
    metrics_router: Option<(TcpListener, axum::Router)>,
    reconcile_every: Duration,
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
        let tls = match http_settings.tls_files() {
            Some((cert, key)) => Some(tls::acceptor(cert, key)?),
            None => None,
        };
        let serve = ServeOptions {
            header_read_timeout: http_settings.header_read_timeout(),
            max_connections: http_settings.max_connections,
            max_streams_per_connection: http_settings.max_streams_per_connection,
            tls,
        };
        let metrics = Arc::new(
            Metrics::new(Families::new(settings.metrics.families.clone())).map_err(|e| {
                ConfigError::Invalid {
                    layer: "metrics".into(),
                    message: e.to_string(),
                }
            })?,
        );
        metrics.register_keys(keys.ids());
        let routes = http::served_routes();
        metrics.register_routes(routes.iter().map(|(method, path)| (method.as_str(), *path)));
        let observer = Some(Arc::clone(&metrics) as Arc<dyn StoreObserver>);
        let store = match settings.quorum_settings() {
            Some(quorum) => RedisStore::Quorum(QuorumStore::connect(quorum, observer)?),
            None => RedisStore::Single(RedisLockStore::connect_observed(
                settings.redis_settings(),
                observer,
            )?),
        };
        log_store(&settings, &store);
        // A cluster of too old a Redis is refused now, not at the first wait.
        if let Some(why) = store.unsupported_server().await {
            return Err(StoreError::Unavailable(why).into());
        }
        // Quorum nodes that are one server in two spellings, or a replica,
        // would let one Redis act as a majority (or count a node that
        // refuses every write): refused now when they answer, and kept out
        // of every majority when they show up later.
        if let RedisStore::Quorum(quorum) = &store {
            let reasons = quorum.misconfigured_nodes().await;
            if !reasons.is_empty() {
                return Err(ConfigError::Invalid {
                    layer: "redis.nodes, as their servers answer".into(),
                    message: reasons.join("; "),
                }
                .into());
            }
        }
        let service = Arc::new(LockService::new(store, settings.lock_policy()));
        let metrics_listener = match settings.metrics.listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| StartupError::Bind { addr, source })?,
            ),
            None => None,
        };
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
        let sources = settings
            .request_sources()
            .map_err(|message| ConfigError::Invalid {
                layer: "settings".into(),
                message,
            })?;
        let router = http::router(
            Arc::clone(&service),
            &settings.http,
            Arc::new(sources),
            Arc::clone(&keys),
            Arc::clone(&metrics),
        );
        let metrics_sources =
            settings
                .metrics_request_sources()
                .map_err(|message| ConfigError::Invalid {
                    layer: "settings".into(),
                    message,
                })?;
        let metrics_router = metrics_listener
            .zip(metrics_sources)
            .map(|(listener, sources)| {
                let router = http::metrics_router(
                    Arc::clone(&service),
                    Arc::new(sources),
                    keys,
                    Arc::clone(&metrics),
                );
                (listener, router)
            });
        let reconcile_every = settings.metrics.reconcile_interval();
        Ok(Self {
            listener,
            local_addr,
            service,
            router,
            grace: settings.shutdown_grace(),
            serve,
            metrics,
            metrics_router,
            reconcile_every,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
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
            metrics,
            metrics_router,
            reconcile_every,
        } = self;
        let upkeep = tokio::spawn(keep_gauges(Arc::clone(&service), metrics, reconcile_every));
        // The metrics listener has the main listener's header timeout and
        // connection cap, in plain HTTP; it ends when the broker does.
        let metrics_server = metrics_router.map(|(listener, router)| {
            let options = ServeOptions {
                tls: None,
                ..serve.clone()
            };
            tokio::spawn(crate::serve::serve(
                listener,
                router,
                options,
                std::future::pending(),
            ))
        });
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
        upkeep.abort();
        if let Some(metrics_server) = metrics_server {
            metrics_server.abort();
        }
        service.store().disconnect().await;
        result
    }
}

/// Logs the mode and the Redis endpoints the broker uses (never
/// credentials: the URLs are logged without them).
fn log_store(settings: &Settings, store: &RedisStore) {
    let redis = &settings.redis;
    let mode = redis.mode.as_str();
    let endpoints = match store {
        RedisStore::Quorum(quorum) => quorum.endpoints().join(","),
        RedisStore::Single(single) => match redis.mode {
            RedisMode::Sentinel => format!(
                "Sentinels {} (service {})",
                redis.sentinels.join(","),
                redis.service_name
            ),
            RedisMode::Cluster => {
                let seeds: Vec<String> = redis.nodes.iter().map(|url| endpoint(url)).collect();
                format!("seed nodes {}", seeds.join(","))
            }
            _ => single.endpoint(),
        },
    };
    tracing::info!(mode, endpoints, "lockbroker store");
}

/// Keeps the gauges that cannot be counted on the request path: `redis_up`
/// from a ping every few seconds, and `leases_held` recounted from Redis in
/// bounded pages, correcting for leases that expired instead of being released.
async fn keep_gauges(service: Arc<Service>, metrics: Arc<Metrics>, reconcile_every: Duration) {
    // Every 250 ms until the store first answers ready, then every 5 s.
    let mut ping = tokio::time::interval(Duration::from_millis(250));
    let mut reconcile = tokio::time::interval(reconcile_every);
    // The node gauges wait for the first ready answer: before it, the broker
    // has not read its nodes yet, and would report them all down.
    let mut nodes_read = false;
    // Whether the store was ready at the last look, to log each change once.
    let mut was_ready = None;
    loop {
        tokio::select! {
            _ = ping.tick() => {
                let answer = service.ready().await;
                let ready = answer.is_ok();
                metrics.redis_up.set(i64::from(ready));
                // Before its first ready answer the store is still connecting.
                match (was_ready, &answer) {
                    (None, Ok(())) => tracing::info!("the lock store serves"),
                    (Some(false), Ok(())) => tracing::info!("the lock store serves again"),
                    (Some(true), Err(error)) => {
                        tracing::warn!(%error, "the lock store stopped serving");
                    }
                    _ => {}
                }
                if was_ready.is_some() || ready {
                    was_ready = Some(ready);
                }
                if ready && !nodes_read {
                    nodes_read = true;
                    let every = Duration::from_secs(5);
                    ping = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                }
                if let (true, RedisStore::Quorum(quorum)) = (nodes_read, service.store()) {
                    metrics.quorum.set_nodes(&quorum.node_counts());
                }
            }
            _ = reconcile.tick() => {
                if let Ok(held) = count_held(&service).await {
                    metrics.leases_held.set(held);
                }
            }
        }
    }
}

/// Counts valid leases (exclusive, shared, permits) page by page (never a
/// blocking `KEYS`).
async fn count_held(service: &Service) -> Result<i64, lockbroker_core::StoreError> {
    let mut held = 0u64;
    for space in [Space::Lock, Space::Semaphore] {
        let mut request = ListRequest {
            space,
            limit: ListLimit::parse(MAX_LIST_LIMIT as u64).unwrap_or_default(),
            ..ListRequest::default()
        };
        loop {
            let page = service.list(&request).await?;
            held += (page.locks.iter())
                .map(|entry| entry.status.holder_count)
                .sum::<u64>();
            match page.next_cursor {
                Some(cursor) => request.cursor = cursor,
                None => break,
            }
        }
    }
    Ok(i64::try_from(held).unwrap_or(i64::MAX))
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
