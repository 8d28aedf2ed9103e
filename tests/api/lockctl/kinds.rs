//! `lockctl run --shared` and `lockctl run --limit N`: readers together, a
//! writer kept out, and at most N commands at once across hosts.

use std::time::Duration;

use lockbroker_tests::{RedisServer, TestApp};
use serde_json::Value;

use super::{eventually, finish, in_dir, lockctl, output, stderr, Scratch, BUSY, USAGE};

/// A `lockctl run NAME <flags> -- sh -c ...` that marks `started-<tag>` and
/// runs until `stop` appears in `scratch`.
fn held_run(
    app: &TestApp,
    scratch: &Scratch,
    name: &str,
    flags: &[&str],
    tag: &str,
) -> std::process::Command {
    let mut command = lockctl(app);
    command
        .args(["run", name, "--ttl", "2s"])
        .args(flags)
        .args(["--", "sh", "-c"]);
    command.arg(in_dir(
        &scratch.0,
        &format!(
            r#"echo "$LOCKBROKER_FENCE $LOCKBROKER_LIMIT" > started-{tag}; while [ ! -e stop ]; do sleep 0.05; done"#
        ),
    ));
    command
}

#[tokio::test]
async fn run_with_limit_runs_at_most_limit_commands_at_once() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();
    let mut running = Vec::new();
    for tag in ["a", "b"] {
        let run = held_run(&app, &scratch, "backups", &["--limit", "2"], tag);
        running.push(run_spawned(run));
        let marker = scratch.path(&format!("started-{tag}"));
        eventually(Duration::from_secs(10), "a permit holder to start", || {
            marker.exists()
        })
        .await;
    }
    let (a, b) = (scratch.read("started-a"), scratch.read("started-b"));
    for started in [&a, &b] {
        assert!(
            started.as_deref().is_some_and(|s| s.ends_with(" 2")),
            "{started:?}"
        );
    }
    assert_ne!(a, b, "each holds its own permit, with its own fence");

    let third = held_run(
        &app,
        &scratch,
        "backups",
        &["--limit", "2", "--if-busy", "fail"],
        "c",
    );
    let refused = output(third).await;
    assert_eq!(refused.status.code(), Some(BUSY), "{}", stderr(&refused));
    assert!(!scratch.path("started-c").exists(), "no third command ran");

    let other_limit = held_run(&app, &scratch, "backups", &["--limit", "5"], "d");
    let conflict = output(other_limit).await;
    assert_eq!(conflict.status.code(), Some(USAGE), "{}", stderr(&conflict));
    assert!(
        stderr(&conflict).contains('2'),
        "names the limit in force: {}",
        stderr(&conflict)
    );

    // Both outlive several renewals (TTL 2 s), then end and free their permits.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let status = app.get("/v1/semaphores/backups").await;
    assert_eq!(
        status.body["held"], 2,
        "renewed while running: {}",
        status.body
    );
    std::fs::write(scratch.path("stop"), "").expect("stop file");
    for run in running {
        let run = finish(run).await;
        assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    }
    let status = app.get("/v1/semaphores/backups").await;
    assert_eq!(status.body["held"], 0, "released: {}", status.body);
}

#[tokio::test]
async fn run_shared_runs_readers_together_and_keeps_a_writer_out() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();
    let mut readers = Vec::new();
    for tag in ["r1", "r2"] {
        readers.push(run_spawned(held_run(
            &app,
            &scratch,
            "report",
            &["--shared"],
            tag,
        )));
        let marker = scratch.path(&format!("started-{tag}"));
        eventually(Duration::from_secs(10), "a reader to start", || {
            marker.exists()
        })
        .await;
    }
    let status = app.status("report").await;
    assert_eq!(status.body["mode"], "shared", "{}", status.body);
    assert_eq!(status.body["holder_count"], 2);

    let writer = held_run(&app, &scratch, "report", &["--if-busy", "fail"], "w");
    let refused = output(writer).await;
    assert_eq!(refused.status.code(), Some(BUSY), "{}", stderr(&refused));
    assert!(
        !scratch.path("started-w").exists(),
        "the writer never ran beside readers"
    );

    std::fs::write(scratch.path("stop"), "").expect("stop file");
    for run in readers {
        let run = finish(run).await;
        assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    }
    assert_eq!(app.status("report").await.body["held"], Value::Bool(false));
    let mut conflicting = lockctl(&app);
    conflicting.args(["run", "report", "--shared", "--limit", "2", "--", "true"]);
    let conflicting = output(conflicting).await;
    assert_eq!(
        conflicting.status.code(),
        Some(USAGE),
        "--shared and --limit conflict"
    );
}

fn run_spawned(mut command: std::process::Command) -> std::process::Child {
    command.spawn().expect("spawn lockctl run")
}
