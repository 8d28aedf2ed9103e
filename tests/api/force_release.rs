//! What a force-released holder hears: `409 lease_lost` saying that an
//! operator force-released its lease and by which API key id (never the
//! token), on its extend and on every release it sends, for a lock's lease
//! and a semaphore's permit alike.

use lockbroker_server::auth::{hash_token, ApiKeyConfig, Scope};
use lockbroker_tests::app::test_settings;
use lockbroker_tests::{RedisServer, Reply, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};

const WORKER: &str = "worker-key-5b0e7d2c9a14";
const OPS: &str = "ops-key-c83f1a6e0d27";

fn key(id: &str, token: &str, scopes: &[Scope]) -> ApiKeyConfig {
    ApiKeyConfig {
        id: id.to_owned(),
        sha256: hash_token(token),
        scopes: scopes.to_vec(),
        prefixes: vec!["*".to_owned()],
        rate_limit_per_sec: None,
    }
}

async fn post_as(app: &TestApp, key: &str, path: &str, body: Value) -> Reply {
    let request = app.http.post(app.url(path)).bearer_auth(key).json(&body);
    app.send(request).await
}

async fn delete_as(app: &TestApp, key: &str, path: &str) -> Reply {
    app.send(app.http.delete(app.url(path)).bearer_auth(key))
        .await
}

/// Checks that `reply` is the force-released answer: `409 lease_lost`, the
/// message and `force_released_by` naming `by`, and no token anywhere.
fn assert_force_released(reply: &Reply, what: &str, by: &str, message: &str, token: &str) {
    assert_eq!(reply.status, StatusCode::CONFLICT, "{what}: {}", reply.body);
    assert_eq!(reply.code(), "lease_lost", "{what}: {}", reply.body);
    assert_eq!(reply.body["error"]["message"], message, "{what}");
    assert_eq!(reply.body["error"]["force_released_by"], by, "{what}");
    assert!(
        !reply.body.to_string().contains(token),
        "{what}: the token is in the answer"
    );
}

#[tokio::test]
async fn a_force_released_holder_is_told_which_key_ended_its_lease() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.auth.keys = vec![
        key("worker", WORKER, &[Scope::Lock]),
        key("ops", OPS, &[Scope::Admin]),
    ];
    let app = TestApp::spawn_with(settings).await;
    let lease = post_as(
        &app,
        WORKER,
        "/v1/locks/jobs:nightly/acquire",
        json!({"ttl_ms": 60_000}),
    )
    .await;
    let permit = post_as(
        &app,
        WORKER,
        "/v1/semaphores/jobs:pool/acquire",
        json!({"ttl_ms": 60_000, "limit": 2}),
    )
    .await;
    for path in ["/v1/locks/jobs:nightly", "/v1/semaphores/jobs:pool"] {
        let forced = delete_as(&app, OPS, path).await;
        assert_eq!(forced.status, StatusCode::OK, "{path}: {}", forced.body);
        assert_eq!(forced.body["released"], true, "{path}");
    }
    for (path, name, token) in [
        ("/v1/locks/jobs:nightly", "jobs:nightly", lease.token()),
        (
            "/v1/semaphores/jobs:pool",
            "jobs:pool",
            permit.body["token"].as_str().expect("token").to_owned(),
        ),
    ] {
        let message = format!(
            "the lease on \"{name}\" was force-released by key id \"ops\"; another holder may \
             already have run, so treat the work done under this lease as possibly duplicated"
        );
        let extend = json!({"token": token, "ttl_ms": 60_000});
        let reply = post_as(&app, WORKER, &format!("{path}/extend"), extend).await;
        assert_force_released(&reply, &format!("{path} extend"), "ops", &message, &token);
        // A re-sent release must not claim "released" either.
        for what in ["release", "re-sent release"] {
            let body = json!({"token": token});
            let reply = post_as(&app, WORKER, &format!("{path}/release"), body).await;
            assert_force_released(&reply, &format!("{path} {what}"), "ops", &message, &token);
        }
    }
}

#[tokio::test]
async fn without_api_keys_the_holder_hears_an_operator_force_released_it() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let lease = app.acquire("job", 60_000).await;
    let forced = app.send(app.http.delete(app.url("/v1/locks/job"))).await;
    assert_eq!(forced.status, StatusCode::OK, "{}", forced.body);
    let token = lease.token();
    let message = "the lease on \"job\" was force-released by an operator; another holder may \
                   already have run, so treat the work done under this lease as possibly \
                   duplicated";
    let released = app.release("job", &token).await;
    assert_force_released(&released, "release", "anonymous", message, &token);
    let extended = app.extend("job", &token, 60_000).await;
    assert_force_released(&extended, "extend", "anonymous", message, &token);

    // Counted apart from lost leases: an operator ended it, no overrun.
    let text = app.metrics().await;
    for (series, count) in [
        (
            r#"lockbroker_extends_total{family="other",kind="lock",outcome="force_released"}"#,
            1,
        ),
        (
            r#"lockbroker_releases_total{family="other",kind="lock",outcome="force_released"}"#,
            1,
        ),
        (
            r#"lockbroker_leases_lost_total{family="other",kind="lock",operation="release"}"#,
            0,
        ),
    ] {
        assert!(
            text.contains(&format!("{series} {count}\n")),
            "{series} {count} in\n{text}"
        );
    }

    // A lease that merely expired carries no force_released_by.
    // Long enough that a slow grant on a loaded machine still leaves the
    // lease the validity it must have on arrival.
    let short = app.acquire("short", 400).await;
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let lost = app.extend("short", &short.token(), 1_000).await;
    assert_eq!(lost.code(), "lease_lost", "{}", lost.body);
    assert!(
        lost.body["error"].get("force_released_by").is_none(),
        "{}",
        lost.body
    );
}
