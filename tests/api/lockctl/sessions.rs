//! `lockctl run NAME --lock NAME2`: the leases are held under one session,
//! which alone is kept alive (past --ttl), whose loss stops the command, and
//! whose close releases them all when the command ends.

use std::time::{Duration, Instant};

use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::Value;

use super::{eventually, finish, held, in_dir, lockctl, stderr, Scratch, LEASE_LOST};

/// `lockctl run ledger:a --lock ledger:b --ttl TTL` running `script`,
/// which first leaves the session's id in the file `session`.
fn run_both(app: &TestApp, scratch: &Scratch, ttl: &str, script: &str) -> std::process::Child {
    let mut command = lockctl(app);
    command
        .args(["run", "ledger:a", "--lock", "ledger:b", "--ttl", ttl])
        .args(["--kill-after", "5s", "--", "sh", "-c"])
        .arg(in_dir(
            &scratch.0,
            &format!(r#"echo "$LOCKBROKER_SESSION" > session; touch started; {script}"#),
        ));
    command.spawn().expect("spawn")
}

/// `GET /v1/sessions/{id}`.
async fn session(app: &TestApp, id: &str) -> Value {
    let read = app.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.body);
    read.body
}

#[tokio::test]
async fn several_locks_share_one_session_kept_past_the_ttl_and_closed_at_the_end() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();

    let run = run_both(
        &app,
        &scratch,
        "900ms",
        "while [ ! -e stop ]; do sleep 0.05; done",
    );
    eventually(Duration::from_secs(10), "the command to start", || {
        scratch.path("started").exists()
    })
    .await;
    let id = scratch.read("session").unwrap_or_default();
    assert_eq!(
        id.len(),
        16,
        "LOCKBROKER_SESSION is the session's id: {id:?}"
    );
    let opened = session(&app, &id).await;
    assert_eq!(opened["open"], true, "{opened}");
    assert_eq!(
        opened["leases"], 2,
        "one session holds both leases: {opened}"
    );
    assert_eq!(
        opened["ttl_ms"], 900,
        "the session's TTL is --ttl: {opened}"
    );
    let (a, b) = (app.status("ledger:a").await, app.status("ledger:b").await);
    assert_eq!(opened["owner"], a.body["owner"], "{opened} {}", a.body);

    // Well past the TTL: the session's keepalives kept the same leases.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    for (name, before) in [("ledger:a", &a), ("ledger:b", &b)] {
        let now = app.status(name).await;
        assert_eq!(now.body["held"], true, "{name}: {}", now.body);
        assert_eq!(
            now.body["fence"], before.body["fence"],
            "{name}: the same lease"
        );
    }
    let kept = session(&app, &id).await;
    assert_eq!(kept["open"], true, "{kept}");
    assert_eq!(kept["leases"], 2, "{kept}");

    std::fs::write(scratch.path("stop"), "").expect("stop");
    let run = finish(run).await;
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert!(stderr(&run).is_empty(), "quiet: {}", stderr(&run));
    assert!(!held(&app, "ledger:a").await && !held(&app, "ledger:b").await);
    let closed = session(&app, &id).await;
    assert_eq!(closed["open"], false, "closed at the end: {closed}");
}

#[tokio::test]
async fn a_lost_session_stops_the_command_and_exits_79() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();

    let run = run_both(
        &app,
        &scratch,
        "1s",
        "trap 'echo term > got-term; exit 0' TERM; while true; do sleep 0.05; done",
    );
    eventually(Duration::from_secs(10), "the command to start", || {
        scratch.path("started").exists()
    })
    .await;
    let id = scratch.read("session").unwrap_or_default();

    // Take the session away behind lockctl's back: its next keepalive is
    // told `session_lost`.
    let key = format!("{}:session:{{{id}}}:lease", app.prefix);
    assert_eq!(redis.conn().cmd(&["DEL", &key]).as_int(), Some(1), "{key}");
    let lost_at = Instant::now();

    let run = finish(run).await;
    let said = stderr(&run);
    assert_eq!(run.status.code(), Some(LEASE_LOST), "{said}");
    assert!(
        lost_at.elapsed() < Duration::from_secs(3),
        "stopped at the next keepalive"
    );
    assert_eq!(scratch.read("got-term").as_deref(), Some("term"));
    assert!(said.contains("session_lost"), "{said}");
    assert!(
        said.contains(r#"the session of "ledger:a" and "ledger:b" was lost"#),
        "{said}"
    );
}
