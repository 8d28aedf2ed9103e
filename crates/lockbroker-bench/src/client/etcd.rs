//! The `etcd` target: etcd's v3 lock API through its HTTP/JSON gateway, as a
//! peer lock service. One lease per caller (`/v3/lease/grant`), then per pair
//! `/v3/lock/lock` with that lease and `/v3/lock/unlock` with the key it
//! returned. The fence is the revision of the lock's grant (the header of the
//! lock reply), which etcd's own documentation offers as the fencing token.

use serde::{Deserialize, Serialize};

use super::Lease;
use crate::http1;

/// Lease TTL in seconds: outlives any slice; the lease is revoked after it.
const LEASE_TTL_S: u64 = 30;

/// One caller of one etcd lock over one keep-alive HTTP/1.1 connection.
pub struct EtcdClient {
    connection: http1::Connection,
    /// The lease every lock of this caller is taken with.
    lease: String,
    /// The lock name, base64 as the gateway wants bytes.
    name: String,
    body: Vec<u8>,
}

#[derive(Serialize)]
struct GrantBody {
    #[serde(rename = "TTL")]
    ttl: u64,
}

#[derive(Deserialize)]
struct GrantReply {
    #[serde(rename = "ID")]
    id: String,
}

#[derive(Serialize)]
struct LockBody<'a> {
    name: &'a str,
    lease: &'a str,
}

#[derive(Deserialize)]
struct LockReply {
    header: Header,
    key: String,
}

/// The gateway writes 64-bit integers as strings; a zero may be left out.
#[derive(Deserialize)]
struct Header {
    #[serde(default)]
    revision: Option<String>,
}

#[derive(Serialize)]
struct UnlockBody<'a> {
    key: &'a str,
}

#[derive(Serialize)]
struct RevokeBody<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
}

/// What the gateway answers instead of a reply.
#[derive(Deserialize)]
struct ErrorReply {
    #[serde(default)]
    message: String,
}

impl EtcdClient {
    /// Connects and grants the caller's lease.
    pub(super) async fn connect(port: u16, lock: &str) -> Result<Self, String> {
        let mut client = Self {
            connection: http1::Connection::connect(port).await?,
            lease: String::new(),
            name: base64(lock.as_bytes()),
            body: Vec::with_capacity(128),
        };
        let grant: GrantReply = post(
            (&mut client.connection, &mut client.body),
            "lease grant",
            "/v3/lease/grant",
            &GrantBody { ttl: LEASE_TTL_S },
        )
        .await?;
        client.lease = grant.id;
        Ok(client)
    }

    pub(super) async fn acquire(&mut self) -> Result<Lease, String> {
        let body = LockBody {
            name: &self.name,
            lease: &self.lease,
        };
        let reply: LockReply = post(
            (&mut self.connection, &mut self.body),
            "lock",
            "/v3/lock/lock",
            &body,
        )
        .await?;
        let fence = reply
            .header
            .revision
            .as_deref()
            .unwrap_or("0")
            .parse()
            .map_err(|e| format!("lock: revision: {e}"))?;
        Ok(Lease {
            token: reply.key,
            fence,
        })
    }

    pub(super) async fn release(&mut self, lease: &Lease) -> Result<(), String> {
        let body = UnlockBody { key: &lease.token };
        let _: serde_json::Value = post(
            (&mut self.connection, &mut self.body),
            "unlock",
            "/v3/lock/unlock",
            &body,
        )
        .await?;
        Ok(())
    }

    /// Revokes the caller's lease, so no lease outlives its slice.
    pub(super) async fn close(&mut self) -> Result<(), String> {
        let body = RevokeBody { id: &self.lease };
        let _: serde_json::Value = post(
            (&mut self.connection, &mut self.body),
            "lease revoke",
            "/v3/lease/revoke",
            &body,
        )
        .await?;
        Ok(())
    }
}

/// `POST path` with `body` (serialized into `buffer`); the reply when it is a
/// `200`, otherwise an error with the gateway's message.
async fn post<B: Serialize, R: serde::de::DeserializeOwned>(
    (connection, buffer): (&mut http1::Connection, &mut Vec<u8>),
    step: &str,
    path: &str,
    body: &B,
) -> Result<R, String> {
    buffer.clear();
    serde_json::to_writer(&mut *buffer, body).map_err(|e| e.to_string())?;
    let (status, reply) = connection
        .post(path, buffer)
        .await
        .map_err(|e| format!("etcd {step}: {e}"))?;
    if status != 200 {
        let message = serde_json::from_slice::<ErrorReply>(&reply)
            .map(|e| e.message)
            .unwrap_or_default();
        return Err(format!("etcd {step} answered {status}: {message}"));
    }
    serde_json::from_slice(&reply).map_err(|e| format!("etcd {step} body: {e}"))
}

/// Standard base64 with padding, which is how the gateway reads `bytes`.
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let bytes = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::base64;

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"bench-latency"), "YmVuY2gtbGF0ZW5jeQ==");
    }
}
