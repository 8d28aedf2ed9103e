//! The `minimal` target: the smallest correct lock a careful client drives
//! straight at Redis, as the floor the broker's Redis cost is held to.
//!
//! Acquire is `SET <lock> <token> NX PX <ttl>` and `INCR <lock>:fence`,
//! pipelined in one write; release is a compare-and-delete, one `EVALSHA` of
//! [`RELEASE_LUA`]. No queue, no lock delay, no release memo, no announcement.

use std::sync::Arc;

use super::{Lease, TTL_MS};
use crate::resp::{self, Reply};

/// Key prefix of the minimal lock, apart from the broker's and `direct`'s.
const MINIMAL_PREFIX: &str = "benchminimal";

/// Deletes the lock only if the caller's token still holds it.
const RELEASE_LUA: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
     return redis.call('DEL', KEYS[1]) else return 0 end";

/// Loads the compare-and-delete script into the Redis on `port`; its SHA.
pub async fn load_script(port: u16) -> Result<Arc<String>, String> {
    let mut redis = resp::Connection::connect(port).await?;
    let reply = redis
        .call(&[b"SCRIPT", b"LOAD", RELEASE_LUA.as_bytes()])
        .await?;
    reply
        .text()
        .map(|sha| Arc::new(sha.to_owned()))
        .ok_or_else(|| "SCRIPT LOAD gave no SHA".to_owned())
}

/// One caller of the minimal lock over one connection.
pub struct MinimalClient {
    redis: resp::Connection,
    release_sha: Arc<String>,
    key: String,
    fence_key: String,
    ttl: String,
    /// Tokens are this prefix and a counter: unique per caller and cheap.
    token_prefix: String,
    issued: u64,
}

impl MinimalClient {
    pub(super) async fn connect(
        port: u16,
        release_sha: Arc<String>,
        lock: &str,
    ) -> Result<Self, String> {
        let key = format!("{MINIMAL_PREFIX}:{lock}");
        Ok(Self {
            redis: resp::Connection::connect(port).await?,
            release_sha,
            fence_key: format!("{key}:fence"),
            key,
            ttl: TTL_MS.to_string(),
            token_prefix: lockbroker_core::lease::random_hex::<8>(),
            issued: 0,
        })
    }

    pub(super) async fn acquire(&mut self) -> Result<Lease, String> {
        self.issued += 1;
        let token = format!("{}{:016x}", self.token_prefix, self.issued);
        let set: &[&[u8]] = &[
            b"SET",
            self.key.as_bytes(),
            token.as_bytes(),
            b"NX",
            b"PX",
            self.ttl.as_bytes(),
        ];
        let incr: &[&[u8]] = &[b"INCR", self.fence_key.as_bytes()];
        let replies = self.redis.pipeline(&[set, incr]).await?;
        match replies.as_slice() {
            [Reply::Text(Some(ok)), Reply::Int(fence)] if ok == "OK" => Ok(Lease {
                token,
                fence: u64::try_from(*fence).map_err(|e| e.to_string())?,
            }),
            [Reply::Text(None), _] => Err("acquire: the lock is busy".into()),
            other => Err(format!("acquire: unexpected replies {other:?}")),
        }
    }

    pub(super) async fn release(&mut self, lease: &Lease) -> Result<(), String> {
        let reply = self
            .redis
            .call(&[
                b"EVALSHA",
                self.release_sha.as_bytes(),
                b"1",
                self.key.as_bytes(),
                lease.token.as_bytes(),
            ])
            .await?;
        match reply {
            Reply::Int(1) => Ok(()),
            Reply::Int(0) => Err("release: the lease was lost".into()),
            other => Err(format!("release: unexpected reply {other:?}")),
        }
    }
}
