//! [`RedisLockStore`]: lock steps as Lua scripts over a pool of fred clients.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Client, Pool};
use fred::error::{Error as RedisError, ErrorKind};
use fred::interfaces::ClientLike;
use fred::types::config::{Config, ReconnectPolicy, UnresponsiveConfig};
use fred::types::{Builder, Value};
use lockbroker_core::lease::Renewal;
use lockbroker_core::{
    AcquireOutcome, AcquireParams, ExtendOutcome, Fence, Holder, Lease, LeaseToken, LockName,
    LockStatus, LockStore, ReleaseOutcome, StoreError, Ttl,
};
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
}

impl RedisLockStore {
    /// Builds the pool and starts connecting in the background.
    ///
    /// Does not wait for Redis: a broker that starts while Redis is down answers
    /// `503` until Redis is back, then serves without a restart.
    pub fn connect(settings: RedisSettings) -> Result<Self, StoreError> {
        let mut config = Config::from_url(&settings.url)
            .map_err(|e| StoreError::Unavailable(format!("invalid Redis URL: {}", e.details())))?;
        // Keep trying on the first connection too, instead of giving up.
        config.fail_fast = false;
        let command_timeout = settings.command_timeout;
        let pool = Builder::from_config(config)
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
            .set_policy(ReconnectPolicy::new_exponential(0, 50, 1_000, 2))
            .build_pool(settings.pool_size.max(1))
            .map_err(|e| {
                StoreError::Unavailable(format!("cannot build Redis pool: {}", e.details()))
            })?;
        drop(pool.connect());
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                keys: KeyLayout::new(settings.key_prefix.clone()),
                scripts: Scripts::new(),
                settings,
                fence_floor: AtomicU64::new(0),
            }),
        })
    }

    /// Closes every connection.
    pub async fn disconnect(&self) {
        let _ = self.inner.pool.quit().await;
    }

    /// The key layout, for tools that inspect Redis directly.
    pub fn keys(&self) -> &KeyLayout {
        &self.inner.keys
    }

    fn observe_fence(&self, fence: u64) {
        self.inner.fence_floor.fetch_max(fence, Ordering::Relaxed);
    }

    /// After an acquire whose answer never came back, the script may still have
    /// run and granted a lease nobody will ever hear of. Send the release for
    /// that token on the same connection (so it queues behind the acquire) and
    /// keep trying until it lands or the lease would have expired anyway.
    fn release_orphan(&self, client: Client, name: LockName, token: LeaseToken, ttl: Ttl) {
        let store = self.clone();
        tokio::spawn(async move {
            let give_up = Instant::now() + Duration::from_millis(ttl.as_millis());
            let mut backoff = Duration::from_millis(50);
            while Instant::now() < give_up {
                if store.run_release(&client, &name, &token).await.is_ok() {
                    return;
                }
                sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        });
    }

    async fn run_release(
        &self,
        client: &Client,
        name: &LockName,
        token: &LeaseToken,
    ) -> Result<ReleaseOutcome, StoreError> {
        let inner = &self.inner;
        let memo_ms = millis(inner.settings.release_memo);
        let reply: Value = inner
            .scripts
            .release
            .evalsha_with_reload(
                client,
                vec![inner.keys.lease(name)],
                vec![Value::from(token.expose()), Value::from(memo_ms)],
            )
            .await
            .map_err(unavailable)?;
        let mut reply = Reply::new(reply)?;
        Ok(match reply.int()? {
            1 => ReleaseOutcome::Released(Fence::new(reply.uint()?)),
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
        ];
        let keys = vec![inner.keys.lease(params.name), inner.keys.fence(params.name)];
        let reply: Value = match inner
            .scripts
            .acquire
            .evalsha_with_reload(client, keys, args)
            .await
        {
            Ok(reply) => reply,
            Err(error) => {
                if outcome_unknown(&error) {
                    self.release_orphan(
                        client.clone(),
                        params.name.clone(),
                        params.token.clone(),
                        params.ttl,
                    );
                }
                return Err(unavailable(error));
            }
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
            Ok(AcquireOutcome::Granted(lease))
        } else {
            let owner = non_empty(reply.text()?);
            let fence = reply.uint()?;
            self.observe_fence(fence);
            Ok(AcquireOutcome::Busy(Holder {
                owner,
                fence: Fence::new(fence),
                expires_in_ms: reply.uint()?,
                available_in_ms: reply.uint()?,
            }))
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
        let reply: Value = inner
            .scripts
            .extend
            .evalsha_with_reload(
                inner.pool.next(),
                vec![inner.keys.lease(name)],
                vec![
                    Value::from(token.expose()),
                    Value::from(millis_u64(ttl.as_millis())),
                    Value::from(millis_u64(max_hold_ms)),
                ],
            )
            .await
            .map_err(unavailable)?;
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
        let reply: Value = inner
            .scripts
            .status
            .evalsha_with_reload(
                inner.pool.next(),
                vec![inner.keys.lease(name), inner.keys.fence(name)],
                Vec::<Value>::new(),
            )
            .await
            .map_err(unavailable)?;
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
        let _: Value = client.ping(None).await.map_err(unavailable)?;
        self.inner
            .scripts
            .ensure_loaded(client)
            .await
            .map_err(unavailable)
    }
}

/// Whether a failed command may still have run on Redis.
fn outcome_unknown(error: &RedisError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Timeout | ErrorKind::IO | ErrorKind::Canceled
    )
}

/// Every Redis failure fails closed: the caller gets "unavailable", never a grant.
fn unavailable(error: RedisError) -> StoreError {
    StoreError::Unavailable(format!("{:?}: {}", error.kind(), error.details()))
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
