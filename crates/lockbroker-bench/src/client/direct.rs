//! The `direct` target: Redis driven with the broker's own Lua scripts, the
//! same typed calls and the same key layout, from one connection per caller.

use std::sync::Arc;

use lockbroker_core::{
    AcquireOutcome, AcquireParams, LeaseKind, LeaseToken, LockDelay, LockName, Principal,
    ReleaseOutcome, Ttl,
};
use lockbroker_redis::scripts::calls::{AcquireCall, ReleaseCall};
use lockbroker_redis::scripts::{
    Reply as ScriptReply, ReplyItem, ScriptCall, ScriptContext, ScriptName, Scripts,
};
use lockbroker_redis::{KeyLayout, RedisSettings};

use super::{Lease, TTL_MS};
use crate::resp::{self, Reply};

/// Key prefix of the direct client, apart from the broker's `lockbroker`.
const DIRECT_PREFIX: &str = "benchdirect";

/// Loads the broker's scripts library into the Redis on `port`, exactly as
/// the broker builds it, and returns the names of its acquire and release
/// functions.
pub async fn load_scripts(port: u16) -> Result<Arc<(String, String)>, String> {
    let scripts = Scripts::new();
    let mut redis = resp::Connection::connect(port).await?;
    let reply = redis
        .call(&[
            b"FUNCTION",
            b"LOAD",
            b"REPLACE",
            scripts.library().as_bytes(),
        ])
        .await?;
    if reply.text() != Some(scripts.library_name()) {
        return Err(format!(
            "FUNCTION LOAD did not load {}",
            scripts.library_name()
        ));
    }
    Ok(Arc::new((
        scripts.function(ScriptName::Acquire).to_owned(),
        scripts.function(ScriptName::Release).to_owned(),
    )))
}

/// Redis over one connection, `FCALL` of the broker's functions through the
/// same typed calls the broker makes, with the broker's key layout.
pub struct DirectClient {
    redis: resp::Connection,
    shas: Arc<(String, String)>,
    name: LockName,
    /// The broker's script settings, under a key prefix of the bench's own.
    context: ScriptContext,
    /// Tokens are this prefix and a counter: unique per caller and cheap.
    token_prefix: String,
    issued: u64,
    /// The highest fence seen, passed as the floor like the broker does.
    floor: u64,
}

impl DirectClient {
    pub(super) async fn connect(
        port: u16,
        shas: Arc<(String, String)>,
        lock: &str,
    ) -> Result<Self, String> {
        let defaults = RedisSettings::default();
        let keys = KeyLayout::new(DIRECT_PREFIX);
        let context = ScriptContext {
            wake_channel: keys.wake_channel(),
            keys,
            fence_idle_ms: u64::try_from(defaults.fence_idle.as_millis()).unwrap_or(u64::MAX),
            release_memo_ms: u64::try_from(defaults.release_memo.as_millis()).unwrap_or(u64::MAX),
            // Stands in for the broker id in release announcements.
            broker_id: lockbroker_core::lease::random_hex::<8>(),
            quorum_node: false,
            wakes_per_lock: false,
        };
        Ok(Self {
            redis: resp::Connection::connect(port).await?,
            shas,
            name: LockName::parse(lock).map_err(|e| e.to_string())?,
            context,
            token_prefix: lockbroker_core::lease::random_hex::<8>(),
            issued: 0,
            floor: 0,
        })
    }

    /// Runs `call` by its function `function` and reads its reply.
    async fn run<C: ScriptCall>(&mut self, function: &str, call: &C) -> Result<C::Output, String> {
        let keys = call.keys(&self.context);
        let args = call.args(&self.context);
        let key_count = keys.len().to_string();
        let mut command: Vec<&[u8]> = vec![b"FCALL", function.as_bytes(), key_count.as_bytes()];
        command.extend(keys.iter().chain(&args).map(String::as_bytes));
        let Reply::Array(items) = self.redis.call(&command).await? else {
            return Err("expected an array reply".into());
        };
        let items = items
            .into_iter()
            .map(|item| match item {
                Reply::Int(n) => ReplyItem::Int(n),
                Reply::Text(Some(text)) => ReplyItem::Text(text),
                _ => ReplyItem::Nil,
            })
            .collect();
        call.decode(&mut ScriptReply::new(items))
            .map_err(|e| e.to_string())
    }

    pub(super) async fn acquire(&mut self) -> Result<Lease, String> {
        self.issued += 1;
        let token = LeaseToken::parse(&format!("{}{:016x}", self.token_prefix, self.issued))
            .map_err(|e| e.to_string())?;
        let params = AcquireParams {
            name: &self.name.clone(),
            kind: LeaseKind::Exclusive,
            limit: None,
            token: &token,
            ttl: Ttl::parse("ttl_ms", TTL_MS, TTL_MS).map_err(|e| e.to_string())?,
            owner: None,
            request_id: None,
            principal: &Principal::ANONYMOUS,
            lock_delay: LockDelay::default(),
            fair: None,
            waits: false,
        };
        let call = AcquireCall {
            params: &params,
            fence_floor: self.floor,
            epoch: None,
        };
        let shas = Arc::clone(&self.shas);
        let acquired = self.run(&shas.0, &call).await?;
        let AcquireOutcome::Granted(lease) = acquired.outcome else {
            return Err("acquire: the lock is busy".into());
        };
        self.floor = self.floor.max(lease.fence.get());
        Ok(Lease {
            token: lease.token.expose().to_owned(),
            fence: lease.fence.get(),
        })
    }

    pub(super) async fn release(&mut self, lease: &Lease) -> Result<(), String> {
        let token = LeaseToken::parse(&lease.token).map_err(|e| e.to_string())?;
        let name = self.name.clone();
        let shas = Arc::clone(&self.shas);
        match self
            .run(
                &shas.1,
                &ReleaseCall {
                    name: &name,
                    token: &token,
                    requeue: None,
                    undo: false,
                },
            )
            .await?
        {
            ReleaseOutcome::Released(_) => Ok(()),
            ReleaseOutcome::Lost => Err("release: the lease was lost".into()),
            ReleaseOutcome::ForceReleased { .. } => {
                Err("release: the lease was force-released".into())
            }
        }
    }
}
