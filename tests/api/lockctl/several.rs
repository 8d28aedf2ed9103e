//! `lockctl run NAME --lock NAME2 ...`: several locks held for the whole run,
//! taken all or none, every lease renewed, the command stopped when any is
//! lost, and runs over overlapping sets in either order never deadlocked.

use std::process::Command;
use std::time::{Duration, Instant};

use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;

use super::{eventually, finish, held, in_dir, lockctl, output, stderr, Scratch, BUSY, LEASE_LOST};

/// `lockctl run` over `names` (the first as NAME, the others as --lock),
/// with `flags`, running `script` in `scratch`.
fn run_over(
    app: &TestApp,
    scratch: &Scratch,
    names: &[&str],
    flags: &[&str],
    script: &str,
) -> Command {
    let mut command = lockctl(app);
    command.args(["run", names[0]]);
    for name in &names[1..] {
        command.args(["--lock", name]);
    }
    command
        .args(flags)
        .args(["--", "sh", "-c"])
        .arg(in_dir(&scratch.0, script));
    command
}

#[tokio::test]
async fn every_lock_is_held_while_the_command_runs_and_released_after() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();

    let run = run_over(
        &app,
        &scratch,
        &["ledger:b", "ledger:a"],
        &["--ttl", "1s"],
        r#"env | grep '^LOCKBROKER_' | grep -v TOKEN | sort > env
           [ -n "$LOCKBROKER_TOKEN_2" ] && [ "$LOCKBROKER_TOKEN_2" != "$LOCKBROKER_TOKEN" ] && echo yes > tokens
           touch started; while [ ! -e stop ]; do sleep 0.05; done"#,
    )
    .spawn()
    .expect("spawn");
    eventually(Duration::from_secs(10), "the command to start", || {
        scratch.path("started").exists()
    })
    .await;
    // Past a few renewals (every third of the TTL), each lease still held.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (b, a) = (app.status("ledger:b").await, app.status("ledger:a").await);
    assert_eq!(b.body["held"], true, "{}", b.body);
    assert_eq!(a.body["held"], true, "{}", a.body);

    let env = scratch.read("env").expect("the environment");
    let var = |key: &str| {
        env.lines()
            .find_map(|line| line.strip_prefix(&format!("{key}=")))
            .unwrap_or_default()
            .to_owned()
    };
    let (fence_b, fence_a) = (&b.body["fence"], &a.body["fence"]);
    assert_eq!(var("LOCKBROKER_LOCK"), "ledger:b", "NAME first: {env}");
    assert_eq!(var("LOCKBROKER_FENCE"), fence_b.to_string(), "{env}");
    assert_eq!(var("LOCKBROKER_LOCK_1"), "ledger:b", "{env}");
    assert_eq!(var("LOCKBROKER_FENCE_1"), fence_b.to_string(), "{env}");
    assert_eq!(var("LOCKBROKER_LOCK_2"), "ledger:a", "{env}");
    assert_eq!(var("LOCKBROKER_FENCE_2"), fence_a.to_string(), "{env}");
    assert_eq!(var("LOCKBROKER_LOCKS"), "ledger:b ledger:a", "{env}");
    assert_eq!(
        var("LOCKBROKER_FENCES"),
        format!("ledger:b={fence_b} ledger:a={fence_a}"),
        "{env}"
    );
    assert_eq!(scratch.read("tokens").as_deref(), Some("yes"));

    std::fs::write(scratch.path("stop"), "").expect("stop");
    let run = finish(run).await;
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert!(
        stderr(&run).is_empty(),
        "quiet on success: {}",
        stderr(&run)
    );
    assert!(!held(&app, "ledger:a").await && !held(&app, "ledger:b").await);
}

#[tokio::test]
async fn a_busy_lock_of_the_set_keeps_the_command_from_running_and_is_named() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();

    for busy in ["ledger:a", "ledger:b"] {
        let holder = app.acquire(busy, 60_000).await;
        assert_eq!(holder.status, StatusCode::OK, "{}", holder.body);

        let refused = output(run_over(
            &app,
            &scratch,
            &["ledger:a", "ledger:b"],
            &["--wait", "300ms", "--if-busy", "fail"],
            "touch ran",
        ))
        .await;
        let said = stderr(&refused);
        assert_eq!(refused.status.code(), Some(BUSY), "{said}");
        assert!(said.contains(&format!("{busy:?} is busy")), "{said}");
        assert!(!scratch.path("ran").exists(), "the command never ran");
        assert!(
            !held(&app, "ledger:a").await || busy == "ledger:a",
            "none of the set stays held"
        );
        assert!(!held(&app, "ledger:b").await || busy == "ledger:b");

        let skipped = output(run_over(
            &app,
            &scratch,
            &["ledger:a", "ledger:b"],
            &["--if-busy", "skip", "-v"],
            "touch ran",
        ))
        .await;
        let said = stderr(&skipped);
        assert_eq!(skipped.status.code(), Some(0), "{said}");
        assert!(said.contains(&format!("{busy:?} is busy")), "{said}");
        assert!(said.contains("skipped"), "{said}");
        assert!(!scratch.path("ran").exists(), "the command never ran");

        app.release(busy, &holder.token()).await;
    }
}

#[tokio::test]
async fn a_lost_second_lease_stops_the_command_and_names_its_lock() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();

    let run = run_over(
        &app,
        &scratch,
        &["ledger:a", "ledger:b"],
        &["--ttl", "1s", "--kill-after", "5s"],
        "trap 'echo term > got-term; exit 0' TERM; touch started; while true; do sleep 0.05; done",
    )
    .spawn()
    .expect("spawn");
    eventually(Duration::from_secs(10), "the command to start", || {
        scratch.path("started").exists()
    })
    .await;

    let forced = app
        .send(app.http.delete(app.url("/v1/locks/ledger:b")))
        .await;
    assert_eq!(forced.status, StatusCode::OK, "{}", forced.body);
    let lost_at = Instant::now();

    let run = finish(run).await;
    let said = stderr(&run);
    assert_eq!(run.status.code(), Some(LEASE_LOST), "{said}");
    assert!(
        lost_at.elapsed() < Duration::from_secs(3),
        "stopped at the next renewal"
    );
    assert_eq!(scratch.read("got-term").as_deref(), Some("term"));
    assert!(
        said.contains(
            "an operator force-released the lease on \"ledger:b\" (key id \"anonymous\")"
        ),
        "{said}"
    );
    assert!(
        !held(&app, "ledger:a").await,
        "the other lease is released once the command is gone"
    );
}

#[tokio::test]
async fn runs_over_overlapping_sets_in_opposite_orders_all_finish_one_at_a_time() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();

    // Each critical section claims a directory (mkdir is atomic) and fails
    // loudly if another run is inside.
    let section = "mkdir inside 2>/dev/null || echo overlap >> overlaps; \
                   sleep 0.2; echo x >> done; rmdir inside";
    let sets: [&[&str]; 4] = [
        &["table:x", "table:y"],
        &["table:y", "table:x"],
        &["table:x", "table:y"],
        &["table:y", "table:x"],
    ];
    let started = Instant::now();
    let runs: Vec<_> = sets
        .iter()
        .map(|names| {
            run_over(
                &app,
                &scratch,
                names,
                &["--ttl", "2s", "--wait", "30s"],
                section,
            )
            .spawn()
            .expect("spawn")
        })
        .collect();
    for run in runs {
        let run = finish(run).await;
        assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    }
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "no run waited out its --wait"
    );
    assert_eq!(scratch.read("done").map(|d| d.lines().count()), Some(4));
    assert_eq!(
        scratch.read("overlaps"),
        None,
        "two runs were inside at once"
    );
    assert!(!held(&app, "table:x").await && !held(&app, "table:y").await);
}

#[tokio::test]
async fn a_lock_named_twice_is_bad_usage() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();

    let refused = output(run_over(
        &app,
        &scratch,
        &["ledger:a", "ledger:b", "ledger:a"],
        &[],
        "touch ran",
    ))
    .await;
    assert_eq!(
        refused.status.code(),
        Some(super::USAGE),
        "{}",
        stderr(&refused)
    );
    assert!(stderr(&refused).contains("\"ledger:a\" is named twice"));
    assert!(!scratch.path("ran").exists());
}
