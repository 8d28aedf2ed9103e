//! [`RedisLockStore`]: lock steps as Lua scripts over a pool of fred clients.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::clients::{Client, Pool, SubscriberClient};
use fred::error::{Error as RedisError, ErrorKind};
use fred::interfaces::KeysInterface;
use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use fred::rustls::crypto::ring;
use fred::rustls::pki_types::pem::PemObject;
use fred::rustls::pki_types::CertificateDer;
use fred::rustls::{ClientConfig, RootCertStore};
use fred::types::config::TlsConnector;
use fred::types::config::{Config, ReconnectPolicy, UnresponsiveConfig};
use fred::types::scripts::Script;
use fred::types::{Builder, Value};
use lockbroker_core::lease::random_hex;
use lockbroker_core::lease::Renewal;
use lockbroker_core::Wake;
use lockbroker_core::{
    AcquireOutcome, AcquireParams, ExtendOutcome, Fence, Holder, Lease, LeaseToken, LockName,
    LockStatus, LockStore, Release, ReleaseOutcome, StoreError, Ttl,
};
use lockbroker_core::{ForceReleaseOutcome, ListCursor, ListRequest, LockEntry, LockPage};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::time::{sleep, Instant};

use crate::keys::KeyLayout;
use crate::scripts::Scripts;

/// How the store reaches Redis and lays out its keys.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// `redis://[user:password@]host:port/db`; `rediss://` for TLS.
    pub url: String,
    /// Connections in the pool; each pipelines many commands.
    pub pool_size: usize,
    /// Longest wait for any one command's answer before failing closed.
    pub command_timeout: Duration,
    /// Longest wait for a new connection (including its handshake).
    pub connect_timeout: Duration,
    /// Prefix of every key the store writes.
    pub key_prefix: String,
    /// How long a lock's last fence is remembered after its last grant.
    /// Past it the time floor still keeps fences growing.
    pub fence_idle: Duration,
    /// How long a released lease is remembered so a re-sent release still
    /// reports success.
    pub release_memo: Duration,
    /// Credentials for Redis `AUTH` (ACL user and password); they replace any
    /// in the URL. `Debug` never prints the password.
    pub auth: RedisAuth,
    /// PEM file of the CA certificates that sign the Redis server certificate.
    /// Setting it turns TLS on even for a `redis://` URL; without it a
    /// `rediss://` URL trusts the system's roots.
    pub tls_ca_path: Option<PathBuf>,
}

/// Redis credentials. `Debug` redacts the password.
#[derive(Clone, Default)]
pub struct RedisAuth {
    /// The ACL user, `default` when only a password is set.
    pub username: Option<String>,
    /// The password.
    pub password: Option<String>,
}

impl fmt::Debug for RedisAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisAuth")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// A TLS connector trusting only the CA certificates in `ca_path`.
fn tls_connector(ca_path: &Path) -> Result<TlsConnector, StoreError> {
    let invalid = |message: String| {
        StoreError::Unavailable(format!(
            "redis TLS CA file {}: {message}",
            ca_path.display()
        ))
    };
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca_path).map_err(|e| invalid(e.to_string()))?;
    for cert in certs {
        let cert = cert.map_err(|e| invalid(e.to_string()))?;
        roots.add(cert).map_err(|e| invalid(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(invalid("holds no certificate".into()));
    }
    let config = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(config))
}

impl Default for RedisSettings {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379/0".to_owned(),
            pool_size: 4,
            command_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            key_prefix: "lockbroker".to_owned(),
            fence_idle: Duration::from_secs(7 * 24 * 3600),
            release_memo: Duration::from_secs(30),
            auth: RedisAuth::default(),
            tls_ca_path: None,
        }
    }
}

/// A [`LockStore`] over one Redis (or one Redis Cluster, thanks to hash tags).
///
/// Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct RedisLockStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    keys: KeyLayout,
    scripts: Scripts,
    settings: RedisSettings,
    /// The highest fence this process has seen. Passed to every acquire as a
    /// floor, so a Redis that lost its data *and* runs on a clock behind the
    /// old one still issues fences above those this broker handed out.
    fence_floor: AtomicU64,
    /// This process's id in release announcements, so it can tell its own.
    broker_id: String,
    /// The Pub/Sub channel for release announcements.
    wake_channel: String,
    /// The one subscription of this process, feeding the announcements here
    /// until the service takes them.
    wakes: Mutex<Option<UnboundedReceiver<Wake>>>,
    subscriber: SubscriberClient,
    observer: Option<Arc<dyn StoreObserver>>,
}

/// Receives what the store measures, for metrics. Called on the request path:
/// implementations must be cheap and must not block.
pub trait StoreObserver: Send + Sync + 'static {
    /// A script finished (successfully or not) after `elapsed`.
    fn script_finished(&self, script: &'static str, elapsed: Duration);
    /// A grant's fence was raised by this broker's floor above both Redis's
    /// counter and clock: Redis lost its data and its clock runs behind.
    fn fence_floor_raised(&self);
}

impl RedisLockStore {
    /// Builds the pool and starts connecting in the background.
    ///
    /// Does not wait for Redis: a broker that starts while Redis is down answers
    /// `503` until Redis is back, then serves without a restart.
    pub fn connect(settings: RedisSettings) -> Result<Self, StoreError> {
        Self::connect_observed(settings, None)
    }

    /// Like [`RedisLockStore::connect`], reporting script latencies and fence
    /// floor raises to `observer`.
    pub fn connect_observed(
        settings: RedisSettings,
        observer: Option<Arc<dyn StoreObserver>>,
    ) -> Result<Self, StoreError> {
        let mut config = Config::from_url(&settings.url)
            .map_err(|e| StoreError::Unavailable(format!("invalid Redis URL: {}", e.details())))?;
        if let Some(username) = &settings.auth.username {
            config.username = Some(username.clone());
        }
        if let Some(password) = &settings.auth.password {
            config.password = Some(password.clone());
        }
        if let Some(ca_path) = &settings.tls_ca_path {
            config.tls = Some(tls_connector(ca_path)?.into());
        }
        // Keep trying on the first connection too, instead of giving up.
        config.fail_fast = false;
        let command_timeout = settings.command_timeout;
        let mut builder = Builder::from_config(config);
        builder
            .with_performance_config(|perf| {
                perf.default_command_timeout = command_timeout;
            })
            .with_connection_config(|conn| {
                conn.connection_timeout = settings.connect_timeout;
                conn.internal_command_timeout = command_timeout;
                conn.max_command_attempts = 3;
                conn.tcp.nodelay = Some(true);
                // A connection whose answers stall (a paused Redis) is dropped
                // and rebuilt rather than kept forever.
                conn.unresponsive = UnresponsiveConfig {
                    max_timeout: Some(command_timeout * 2),
                    interval: command_timeout / 2,
                };
                // fred's default queue is unbounded; cap it so a dead Redis
                // cannot make requests pile up in memory.
                conn.max_command_buffer_len = 10_000;
            })
            .set_policy(ReconnectPolicy::new_exponential(0, 50, 1_000, 2));
        let build_error = |e: RedisError| {
            StoreError::Unavailable(format!("cannot build Redis client: {}", e.details()))
        };
        let pool = builder
            .build_pool(settings.pool_size.max(1))
            .map_err(build_error)?;
        // Release announcements arrive through a broadcast channel; room for
        // bursts, and a lag is answered with a resync. Only the subscriber
        // needs it: every client allocates all its event channels at this
        // capacity up front, about 3 MiB per client at 4,096.
        builder.with_performance_config(|perf| perf.broadcast_channel_capacity = 4_096);
        let subscriber = builder.build_subscriber_client().map_err(build_error)?;
        drop(pool.connect());
        drop(subscriber.connect());

        let keys = KeyLayout::new(settings.key_prefix.clone());
        let wake_channel = keys.wake_channel();
        let broker_id = random_hex::<8>();
        let (wake_tx, wake_rx) = unbounded_channel();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(forward_wakes(
                subscriber.clone(),
                wake_channel.clone(),
                broker_id.clone(),
                wake_tx,
            ));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                keys,
                scripts: Scripts::new(),
                settings,
                fence_floor: AtomicU64::new(0),
                broker_id,
                wake_channel,
                wakes: Mutex::new(Some(wake_rx)),
                subscriber,
                observer,
            }),
        })
    }

    /// Closes every connection.
    pub async fn disconnect(&self) {
        let _ = self.inner.subscriber.quit().await;
        let _ = self.inner.pool.quit().await;
    }

    /// The key layout, for tools that inspect Redis directly.
    pub fn keys(&self) -> &KeyLayout {
        &self.inner.keys
    }

    fn observe_fence(&self, fence: u64) {
        self.inner.fence_floor.fetch_max(fence, Ordering::Relaxed);
    }

    /// The keys of scripts that may free a lock: its lease and its fair queue.
    fn queue_keys(&self, name: &LockName) -> Vec<String> {
        let keys = &self.inner.keys;
        vec![keys.lease(name), keys.queue(name), keys.queue_expiry(name)]
    }

    /// `args` followed by what a script needs to announce a freed lock: the
    /// wake channel, this broker's id and the lock name.
    fn announce_args(&self, name: &LockName, mut args: Vec<Value>) -> Vec<Value> {
        let inner = &self.inner;
        args.extend([
            Value::from(inner.wake_channel.as_str()),
            Value::from(inner.broker_id.as_str()),
            Value::from(name.as_str()),
        ]);
        args
    }

    /// Runs one script by SHA and reports its latency to the observer.
    async fn run(
        &self,
        script: &Script,
        script_name: &'static str,
        client: &Client,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Value, RedisError> {
        let started = Instant::now();
        // fred's command future is about 7 KiB: boxed, it is built once in
        // place, and the futures of callers (a waiting acquire among them)
        // hold a pointer instead of carrying it through every await.
        let result = Box::pin(script.evalsha_with_reload(client, keys, args)).await;
        if let Some(observer) = &self.inner.observer {
            observer.script_finished(script_name, started.elapsed());
        }
        result
    }

    async fn run_release(
        &self,
        client: &Client,
        name: &LockName,
        token: &LeaseToken,
    ) -> Result<ReleaseOutcome, StoreError> {
        let inner = &self.inner;
        let memo_ms = millis(inner.settings.release_memo);
        let reply: Value = self
            .run(
                &inner.scripts.release,
                "release",
                client,
                self.queue_keys(name),
                self.announce_args(
                    name,
                    vec![Value::from(token.expose()), Value::from(memo_ms)],
                ),
            )
            .await
            .map_err(store_error)?;
        let mut reply = Reply::new(reply)?;
        Ok(match reply.int()? {
            1 => ReleaseOutcome::Released(Release {
                fence: Fence::new(reply.uint()?),
                held_ms: u64::try_from(reply.int()?).ok(),
            }),
            _ => ReleaseOutcome::Lost,
        })
    }
}

impl LockStore for RedisLockStore {
    async fn acquire(&self, params: AcquireParams<'_>) -> Result<AcquireOutcome, StoreError> {
        let inner = &self.inner;
        let client = inner.pool.next();
        let args = vec![
            Value::from(params.token.expose()),
            Value::from(millis_u64(params.ttl.as_millis())),
            Value::from(params.owner.map_or("", |o| o.as_str())),
            Value::from(params.request_id.map_or("", |r| r.as_str())),
            Value::from(millis_u64(params.lock_delay.as_millis())),
            Value::from(millis(inner.settings.fence_idle)),
            Value::from(millis_u64(inner.fence_floor.load(Ordering::Relaxed))),
            Value::from(params.fair.map_or("", |f| f.waiter_id)),
            Value::from(millis_u64(params.fair.map_or(0, |f| f.entry_ttl_ms))),
            Value::from(inner.wake_channel.as_str()),
            Value::from(inner.broker_id.as_str()),
            Value::from(params.name.as_str()),
            Value::from(params.principal.as_str()),
        ];
        let keys = vec![
            inner.keys.lease(params.name),
            inner.keys.fence(params.name),
            inner.keys.queue(params.name),
            inner.keys.queue_expiry(params.name),
        ];
        let reply: Value = match self
            .run(&inner.scripts.acquire, "acquire", client, keys, args)
            .await
        {
            Ok(reply) => reply,
            Err(error) => return Err(store_error(error)),
        };
        let mut reply = Reply::new(reply)?;
        if reply.int()? == 1 {
            let token = reply.text()?;
            let fence = reply.uint()?;
            self.observe_fence(fence);
            let lease = Lease {
                name: params.name.clone(),
                token: LeaseToken::parse(&token)
                    .map_err(|_| StoreError::Protocol("stored token is malformed".into()))?,
                fence: Fence::new(fence),
                ttl_ms: reply.uint()?,
                expires_at_ms: reply.uint()?,
                owner: non_empty(reply.text()?),
            };
            // A re-sent acquire answers without the flag: it raised nothing.
            if reply.int().unwrap_or(0) == 1 {
                if let Some(observer) = &inner.observer {
                    observer.fence_floor_raised();
                }
            }
            Ok(AcquireOutcome::Granted(lease))
        } else {
            let owner = non_empty(reply.text()?);
            let fence = reply.uint()?;
            self.observe_fence(fence);
            let holder = Holder {
                owner,
                fence: Fence::new(fence),
                expires_in_ms: reply.uint()?,
                available_in_ms: reply.uint()?,
            };
            Ok(AcquireOutcome::Busy {
                holder,
                queue_position: u64::try_from(reply.int()?).ok(),
            })
        }
    }

    async fn extend(
        &self,
        name: &LockName,
        token: &LeaseToken,
        ttl: Ttl,
        max_hold_ms: u64,
    ) -> Result<ExtendOutcome, StoreError> {
        let inner = &self.inner;
        let reply: Value = self
            .run(
                &inner.scripts.extend,
                "extend",
                inner.pool.next(),
                vec![inner.keys.lease(name)],
                vec![
                    Value::from(token.expose()),
                    Value::from(millis_u64(ttl.as_millis())),
                    Value::from(millis_u64(max_hold_ms)),
                ],
            )
            .await
            .map_err(store_error)?;
        let mut reply = Reply::new(reply)?;
        Ok(match reply.int()? {
            1 => ExtendOutcome::Extended(Renewal {
                fence: Fence::new(reply.uint()?),
                ttl_ms: reply.uint()?,
                expires_at_ms: reply.uint()?,
                owner: non_empty(reply.text()?),
            }),
            -1 => ExtendOutcome::MaxHoldExceeded {
                expires_in_ms: reply.uint()?,
            },
            -2 => ExtendOutcome::Released,
            _ => ExtendOutcome::Lost,
        })
    }

    async fn release(
        &self,
        name: &LockName,
        token: &LeaseToken,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.run_release(self.inner.pool.next(), name, token).await
    }

    async fn status(&self, name: &LockName) -> Result<LockStatus, StoreError> {
        let inner = &self.inner;
        let reply: Value = self
            .run(
                &inner.scripts.status,
                "status",
                inner.pool.next(),
                vec![inner.keys.lease(name), inner.keys.fence(name)],
                Vec::<Value>::new(),
            )
            .await
            .map_err(store_error)?;
        let mut reply = Reply::new(reply)?;
        let held = reply.int()? == 1;
        let owner = non_empty(reply.text()?);
        let fence = u64::try_from(reply.int()?).ok().map(Fence::new);
        Ok(LockStatus {
            held,
            owner,
            fence,
            expires_in_ms: reply.uint()?,
            available_in_ms: reply.uint()?,
        })
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let client = self.inner.pool.next();
        let _: Value = client.ping(None).await.map_err(store_error)?;
        self.inner
            .scripts
            .ensure_loaded(client)
            .await
            .map_err(store_error)?;
        // A Redis that answers but refuses writes (out of memory under
        // noeviction, or a replica) cannot grant: only a real write tells.
        let _: Value = self
            .run(
                &self.inner.scripts.probe,
                "probe",
                client,
                vec![self.inner.keys.probe()],
                Vec::<Value>::new(),
            )
            .await
            .map_err(store_error)?;
        Ok(())
    }

    async fn list(&self, request: &ListRequest) -> Result<LockPage, StoreError> {
        let inner = &self.inner;
        let client = inner.pool.next();
        let pattern = inner.keys.lease_pattern(&request.prefix);
        let limit = request.limit.get();
        let count = u32::try_from(limit).unwrap_or(u32::MAX);
        let mut cursor = request.cursor.get();
        let mut names = Vec::new();
        // SCAN, never KEYS: each round visits about `limit` keys. A few rounds
        // fill a page when matches are sparse, and no more, so a keyspace full
        // of other keys cannot make one request slow.
        for _ in 0..MAX_SCAN_ROUNDS {
            let reply: Value = client
                .scan_page(cursor.to_string(), pattern.as_str(), Some(count), None)
                .await
                .map_err(store_error)?;
            let (next, keys) = scan_reply(reply)?;
            names.extend(
                keys.iter()
                    .filter_map(|key| inner.keys.lock_of_lease_key(key)),
            );
            cursor = next;
            if cursor == 0 || names.len() >= limit {
                break;
            }
        }
        names.sort();
        names.dedup();
        // Each lock is read by the status script, one key set per call, so the
        // listing also works where a lock's keys live on their own Cluster slot.
        let mut reads = tokio::task::JoinSet::new();
        for name in names {
            let store = self.clone();
            reads.spawn(async move {
                let status = store.status(&name).await;
                (name, status)
            });
        }
        let mut locks = Vec::new();
        while let Some(read) = reads.join_next().await {
            let (name, status) = read.map_err(|e| StoreError::Protocol(e.to_string()))?;
            let status = status?;
            if status.held || status.available_in_ms > 0 {
                locks.push(LockEntry { name, status });
            }
        }
        locks.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(LockPage {
            locks,
            next_cursor: (cursor != 0).then_some(ListCursor::new(cursor)),
        })
    }

    async fn force_release(&self, name: &LockName) -> Result<ForceReleaseOutcome, StoreError> {
        let inner = &self.inner;
        let reply: Value = self
            .run(
                &inner.scripts.force_release,
                "force_release",
                inner.pool.next(),
                self.queue_keys(name),
                self.announce_args(name, Vec::new()),
            )
            .await
            .map_err(store_error)?;
        let mut reply = Reply::new(reply)?;
        Ok(match reply.int()? {
            1 => ForceReleaseOutcome::Released {
                fence: Fence::new(reply.uint()?),
                owner: non_empty(reply.text()?),
            },
            _ => ForceReleaseOutcome::NotHeld,
        })
    }

    async fn leave_queue(&self, name: &LockName, waiter_id: &str) -> Result<(), StoreError> {
        let inner = &self.inner;
        let _: Value = self
            .run(
                &inner.scripts.leave_queue,
                "leave_queue",
                inner.pool.next(),
                self.queue_keys(name),
                self.announce_args(name, vec![Value::from(waiter_id)]),
            )
            .await
            .map_err(store_error)?;
        Ok(())
    }

    /// fred re-sends a command after a reconnect for up to its attempts, each
    /// bounded by the command timeout: ten of those, plus room for a
    /// reconnect's backoff, bounds when a lost acquire can still run.
    fn orphan_window(&self) -> Duration {
        self.inner.settings.command_timeout * 10 + Duration::from_secs(5)
    }

    fn take_wakes(&self) -> Option<UnboundedReceiver<Wake>> {
        self.inner
            .wakes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// Keeps this process subscribed to the wake channel (once; fred subscribes
/// again after every reconnect) and turns announcements into [`Wake`]s.
async fn forward_wakes(
    subscriber: SubscriberClient,
    channel: String,
    broker_id: String,
    wakes: UnboundedSender<Wake>,
) {
    let mut messages = subscriber.message_rx();
    let mut reconnects = subscriber.reconnect_rx();
    let _resubscribe = subscriber.manage_subscriptions();
    let mut backoff = Duration::from_millis(50);
    while subscriber.subscribe(channel.as_str()).await.is_err() {
        sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
    loop {
        let wake = tokio::select! {
            message = messages.recv() => match message {
                Ok(message) => message.value.as_str().and_then(|text| parse_wake(&text, &broker_id)),
                // Announcements were dropped: every waiter looks again.
                Err(RecvError::Lagged(_)) => Some(Wake::Resync),
                Err(RecvError::Closed) => return,
            },
            reconnect = reconnects.recv() => match reconnect {
                // Releases announced while disconnected were missed.
                Ok(_) | Err(RecvError::Lagged(_)) => Some(Wake::Resync),
                Err(RecvError::Closed) => return,
            },
        };
        if let Some(wake) = wake {
            if wakes.send(wake).is_err() {
                return;
            }
        }
    }
}

/// Reads `<broker id> released|turn <lock name> <fair waiter id or ->`.
///
/// This broker's own releases already woke its local waiters, so from its
/// own announcement only the fair waiter named is woken.
fn parse_wake(text: &str, own_broker_id: &str) -> Option<Wake> {
    let mut parts = text.split(' ');
    let (origin, kind, name, head) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let next_fair = (head != "-").then(|| head.to_owned());
    match kind {
        "released" if origin != own_broker_id => Some(Wake::Released {
            name: LockName::parse(name).ok()?,
            next_fair,
        }),
        "released" | "turn" => next_fair.map(|waiter_id| Wake::Turn { waiter_id }),
        _ => None,
    }
}

/// The most `SCAN` calls one page of a listing makes.
const MAX_SCAN_ROUNDS: usize = 8;

/// Reads a `SCAN` reply: the next cursor and the keys of this round.
fn scan_reply(reply: Value) -> Result<(u64, Vec<String>), StoreError> {
    let malformed = || StoreError::Protocol("malformed SCAN reply".into());
    let Value::Array(mut parts) = reply else {
        return Err(malformed());
    };
    if parts.len() != 2 {
        return Err(malformed());
    }
    let keys = parts.pop().ok_or_else(malformed)?;
    let cursor = parts
        .pop()
        .and_then(|c| c.as_string())
        .and_then(|c| c.parse().ok())
        .ok_or_else(malformed)?;
    let Value::Array(keys) = keys else {
        return Err(malformed());
    };
    Ok((
        cursor,
        keys.into_iter().filter_map(Value::into_string).collect(),
    ))
}

/// Whether a failed command may still have run on Redis.
fn outcome_unknown(error: &RedisError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Timeout | ErrorKind::IO | ErrorKind::Canceled
    )
}

/// Every Redis failure fails closed: the caller gets an error, never a grant.
/// A command whose answer was lost is told apart (it may have run), and so is
/// a Redis that answers but refuses writes, which Redis names by the error
/// code that opens its reply: `OOM` (out of memory) or `READONLY` (a replica).
fn store_error(error: RedisError) -> StoreError {
    let text = format!("{:?}: {}", error.kind(), error.details());
    if outcome_unknown(&error) {
        return StoreError::OutcomeUnknown(text);
    }
    match error.details().split_whitespace().next() {
        Some("OOM" | "READONLY") => StoreError::RefusesWrites(text),
        _ => StoreError::Unavailable(text),
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn millis_u64(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

/// Reads a script's array reply front to back.
struct Reply(std::vec::IntoIter<Value>);

impl Reply {
    fn new(value: Value) -> Result<Self, StoreError> {
        match value {
            Value::Array(items) => Ok(Self(items.into_iter())),
            other => Err(StoreError::Protocol(format!(
                "expected an array reply, got {:?}",
                other.kind()
            ))),
        }
    }

    fn next(&mut self) -> Result<Value, StoreError> {
        self.0
            .next()
            .ok_or_else(|| StoreError::Protocol("script reply is too short".into()))
    }

    fn int(&mut self) -> Result<i64, StoreError> {
        self.next()?
            .as_i64()
            .ok_or_else(|| StoreError::Protocol("expected an integer in script reply".into()))
    }

    fn uint(&mut self) -> Result<u64, StoreError> {
        u64::try_from(self.int()?)
            .map_err(|_| StoreError::Protocol("negative number in script reply".into()))
    }

    fn text(&mut self) -> Result<String, StoreError> {
        self.next()?
            .into_string()
            .ok_or_else(|| StoreError::Protocol("expected text in script reply".into()))
    }
}
