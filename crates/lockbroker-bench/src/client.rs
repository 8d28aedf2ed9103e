//! The two targets every pair benchmark drives with the same code: the broker
//! over HTTP, and Redis directly with the broker's own Lua scripts.
//!
//! A [`PairClient`] is one caller bound to one lock on one persistent
//! connection: an acquire without waiting, then the release of that lease.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use lockbroker_api::{AcquireBody, ErrorResponse, LeaseResponse, ReleaseBody, ReleaseResponse};
use lockbroker_core::{
    AcquireOutcome, AcquireParams, LeaseToken, LockDelay, LockName, Principal, ReleaseOutcome, Ttl,
};
use lockbroker_redis::scripts::calls::{AcquireCall, ReleaseCall};
use lockbroker_redis::scripts::{
    Reply as ScriptReply, ReplyItem, ScriptCall, ScriptContext, ScriptName, Scripts,
};
use lockbroker_redis::{KeyLayout, RedisSettings};
use serde::de::DeserializeOwned;

use crate::http1;
use crate::resp::{self, Reply};

/// TTL of every benchmark lease: long enough never to expire mid-pair.
const TTL_MS: u64 = 30_000;
/// The broker's acquire body with the same TTL, serialized once.
static ACQUIRE_BODY: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let body = AcquireBody {
        ttl_ms: Some(TTL_MS),
        ..AcquireBody::default()
    };
    serde_json::to_vec(&body).unwrap_or_default()
});
/// Key prefix of the direct client, apart from the broker's `lockbroker`.
const DIRECT_PREFIX: &str = "benchdirect";

/// What a benchmark talks to.
#[derive(Clone)]
pub enum Target {
    /// A broker's HTTP listener on this loopback port.
    Broker {
        /// The broker's port.
        port: u16,
    },
    /// A Redis on this loopback port, running the scripts by these SHAs.
    Direct {
        /// The Redis port.
        port: u16,
        /// SHA-1 of the acquire and release scripts, loaded in that Redis.
        shas: Arc<(String, String)>,
    },
}

impl Target {
    /// Direct Redis on `port`, after loading the broker's scripts there
    /// (acquire with the queue helpers prepended, exactly as the broker does).
    pub async fn direct(port: u16) -> Result<Self, String> {
        let scripts = Scripts::new();
        let mut redis = resp::Connection::connect(port).await?;
        let load = |script: &fred::types::scripts::Script| {
            let lua = script.lua().map(|s| s.to_string()).unwrap_or_default();
            let expected = script.sha1().to_string();
            (lua, expected)
        };
        let mut shas = Vec::new();
        for name in [ScriptName::Acquire, ScriptName::Release] {
            let (lua, expected) = load(scripts.get(name));
            let reply = redis.call(&[b"SCRIPT", b"LOAD", lua.as_bytes()]).await?;
            let sha = reply.text().unwrap_or_default().to_owned();
            if sha != expected {
                return Err(format!(
                    "SCRIPT LOAD gave {sha}, the broker uses {expected}"
                ));
            }
            shas.push(sha);
        }
        let release = shas.pop().unwrap_or_default();
        let acquire = shas.pop().unwrap_or_default();
        Ok(Target::Direct {
            port,
            shas: Arc::new((acquire, release)),
        })
    }
}

/// A granted lease as the benchmark sees it.
pub struct Lease {
    /// The lease token.
    pub token: String,
    /// Its fence.
    pub fence: u64,
}

/// One caller on one lock over one persistent connection.
pub enum PairClient {
    /// Over HTTP to the broker.
    Broker(BrokerClient),
    /// Straight to Redis.
    Direct(Box<DirectClient>),
}

impl PairClient {
    /// Connects a caller of `lock` (the connection opens on first use for
    /// HTTP; the benchmarks warm it up before they measure).
    pub async fn connect(target: &Target, lock: &str) -> Result<Self, String> {
        Ok(match target {
            Target::Broker { port } => {
                PairClient::Broker(BrokerClient::connect(*port, lock).await?)
            }
            Target::Direct { port, shas } => PairClient::Direct(Box::new(
                DirectClient::connect(*port, Arc::clone(shas), lock).await?,
            )),
        })
    }

    /// Takes the lock without waiting; a busy lock is an error here.
    pub async fn acquire(&mut self) -> Result<Lease, String> {
        match self {
            PairClient::Broker(client) => client.acquire().await,
            PairClient::Direct(client) => client.acquire().await,
        }
    }

    /// Releases the lease; a lost lease is an error.
    pub async fn release(&mut self, lease: &Lease) -> Result<(), String> {
        match self {
            PairClient::Broker(client) => client.release(lease).await,
            PairClient::Direct(client) => client.release(lease).await,
        }
    }
}

/// The broker over one keep-alive HTTP/1.1 connection per caller.
pub struct BrokerClient {
    connection: http1::Connection,
    acquire_path: String,
    release_path: String,
    release_body: Vec<u8>,
}

impl BrokerClient {
    async fn connect(port: u16, lock: &str) -> Result<Self, String> {
        let base = format!("/v1/locks/{lock}");
        Ok(Self {
            connection: http1::Connection::connect(port).await?,
            acquire_path: format!("{base}/acquire"),
            release_path: format!("{base}/release"),
            release_body: Vec::with_capacity(64),
        })
    }

    async fn acquire(&mut self) -> Result<Lease, String> {
        let (status, body) = self
            .connection
            .post(&self.acquire_path, &ACQUIRE_BODY)
            .await
            .map_err(|e| format!("acquire: {e}"))?;
        let lease: LeaseResponse = success("acquire", status, &body)?;
        Ok(Lease {
            token: lease.token,
            fence: lease.fence,
        })
    }

    async fn release(&mut self, lease: &Lease) -> Result<(), String> {
        self.release_body.clear();
        serde_json::to_writer(&mut self.release_body, &ReleaseBody::new(&*lease.token))
            .map_err(|e| e.to_string())?;
        let (status, body) = self
            .connection
            .post(&self.release_path, &self.release_body)
            .await
            .map_err(|e| format!("release: {e}"))?;
        let release: ReleaseResponse = success("release", status, &body)?;
        if !release.released {
            return Err("release answered released: false".into());
        }
        Ok(())
    }
}

/// The body of a `200` answer to `step`; any other answer is an error naming
/// its status and code.
fn success<T: DeserializeOwned>(step: &str, status: u16, body: &[u8]) -> Result<T, String> {
    if status != 200 {
        let code = serde_json::from_slice::<ErrorResponse>(body)
            .map(|body| body.error.code.as_str())
            .unwrap_or("(no error body)");
        return Err(format!("{step} answered {status}: {code}"));
    }
    serde_json::from_slice(body).map_err(|e| format!("{step} body: {e}"))
}

/// Redis over one connection, `EVALSHA` of the broker's scripts through the
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
    async fn connect(port: u16, shas: Arc<(String, String)>, lock: &str) -> Result<Self, String> {
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

    /// Runs `call` by the SHA `sha` and reads its reply.
    async fn run<C: ScriptCall>(&mut self, sha: &str, call: &C) -> Result<C::Output, String> {
        let keys = call.keys(&self.context);
        let args = call.args(&self.context);
        let key_count = keys.len().to_string();
        let mut command: Vec<&[u8]> = vec![b"EVALSHA", sha.as_bytes(), key_count.as_bytes()];
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

    async fn acquire(&mut self) -> Result<Lease, String> {
        self.issued += 1;
        let token = LeaseToken::parse(&format!("{}{:016x}", self.token_prefix, self.issued))
            .map_err(|e| e.to_string())?;
        let params = AcquireParams {
            name: &self.name.clone(),
            token: &token,
            ttl: Ttl::parse("ttl_ms", TTL_MS, TTL_MS).map_err(|e| e.to_string())?,
            owner: None,
            request_id: None,
            principal: &Principal::ANONYMOUS,
            lock_delay: LockDelay::default(),
            fair: None,
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

    async fn release(&mut self, lease: &Lease) -> Result<(), String> {
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
                },
            )
            .await?
        {
            ReleaseOutcome::Released(_) => Ok(()),
            ReleaseOutcome::Lost => Err("release: the lease was lost".into()),
        }
    }
}

/// One acquire over a shared HTTP client (for waiting and one-off requests,
/// unlike [`BrokerClient`]); `Ok(None)` when busy.
pub async fn acquire(
    http: &reqwest::Client,
    url: &str,
    name: &str,
    ttl_ms: u64,
    wait_ms: u64,
) -> Result<Option<Lease>, String> {
    let body = AcquireBody {
        ttl_ms: Some(ttl_ms),
        wait_ms: Some(wait_ms),
        ..AcquireBody::default()
    };
    let response = http
        .post(format!("{url}/v1/locks/{name}/acquire"))
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("acquire: {e}"))?;
    let status = response.status().as_u16();
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("acquire body: {e}"))?;
    if status == 423 {
        return Ok(None);
    }
    let lease: LeaseResponse = success("acquire", status, &body)?;
    Ok(Some(Lease {
        token: lease.token,
        fence: lease.fence,
    }))
}

/// Releases a lease; any answer but success is an error.
pub async fn release(
    http: &reqwest::Client,
    url: &str,
    name: &str,
    token: &str,
) -> Result<(), String> {
    let response = http
        .post(format!("{url}/v1/locks/{name}/release"))
        .json(&ReleaseBody::new(token))
        .send()
        .await
        .map_err(|e| format!("release: {e}"))?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(format!("release answered {}", response.status()))
    }
}

/// Waits up to 5 s for a broker to answer `/readyz`.
pub async fn wait_ready(http: &reqwest::Client, url: &str) -> Result<(), String> {
    for _ in 0..200 {
        if let Ok(response) = http.get(format!("{url}/readyz")).send().await {
            if response.status().is_success() {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err(format!("{url} never became ready"))
}
