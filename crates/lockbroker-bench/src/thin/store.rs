//! The thin broker's Redis side: one fred client on one multiplexed
//! connection, and its two scripts, each request one `EVALSHA`.
//!
//! Each script's keys, arguments and reply are declared once, beside its
//! Lua: [`AcquireCall`] and [`ReleaseCall`].

use std::time::Duration;

use fred::clients::Client;
use fred::error::Error as RedisError;
use fred::interfaces::ClientLike;
use fred::types::config::{Config, ReconnectPolicy};
use fred::types::scripts::Script;
use fred::types::{Builder, Value};
use lockbroker_core::{LeaseToken, LockName, Ttl};

/// Key prefix of the thin broker, apart from the broker's, `direct`'s and
/// `minimal`'s, so no two targets ever share a lock.
const THIN_PREFIX: &str = "benchthin";
/// Longest wait for one Redis answer, and for the connection (the broker's
/// defaults): fred's own default is to wait forever.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// Takes the lock for a token and the lock's next fence, 0 when busy;
/// idempotent for the same token (see the file).
const ACQUIRE_LUA: &str = include_str!("../../scripts/thin-acquire.lua");

/// Deletes the lease only if the token still holds it: 1 released, 0 lost.
const RELEASE_LUA: &str = include_str!("../../scripts/thin-release.lua");

/// The keys of lock `name`: the lease (its value is the holder's token) and
/// the fence counter, in one Cluster slot by the hash tag.
fn keys(name: &LockName) -> [String; 2] {
    let lease = format!("{THIN_PREFIX}:{{{}}}", name.as_str());
    let fence = format!("{lease}:fence");
    [lease, fence]
}

/// One call of [`ACQUIRE_LUA`].
pub struct AcquireCall<'a> {
    /// The lock.
    pub name: &'a LockName,
    /// The token the lease is granted to.
    pub token: &'a LeaseToken,
    /// How long the lease lasts.
    pub ttl: Ttl,
}

impl AcquireCall<'_> {
    /// `KEYS`: lease, fence.
    pub fn keys(&self) -> Vec<String> {
        keys(self.name).into()
    }

    /// `ARGV`: token, TTL in milliseconds.
    pub fn args(&self) -> Vec<String> {
        vec![
            self.token.expose().to_owned(),
            self.ttl.as_millis().to_string(),
        ]
    }

    /// The granted fence, or `None` when busy; anything else is a protocol
    /// error.
    fn decode(reply: &Value) -> Result<Option<u64>, Failure> {
        match reply {
            Value::Integer(0) => Ok(None),
            Value::Integer(fence) if *fence > 0 => Ok(u64::try_from(*fence).ok()),
            _ => Err(Failure::Protocol),
        }
    }
}

/// One call of [`RELEASE_LUA`].
pub struct ReleaseCall<'a> {
    /// The lock.
    pub name: &'a LockName,
    /// The token that should hold it.
    pub token: &'a str,
}

impl ReleaseCall<'_> {
    /// `KEYS`: lease.
    pub fn keys(&self) -> Vec<String> {
        let [lease, _] = keys(self.name);
        vec![lease]
    }

    /// `ARGV`: token.
    pub fn args(&self) -> Vec<String> {
        vec![self.token.to_owned()]
    }

    /// Whether the lease was released (`false`: the token held nothing).
    fn decode(reply: &Value) -> Result<bool, Failure> {
        match reply {
            Value::Integer(1) => Ok(true),
            Value::Integer(0) => Ok(false),
            _ => Err(Failure::Protocol),
        }
    }
}

/// Why a script gave no answer. Neither carries Redis's text, which could
/// echo arguments (tokens) back.
#[derive(Debug)]
pub enum Failure {
    /// Redis could not be reached in time or refused the script.
    Unavailable,
    /// Redis answered something the script never returns.
    Protocol,
}

impl From<RedisError> for Failure {
    fn from(_: RedisError) -> Self {
        Failure::Unavailable
    }
}

/// The client and both scripts, hashed once.
pub struct Store {
    client: Client,
    acquire: Script,
    release: Script,
}

impl Store {
    /// Connects to `url` and loads both scripts.
    pub async fn connect(url: &str) -> Result<Self, String> {
        let config = Config::from_url(url).map_err(|e| format!("Redis URL: {}", e.details()))?;
        let client = Builder::from_config(config)
            .with_performance_config(|perf| perf.default_command_timeout = COMMAND_TIMEOUT)
            .with_connection_config(|conn| {
                conn.connection_timeout = COMMAND_TIMEOUT;
                conn.internal_command_timeout = COMMAND_TIMEOUT;
                conn.tcp.nodelay = Some(true);
            })
            .set_policy(ReconnectPolicy::new_exponential(0, 50, 1_000, 2))
            .build()
            .map_err(|e| format!("Redis client: {}", e.details()))?;
        client
            .init()
            .await
            .map_err(|e| format!("cannot connect to Redis: {}", e.details()))?;
        let store = Self {
            client,
            acquire: Script::from_lua(ACQUIRE_LUA),
            release: Script::from_lua(RELEASE_LUA),
        };
        for script in [&store.acquire, &store.release] {
            script
                .load(&store.client)
                .await
                .map_err(|e| format!("SCRIPT LOAD: {}", e.details()))?;
        }
        Ok(store)
    }

    /// Runs `call`: the fence granted, or `None` when busy.
    pub async fn acquire(&self, call: &AcquireCall<'_>) -> Result<Option<u64>, Failure> {
        let reply: Value = self
            .acquire
            .evalsha_with_reload(&self.client, call.keys(), call.args())
            .await?;
        AcquireCall::decode(&reply)
    }

    /// Runs `call`: whether the lease was released.
    pub async fn release(&self, call: &ReleaseCall<'_>) -> Result<bool, Failure> {
        let reply: Value = self
            .release
            .evalsha_with_reload(&self.client, call.keys(), call.args())
            .await?;
        ReleaseCall::decode(&reply)
    }
}
