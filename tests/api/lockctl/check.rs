//! `lockctl check NAME FENCE`: exit 0 while a valid lease carries the fence,
//! 1 when none does, and the usual codes for errors, so a shell script can
//! guard a resource with it.

use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{lockctl, output, stdout, UNAVAILABLE, USAGE};

/// `lockctl check` with `args` after it: its exit code and stdout.
async fn check(app: &TestApp, args: &[&str]) -> (Option<i32>, String) {
    let mut command = lockctl(app);
    command.arg("check").args(args);
    let done = output(command).await;
    (done.status.code(), stdout(&done))
}

#[tokio::test]
async fn check_exits_0_while_the_fence_is_current_and_1_once_it_is_not() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let lease = app.acquire("ledger", 10_000).await;
    let (fence, token) = (lease.fence().to_string(), lease.token());

    let (code, out) = check(&app, &["ledger", &fence, "--json"]).await;
    assert_eq!(code, Some(0), "{out}");
    let body: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        (&body["current"], &body["held"]),
        (&json!(true), &json!(true))
    );
    assert!(!out.contains(&token), "no token in {out}");
    let older = (lease.fence() - 1).to_string();
    assert_eq!(
        check(&app, &["ledger", &older]).await.0,
        Some(1),
        "another fence"
    );

    app.release("ledger", &token).await;
    let (code, out) = check(&app, &["ledger", &fence, "--field", "current"]).await;
    assert_eq!((code, out.as_str()), (Some(1), "false"));

    let permit = app
        .post(
            "/v1/semaphores/gpus/acquire",
            json!({"ttl_ms": 10_000, "limit": 2}),
        )
        .await;
    assert_eq!(permit.status, StatusCode::OK, "{}", permit.body);
    let fence = permit.body["fence"].to_string();
    assert_eq!(
        check(&app, &["gpus", &fence, "--semaphore"]).await.0,
        Some(0)
    );
    assert_eq!(
        check(&app, &["gpus", &fence]).await.0,
        Some(1),
        "a lock of that name"
    );
}

#[tokio::test]
async fn check_keeps_the_usual_codes_for_errors() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    assert_eq!(
        check(&app, &["ledger", "0"]).await.0,
        Some(USAGE),
        "fence 0"
    );
    assert_eq!(
        check(&app, &["bad name", "3"]).await.0,
        Some(USAGE),
        "bad name"
    );
    let nowhere = format!("http://127.0.0.1:{}", lockbroker_tests::redis::free_port());
    let unreachable = check(&app, &["ledger", "3", "--url", &nowhere]).await.0;
    assert_eq!(unreachable, Some(UNAVAILABLE));
}
