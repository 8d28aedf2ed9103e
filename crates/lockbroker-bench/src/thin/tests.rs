//! The thin broker's contract against a real `redis-server`: a lease
//! excludes every other until released, only its own token releases it, and
//! each grant's fence is above the last.

use std::sync::Arc;

use lockbroker_core::{LeaseToken, LockName, Ttl};
use serde_json::Value;
use tokio::net::TcpListener;

use super::store::AcquireCall;
use super::{serve, Store};
use crate::http1::Connection;
use crate::procs;

/// A thin broker on a free port of its own Redis; dropped with the test.
struct Thin {
    _redis: procs::Proc,
    server: tokio::task::JoinHandle<()>,
    connection: Connection,
}

impl Drop for Thin {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Thin {
    async fn start() -> Thin {
        let redis = procs::redis().expect("redis-server starts");
        let url = format!("redis://127.0.0.1:{}/0", redis.port);
        let store = Store::connect(&url).await.expect("the store connects");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let port = listener.local_addr().expect("bound").port();
        let server = tokio::spawn(serve(listener, Arc::new(store)));
        let connection = Connection::connect(port).await.expect("connects");
        Thin {
            _redis: redis,
            server,
            connection,
        }
    }

    /// `POST /v1/locks/{lock}/{step}` with `body`: the status and the JSON.
    async fn post(&mut self, lock: &str, step: &str, body: &Value) -> (u16, Value) {
        let path = format!("/v1/locks/{lock}/{step}");
        let body = serde_json::to_vec(body).expect("serializes");
        let (status, reply) = self.connection.post(&path, &body).await.expect("answers");
        (status, serde_json::from_slice(&reply).expect("a JSON body"))
    }

    /// Acquires `lock`: its token and fence.
    async fn granted(&mut self, lock: &str) -> (String, u64) {
        let (status, body) = self
            .post(lock, "acquire", &serde_json::json!({"ttl_ms": 30_000}))
            .await;
        assert_eq!(status, 200, "{body}");
        let token = body["token"].as_str().expect("a token").to_owned();
        (token, body["fence"].as_u64().expect("a fence"))
    }
}

/// The error code of an error body.
fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("(none)")
}

#[tokio::test]
async fn a_lease_excludes_others_until_its_own_token_releases_it() {
    let mut thin = Thin::start().await;
    let (token, first) = thin.granted("job").await;
    assert_eq!(token.len(), 32, "128 bits as hex");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));

    let (status, body) = thin.post("job", "acquire", &serde_json::json!({})).await;
    assert_eq!(
        (status, code(&body)),
        (423, "lock_busy"),
        "a held lock is busy"
    );

    let stranger = "0".repeat(32);
    let (status, body) = thin
        .post("job", "release", &serde_json::json!({"token": stranger}))
        .await;
    assert_eq!(
        (status, code(&body)),
        (409, "lease_lost"),
        "another token releases nothing"
    );
    let (status, body) = thin.post("job", "acquire", &serde_json::json!({})).await;
    assert_eq!((status, code(&body)), (423, "lock_busy"), "still held");

    let (status, body) = thin
        .post("job", "release", &serde_json::json!({"token": token}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["released"], true);
    let (status, body) = thin
        .post("job", "release", &serde_json::json!({"token": token}))
        .await;
    assert_eq!((status, code(&body)), (409, "lease_lost"), "released once");

    let (_, second) = thin.granted("job").await;
    assert!(second > first, "fence {second} after {first}");
}

#[tokio::test]
async fn what_it_does_not_offer_is_refused() {
    let mut thin = Thin::start().await;
    let (status, body) = thin
        .post("job", "acquire", &serde_json::json!({"wait_ms": 1_000}))
        .await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));
    assert_eq!(body["error"]["field"], "wait_ms");
    let (status, body) = thin
        .post("no{brace}", "acquire", &serde_json::json!({}))
        .await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));
    let (status, body) = thin.post("job", "extend", &serde_json::json!({})).await;
    assert_eq!((status, code(&body)), (404, "not_found"));
    // Nothing above took the lock.
    thin.granted("job").await;
}

#[tokio::test]
async fn an_acquire_sent_again_gets_its_own_lease_back() {
    let redis = procs::redis().expect("redis-server starts");
    let url = format!("redis://127.0.0.1:{}/0", redis.port);
    let store = Store::connect(&url).await.expect("the store connects");
    let name = LockName::parse("job").expect("a name");
    let ttl = Ttl::parse("ttl_ms", 30_000, 30_000).expect("a TTL");
    let (token, other) = (LeaseToken::generate(), LeaseToken::generate());
    let call = |token| AcquireCall {
        name: &name,
        token,
        ttl,
    };
    let first = store.acquire(&call(&token)).await.expect("answers");
    assert!(first.is_some(), "granted");
    // What fred does after a connection drops under an acquire in flight.
    let again = store.acquire(&call(&token)).await.expect("answers");
    assert_eq!(again, first, "the same lease, the same fence");
    let stranger = store.acquire(&call(&other)).await.expect("answers");
    assert_eq!(stranger, None, "busy for any other token");
}
