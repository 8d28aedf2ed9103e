//! The targets every pair benchmark drives with the same code: the broker
//! (and the thin broker, [`crate::thin`]) over HTTP, Redis directly with the broker's own Lua scripts (`direct`),
//! the smallest correct Redis lock (`minimal`), and etcd's lock API.
//!
//! A [`PairClient`] is one caller bound to one lock on one persistent
//! connection: an acquire without waiting, then the release of that lease.

mod direct;
mod etcd;
mod minimal;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use lockbroker_api::{AcquireBody, ErrorResponse, ReleaseBody, SemaphoreAcquireBody};
use serde::de::DeserializeOwned;

use crate::http1;
use direct::DirectClient;
use etcd::EtcdClient;
use minimal::MinimalClient;

/// TTL of every benchmark lease: long enough never to expire mid-pair.
const TTL_MS: u64 = 30_000;
/// The broker's acquire body with the same TTL, serialized once.
static ACQUIRE_BODY: LazyLock<Vec<u8>> = LazyLock::new(|| acquire_body(None, None));

/// What the benchmark reads of a lease or a permit.
#[derive(serde::Deserialize)]
struct PermitOrLease {
    token: String,
    fence: u64,
}

/// What the benchmark reads of a release's answer (the thin broker's has
/// no fence).
#[derive(serde::Deserialize)]
struct Released {
    released: bool,
}

/// What a benchmark talks to.
#[derive(Clone)]
pub enum Target {
    /// A broker's HTTP listener on this loopback port (also the thin
    /// broker's, which answers the same paths).
    Broker {
        /// The broker's port.
        port: u16,
    },
    /// Several brokers sharing one store: each caller talks to one of them,
    /// picked by its lock's name.
    Brokers {
        /// The brokers' ports.
        ports: Arc<[u16]>,
    },
    /// A broker's locks, each caller waiting (up to the TTL) for its lock
    /// while another caller holds it.
    Waiting {
        /// The broker's port.
        port: u16,
    },
    /// A broker's semaphore `name` with `limit`: every caller takes a permit
    /// of that one semaphore, whatever lock it was given, waiting for a
    /// free one.
    Semaphore {
        /// The broker's port.
        port: u16,
        /// The semaphore.
        name: Arc<str>,
        /// Its limit.
        limit: u32,
    },
    /// A Redis on this loopback port, running the broker's scripts by these
    /// SHAs (acquire, release).
    Direct {
        /// The Redis port.
        port: u16,
        /// SHA-1 of the acquire and release scripts, loaded in that Redis.
        shas: Arc<(String, String)>,
    },
    /// A Redis on this loopback port, locked with `SET NX` + `INCR` and
    /// released by the compare-and-delete script of this SHA.
    Minimal {
        /// The Redis port.
        port: u16,
        /// SHA-1 of the compare-and-delete script, loaded in that Redis.
        release_sha: Arc<String>,
    },
    /// An etcd's HTTP/JSON gateway on this loopback port.
    Etcd {
        /// The etcd client port.
        port: u16,
    },
}

impl Target {
    /// Direct Redis on `port`, after loading the broker's scripts there.
    pub async fn direct(port: u16) -> Result<Self, String> {
        Ok(Target::Direct {
            port,
            shas: direct::load_scripts(port).await?,
        })
    }

    /// The minimal lock on the Redis on `port`, after loading its script.
    pub async fn minimal(port: u16) -> Result<Self, String> {
        Ok(Target::Minimal {
            port,
            release_sha: minimal::load_script(port).await?,
        })
    }
}

/// A granted lease as the benchmark sees it.
pub struct Lease {
    /// The lease token (for etcd, the key of the lock's owner).
    pub token: String,
    /// Its fence.
    pub fence: u64,
}

/// One caller on one lock over one persistent connection.
pub enum PairClient {
    /// Over HTTP to the broker.
    Broker(BrokerClient),
    /// Straight to Redis with the broker's scripts.
    Direct(Box<DirectClient>),
    /// Straight to Redis with the minimal lock.
    Minimal(MinimalClient),
    /// Over HTTP to etcd's gateway.
    Etcd(EtcdClient),
}

impl PairClient {
    /// Connects a caller of `lock`.
    pub async fn connect(target: &Target, lock: &str) -> Result<Self, String> {
        Ok(match target {
            Target::Broker { port } => {
                PairClient::Broker(BrokerClient::connect(*port, lock).await?)
            }
            Target::Waiting { port } => {
                let base = format!("/v1/locks/{lock}");
                let body = acquire_body(None, Some(TTL_MS));
                PairClient::Broker(BrokerClient::connect_to(*port, base, body).await?)
            }
            Target::Semaphore { port, name, limit } => {
                let base = format!("/v1/semaphores/{name}");
                let body = acquire_body(Some(*limit), Some(TTL_MS));
                PairClient::Broker(BrokerClient::connect_to(*port, base, body).await?)
            }
            Target::Brokers { ports } => {
                let spread = lock.bytes().fold(0usize, |hash, byte| {
                    hash.wrapping_mul(31).wrapping_add(usize::from(byte))
                });
                let port = ports[spread % ports.len().max(1)];
                PairClient::Broker(BrokerClient::connect(port, lock).await?)
            }
            Target::Direct { port, shas } => PairClient::Direct(Box::new(
                DirectClient::connect(*port, Arc::clone(shas), lock).await?,
            )),
            Target::Minimal { port, release_sha } => PairClient::Minimal(
                MinimalClient::connect(*port, Arc::clone(release_sha), lock).await?,
            ),
            Target::Etcd { port } => PairClient::Etcd(EtcdClient::connect(*port, lock).await?),
        })
    }

    /// Takes the lock without waiting; a busy lock is an error here.
    pub async fn acquire(&mut self) -> Result<Lease, String> {
        match self {
            PairClient::Broker(client) => client.acquire().await,
            PairClient::Direct(client) => client.acquire().await,
            PairClient::Minimal(client) => client.acquire().await,
            PairClient::Etcd(client) => client.acquire().await,
        }
    }

    /// Releases the lease; a lost lease is an error.
    pub async fn release(&mut self, lease: &Lease) -> Result<(), String> {
        match self {
            PairClient::Broker(client) => client.release(lease).await,
            PairClient::Direct(client) => client.release(lease).await,
            PairClient::Minimal(client) => client.release(lease).await,
            PairClient::Etcd(client) => client.release(lease).await,
        }
    }

    /// Gives back what the caller holds beyond its lock (etcd's lease).
    pub async fn close(&mut self) -> Result<(), String> {
        match self {
            PairClient::Etcd(client) => client.close().await,
            _ => Ok(()),
        }
    }
}

/// The broker over one keep-alive HTTP/1.1 connection per caller.
pub struct BrokerClient {
    connection: http1::Connection,
    acquire_path: String,
    acquire_body: Vec<u8>,
    release_path: String,
    release_body: Vec<u8>,
}

/// An acquire body with the benchmark's TTL: for a permit of a semaphore
/// with `limit`, and waiting up to `wait_ms`.
fn acquire_body(limit: Option<u32>, wait_ms: Option<u64>) -> Vec<u8> {
    let body = match limit {
        Some(limit) => serde_json::to_vec(&SemaphoreAcquireBody {
            limit: Some(u64::from(limit)),
            ttl_ms: Some(TTL_MS),
            wait_ms,
            ..SemaphoreAcquireBody::default()
        }),
        None => serde_json::to_vec(&AcquireBody {
            ttl_ms: Some(TTL_MS),
            wait_ms,
            ..AcquireBody::default()
        }),
    };
    body.unwrap_or_default()
}

impl BrokerClient {
    async fn connect(port: u16, lock: &str) -> Result<Self, String> {
        Self::connect_to(port, format!("/v1/locks/{lock}"), ACQUIRE_BODY.clone()).await
    }

    /// A caller of the lock or semaphore at `base`, acquiring with `body`.
    async fn connect_to(port: u16, base: String, body: Vec<u8>) -> Result<Self, String> {
        Ok(Self {
            connection: http1::Connection::connect(port).await?,
            acquire_path: format!("{base}/acquire"),
            acquire_body: body,
            release_path: format!("{base}/release"),
            release_body: Vec::with_capacity(64),
        })
    }

    async fn acquire(&mut self) -> Result<Lease, String> {
        let (status, body) = self
            .connection
            .post(&self.acquire_path, &self.acquire_body)
            .await
            .map_err(|e| format!("acquire: {e}"))?;
        // A permit's answer has every field a lease's has but `mode`.
        let lease: PermitOrLease = success("acquire", status, &body)?;
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
        let release: Released = success("release", status, &body)?;
        if !release.released {
            return Err("release answered released: false".into());
        }
        Ok(())
    }
}

/// The body of a `200` answer to `step`; any other answer is an error naming
/// its status and code.
pub fn success<T: DeserializeOwned>(step: &str, status: u16, body: &[u8]) -> Result<T, String> {
    if status != 200 {
        let code = serde_json::from_slice::<ErrorResponse>(body)
            .map(|body| body.error.code.as_str())
            .unwrap_or("(no error body)");
        return Err(format!("{step} answered {status}: {code}"));
    }
    serde_json::from_slice(body).map_err(|e| format!("{step} body: {e}"))
}

/// A client of the broker at `url` for waiting and one-off requests
/// (unlike [`BrokerClient`], which measures): the project's own client.
pub fn broker_client(url: &str) -> Result<lockbroker_client::Client, String> {
    lockbroker_client::Client::builder(url)
        .build()
        .map_err(|e| format!("client for {url}: {e}"))
}

/// One acquire of `name` (waiting up to `wait_ms` for it); `Ok(None)` when
/// still busy. The lease is not renewed, and is released when dropped.
pub async fn acquire(
    client: &lockbroker_client::Client,
    name: &str,
    ttl_ms: u64,
    wait_ms: u64,
) -> Result<Option<lockbroker_client::Lease>, String> {
    let options = lockbroker_client::AcquireOptions {
        ttl: Duration::from_millis(ttl_ms),
        wait: Duration::from_millis(wait_ms),
        ..lockbroker_client::AcquireOptions::default()
    };
    match client.lock(name).acquire(options).await {
        Ok(lease) => Ok(Some(lease)),
        Err(lockbroker_client::Error::Busy { .. }) => Ok(None),
        Err(error) => Err(format!("acquire {name}: {error}")),
    }
}

/// Releases a lease; any answer but a release is an error.
pub async fn release(lease: &lockbroker_client::Lease) -> Result<(), String> {
    lease
        .release()
        .await
        .map(drop)
        .map_err(|e| format!("release {}: {e}", lease.name()))
}

/// Waits up to 5 s for a broker to answer `/readyz`.
pub async fn wait_ready(url: &str) -> Result<(), String> {
    let client = broker_client(url)?;
    for _ in 0..200 {
        if client.ready().await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err(format!("{url} never became ready"))
}

/// Waits up to 10 s for an etcd on `port` to report itself healthy (it has
/// elected itself leader).
pub async fn wait_etcd(http: &reqwest::Client, port: u16) -> Result<(), String> {
    let url = format!("http://127.0.0.1:{port}/health");
    for _ in 0..400 {
        if let Ok(response) = http.get(&url).send().await {
            if response.status().is_success() {
                let body = response.text().await.unwrap_or_default();
                if body.contains("\"true\"") {
                    return Ok(());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err(format!("etcd on {port} never became healthy"))
}
