//! `lockctl`, the command-line client, run as a process against a real broker:
//! `run` (fence in the environment, skip when busy, stop on a lost lease,
//! waits longer than the TTL, max hold, exit codes), the
//! acquire/extend/release/status subcommands and their shell output, and
//! HTTPS (a private CA, a self-signed certificate, failures in words).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

mod check;
mod election;
mod forced;
mod kinds;
mod process_tree;
mod sessions;
mod several;

use lockbroker_tests::app::test_settings;
use lockbroker_tests::{lockctl_binary, RedisServer, TestApp};
use serde_json::Value;

/// Exit codes documented in `lockctl --help`.
const USAGE: i32 = 64;
const UNAVAILABLE: i32 = 69;
const BUSY: i32 = 75;
const LEASE_LOST: i32 = 79;
const MAX_HOLD: i32 = 80;

/// A `lockctl` command aimed at `app`, with no stray LOCKBROKER_* settings.
fn lockctl(app: &TestApp) -> Command {
    let mut command = Command::new(lockctl_binary());
    for (key, _) in std::env::vars() {
        if key.starts_with("LOCKBROKER_") {
            command.env_remove(key);
        }
    }
    command
        .env("LOCKBROKER_URL", &app.base)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs to the end without blocking the broker's runtime.
async fn output(mut command: Command) -> Output {
    tokio::task::spawn_blocking(move || command.output().expect("run lockctl"))
        .await
        .expect("join")
}

/// Waits for a spawned `lockctl` without blocking the broker's runtime.
async fn finish(child: Child) -> Output {
    tokio::task::spawn_blocking(move || child.wait_with_output().expect("wait lockctl"))
        .await
        .expect("join")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Polls `condition` until it holds, or fails the test after `within`.
async fn eventually(within: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A scratch directory the command can leave marks in; removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "lockctl-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Self(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn read(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.path(name))
            .ok()
            .map(|text| text.trim().to_owned())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn in_dir(dir: &Path, script: &str) -> String {
    format!("cd '{}' && {script}", dir.display())
}

async fn held(app: &TestApp, name: &str) -> bool {
    app.status(name).await.body["held"] == Value::Bool(true)
}

// ---- lockctl run ----

#[tokio::test]
async fn run_gives_the_command_the_fence_and_releases_when_it_ends() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();

    let mut command = lockctl(&app);
    command.args(["run", "nightly", "--ttl", "30s", "--", "sh", "-c"]).arg(in_dir(
        &scratch.0,
        r#"echo "$LOCKBROKER_FENCE" > fence; echo "$LOCKBROKER_LOCK" > lock; [ -n "$LOCKBROKER_TOKEN" ] && echo yes > token"#,
    ));
    let run = output(command).await;

    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let fence: u64 = scratch
        .read("fence")
        .expect("command ran")
        .parse()
        .expect("a number");
    assert!(fence > 0);
    assert_eq!(scratch.read("lock").as_deref(), Some("nightly"));
    assert_eq!(scratch.read("token").as_deref(), Some("yes"));
    let status = app.status("nightly").await;
    assert_eq!(
        status.body["held"], false,
        "released when the command ended"
    );
    assert_eq!(status.body["fence"], fence, "the fence the command got");
    assert!(
        stdout(&run).is_empty() && stderr(&run).is_empty(),
        "quiet on success"
    );
}

#[tokio::test]
async fn run_exits_with_the_commands_exit_code_and_releases() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;

    for (script, expected) in [
        ("exit 0", 0),
        ("exit 3", 3),
        ("exit 75", 75),
        ("kill -TERM $$", 128 + 15),
    ] {
        let mut command = lockctl(&app);
        command.args(["run", "job", "--ttl", "10s", "--", "sh", "-c", script]);
        let run = output(command).await;
        assert_eq!(
            run.status.code(),
            Some(expected),
            "{script}: {}",
            stderr(&run)
        );
        assert!(!held(&app, "job").await, "{script}: released afterwards");
    }

    let mut missing = lockctl(&app);
    missing.args(["run", "job", "--", "/nonexistent/command"]);
    let run = output(missing).await;
    assert_eq!(run.status.code(), Some(127), "{}", stderr(&run));
    assert!(
        !held(&app, "job").await,
        "released when the command cannot start"
    );
}

#[tokio::test]
async fn a_second_run_with_if_busy_skip_exits_0_without_running() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();

    let mut first = lockctl(&app);
    first
        .args(["run", "cron-job", "--ttl", "2s", "--", "sh", "-c"])
        .arg(in_dir(
            &scratch.0,
            "touch first; while [ ! -e stop ]; do sleep 0.05; done",
        ));
    let first = first.spawn().expect("spawn first run");
    eventually(Duration::from_secs(10), "the first run to start", || {
        scratch.path("first").exists()
    })
    .await;

    let mut skip = lockctl(&app);
    skip.args([
        "run",
        "cron-job",
        "--ttl",
        "2s",
        "--if-busy",
        "skip",
        "--",
        "sh",
        "-c",
    ])
    .arg(in_dir(&scratch.0, "touch second"));
    let skipped = output(skip).await;
    assert_eq!(skipped.status.code(), Some(0), "{}", stderr(&skipped));
    assert!(
        stderr(&skipped).is_empty() && stdout(&skipped).is_empty(),
        "quietly"
    );

    let mut fail = lockctl(&app);
    fail.args(["run", "cron-job", "--if-busy", "fail", "--", "sh", "-c"])
        .arg(in_dir(&scratch.0, "touch second"));
    let failed = output(fail).await;
    assert_eq!(failed.status.code(), Some(BUSY));
    assert!(stderr(&failed).contains("lock_busy"), "{}", stderr(&failed));

    let started = Instant::now();
    let mut wait = lockctl(&app);
    wait.args(["run", "cron-job", "--wait", "300ms", "--", "sh", "-c"])
        .arg(in_dir(&scratch.0, "touch second"));
    let waited = output(wait).await;
    assert_eq!(waited.status.code(), Some(BUSY));
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "waited for --wait"
    );
    assert!(
        !scratch.path("second").exists(),
        "no second instance ever ran"
    );

    // The first one outlives several renewals (TTL 2 s), then ends normally.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(held(&app, "cron-job").await, "renewed while running");
    std::fs::write(scratch.path("stop"), "").expect("stop file");
    let first = finish(first).await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert!(!held(&app, "cron-job").await);
}

#[tokio::test]
async fn run_with_wait_starts_the_command_once_the_lock_is_released() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();
    let holder = app.acquire("job", 30_000).await;

    let mut waiter = lockctl(&app);
    waiter
        .args(["run", "job", "--wait", "20s", "--", "sh", "-c"])
        .arg(in_dir(&scratch.0, r#"echo "$LOCKBROKER_FENCE" > fence"#));
    let waiter = waiter.spawn().expect("spawn");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !scratch.path("fence").exists(),
        "waits while the lock is held"
    );
    app.release("job", &holder.token()).await;

    let run = finish(waiter).await;
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let fence: u64 = scratch.read("fence").expect("ran").parse().expect("number");
    assert!(fence > holder.fence());
}

#[tokio::test]
async fn a_lease_lost_mid_run_stops_the_command_and_exits_79() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();

    let mut command = lockctl(&app);
    command
        .args(["run", "job", "--ttl", "1s", "--kill-after", "5s", "--", "sh", "-c"])
        .arg(in_dir(
            &scratch.0,
            "trap 'echo term > got-term; exit 0' TERM; touch started; while true; do sleep 0.05; done",
        ));
    let run = command.spawn().expect("spawn");
    eventually(Duration::from_secs(10), "the command to start", || {
        scratch.path("started").exists()
    })
    .await;

    // Take the lease away behind lockctl's back: the next renewal finds it gone.
    let key = format!("{}:{{job}}:lease", app.prefix);
    assert_eq!(redis.conn().cmd(&["DEL", &key]).as_int(), Some(1));
    let lost_at = Instant::now();

    let run = finish(run).await;
    assert_eq!(run.status.code(), Some(LEASE_LOST), "{}", stderr(&run));
    assert!(
        lost_at.elapsed() < Duration::from_secs(3),
        "stopped at the next renewal"
    );
    assert_eq!(
        scratch.read("got-term").as_deref(),
        Some("term"),
        "SIGTERM first"
    );
    assert!(stderr(&run).contains("lease_lost"), "{}", stderr(&run));
}

#[tokio::test]
async fn a_command_that_ignores_sigterm_is_killed_after_kill_after() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();

    let mut command = lockctl(&app);
    command
        .args([
            "run",
            "job",
            "--ttl",
            "600ms",
            "--kill-after",
            "500ms",
            "--",
            "sh",
            "-c",
        ])
        .arg(in_dir(
            &scratch.0,
            "trap '' TERM; touch started; while true; do sleep 0.05; done",
        ));
    let run = command.spawn().expect("spawn");
    eventually(Duration::from_secs(10), "the command to start", || {
        scratch.path("started").exists()
    })
    .await;
    let key = format!("{}:{{job}}:lease", app.prefix);
    redis.conn().cmd(&["DEL", &key]);

    let run = finish(run).await;
    assert_eq!(run.status.code(), Some(LEASE_LOST), "{}", stderr(&run));
    assert!(stderr(&run).contains("SIGKILL"), "{}", stderr(&run));
}

#[tokio::test]
async fn an_unreachable_broker_stops_the_command_before_the_lease_would_expire() {
    let redis = RedisServer::start();
    let mut app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();

    let mut command = lockctl(&app);
    command
        .args(["run", "job", "--ttl", "3s", "--", "sh", "-c"])
        .arg(in_dir(
            &scratch.0,
            "trap 'touch got-term; exit 0' TERM; touch started; while true; do sleep 0.05; done",
        ));
    let run = command.spawn().expect("spawn");
    eventually(Duration::from_secs(10), "the command to start", || {
        scratch.path("started").exists()
    })
    .await;
    app.shutdown().await.expect("broker stops");

    // Redis is still up, so the lease key shows whether the lease ran out
    // before lockctl gave up on it.
    eventually(
        Duration::from_secs(10),
        "the command to get SIGTERM",
        || scratch.path("got-term").exists(),
    )
    .await;
    let key = format!("{}:{{job}}:lease", app.prefix);
    let left_ms = redis.conn().cmd(&["PTTL", &key]).as_int().unwrap_or(-2);
    assert!(
        left_ms > 0,
        "stopped while the lease still held: PTTL {left_ms}"
    );

    let run = finish(run).await;
    assert_eq!(run.status.code(), Some(LEASE_LOST), "{}", stderr(&run));
    assert!(
        stderr(&run).contains("could not be renewed"),
        "{}",
        stderr(&run)
    );
}

#[tokio::test]
async fn max_hold_stops_renewing_and_stops_the_command_when_the_lease_runs_out() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;

    let started = Instant::now();
    let mut command = lockctl(&app);
    command.args([
        "run",
        "job",
        "--ttl",
        "1s",
        "--max-hold",
        "1500ms",
        "--kill-after",
        "1s",
        "--",
        "sleep",
        "30",
    ]);
    let run = output(command).await;

    assert_eq!(run.status.code(), Some(MAX_HOLD), "{}", stderr(&run));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1_200) && took < Duration::from_secs(5),
        "stopped near the max hold: {took:?}"
    );
    assert!(!held(&app, "job").await, "released after stopping");
}

#[tokio::test]
async fn the_brokers_max_hold_stops_the_command_with_exit_80() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.locks.max_hold_ms = Some(1_000);
    let app = TestApp::spawn_with(settings).await;

    let mut command = lockctl(&app);
    command.args(["run", "job", "--ttl", "900ms", "--", "sleep", "30"]);
    let run = output(command).await;

    assert_eq!(run.status.code(), Some(MAX_HOLD), "{}", stderr(&run));
    assert!(stderr(&run).contains("max hold"), "{}", stderr(&run));
}

#[tokio::test]
async fn sigterm_to_lockctl_is_passed_on_to_the_command_then_the_lease_released() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();

    let mut command = lockctl(&app);
    command
        .args(["run", "job", "--ttl", "10s", "--", "sh", "-c"])
        .arg(in_dir(
            &scratch.0,
            "trap 'exit 5' TERM; touch started; while true; do sleep 0.05; done",
        ));
    let run = command.spawn().expect("spawn");
    eventually(Duration::from_secs(10), "the command to start", || {
        scratch.path("started").exists()
    })
    .await;
    let kill = Command::new("kill")
        .args(["-TERM", &run.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());

    let run = finish(run).await;
    assert_eq!(
        run.status.code(),
        Some(5),
        "the command's own exit: {}",
        stderr(&run)
    );
    assert!(!held(&app, "job").await, "released after the command ended");
}

#[tokio::test]
async fn a_command_may_release_early_with_lockctl_release_and_keep_running() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();

    let mut command = lockctl(&app);
    command
        .env("LOCKCTL", lockctl_binary())
        .args(["run", "job", "--ttl", "300ms", "--", "sh", "-c"])
        .arg(in_dir(
            &scratch.0,
            r#""$LOCKCTL" release "$LOCKBROKER_LOCK" > released && sleep 1 && touch finished"#,
        ));
    let run = output(command).await;

    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert!(
        scratch.path("finished").exists(),
        "not stopped after its own release"
    );
    assert!(scratch
        .read("released")
        .unwrap_or_default()
        .contains("LOCK_RELEASED=true"));
    assert!(!held(&app, "job").await);
}

/// `run NAME --wait 10s --ttl 2s` after the lock has been held for `held`:
/// the command runs to its end with its lease, however long the wait was.
async fn run_after_a_wait(held_for: Duration) {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();
    let holder = app.acquire("demo", 30_000).await;
    let release = {
        let (base, token) = (app.base.clone(), holder.token());
        tokio::spawn(async move {
            tokio::time::sleep(held_for).await;
            let released = reqwest::Client::new()
                .post(format!("{base}/v1/locks/demo/release"))
                .json(&serde_json::json!({ "token": token }))
                .send()
                .await
                .expect("release");
            assert!(released.status().is_success());
        })
    };

    let mut waiter = lockctl(&app);
    // The command outlives a renewal period, so a lease wrongly taken for
    // expired would stop it.
    waiter
        .args([
            "run", "demo", "--wait", "10s", "--ttl", "2s", "--", "sh", "-c",
        ])
        .arg(in_dir(
            &scratch.0,
            r#"echo "$LOCKBROKER_FENCE" > fence; sleep 1; echo got-it > done"#,
        ));
    let run = output(waiter).await;
    release.await.expect("released");

    assert_eq!(
        run.status.code(),
        Some(0),
        "after holding {held_for:?}: {}",
        stderr(&run)
    );
    assert_eq!(scratch.read("done").as_deref(), Some("got-it"));
    let fence: u64 = scratch.read("fence").expect("ran").parse().expect("number");
    assert!(fence > holder.fence());
    assert!(stderr(&run).is_empty(), "{}", stderr(&run));
    assert!(!held(&app, "demo").await, "released at the end");
}

#[tokio::test]
async fn run_after_a_wait_shorter_than_a_third_of_the_ttl_keeps_its_lease() {
    run_after_a_wait(Duration::from_millis(300)).await;
}

#[tokio::test]
async fn run_after_a_wait_shorter_than_the_ttl_keeps_its_lease() {
    run_after_a_wait(Duration::from_millis(1_500)).await;
}

#[tokio::test]
async fn run_after_a_wait_longer_than_the_ttl_keeps_its_lease() {
    run_after_a_wait(Duration::from_millis(3_500)).await;
}

#[tokio::test]
async fn run_waits_out_another_runs_hold_longer_than_its_ttl() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();

    // Another host holds the lock with a 3 s TTL for about 3.5 s.
    let mut other = lockctl(&app);
    other
        .args(["run", "demo", "--ttl", "3s", "--", "sh", "-c"])
        .arg(in_dir(&scratch.0, "touch holding; sleep 3.5"));
    let other = other.spawn().expect("spawn the holder");
    eventually(Duration::from_secs(10), "the holder to start", || {
        scratch.path("holding").exists()
    })
    .await;

    let mut waiter = lockctl(&app);
    waiter
        .args([
            "run", "demo", "--wait", "10s", "--ttl", "2s", "--", "sh", "-c",
        ])
        .arg(in_dir(&scratch.0, "echo got-it > got-it"));
    let run = output(waiter).await;
    let other = finish(other).await;

    assert_eq!(other.status.code(), Some(0), "{}", stderr(&other));
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert_eq!(scratch.read("got-it").as_deref(), Some("got-it"));
    assert!(!stderr(&run).contains("lost"), "{}", stderr(&run));
}

#[tokio::test]
async fn max_hold_renews_while_it_fits_then_stops_the_command_at_the_max_hold() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();
    let log = std::fs::File::create(scratch.path("stderr")).expect("stderr file");

    let started = Instant::now();
    let mut command = lockctl(&app);
    command
        .args(["run", "job", "--ttl", "2s", "--max-hold", "3s", "--verbose"])
        .args(["--kill-after", "1s", "--", "sleep", "30"])
        .stderr(log);
    let run = command.spawn().expect("spawn");

    // Past the last renewal (at about 1.33 s) the max hold is not reached yet,
    // and the lease is still held well after the first TTL would have ended.
    tokio::time::sleep(Duration::from_millis(2_600)).await;
    let so_far = scratch.read("stderr").unwrap_or_default();
    assert!(
        !so_far.contains("--max-hold reached"),
        "reported too early: {so_far}"
    );
    assert!(held(&app, "job").await, "held until the max hold");

    let run = finish(run).await;
    let took = started.elapsed();
    let text = scratch.read("stderr").unwrap_or_default();
    assert_eq!(run.status.code(), Some(MAX_HOLD), "{text}");
    assert!(
        took >= Duration::from_millis(2_950) && took < Duration::from_secs(6),
        "stopped at the max hold: {took:?}"
    );
    assert!(text.contains("no more renewals"), "{text}");
    assert!(text.contains("--max-hold reached"), "{text}");
    assert!(!text.contains("lost"), "{text}");
    assert!(!held(&app, "job").await, "released after stopping");
}

// ---- acquire / extend / release / status ----

#[tokio::test]
async fn acquire_extend_release_and_status_print_fields_and_exit_codes() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;

    let mut acquire = lockctl(&app);
    acquire.args(["acquire", "report", "--ttl", "30s", "--owner", "ops box"]);
    let acquired = output(acquire).await;
    assert_eq!(acquired.status.code(), Some(0), "{}", stderr(&acquired));
    let text = stdout(&acquired);
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} in {text}"))
            .to_owned()
    };
    let token = field("LOCK_TOKEN");
    let fence: u64 = field("LOCK_FENCE").parse().expect("fence");
    assert_eq!(field("LOCK_NAME"), "report");
    assert_eq!(field("LOCK_OWNER"), "'ops box'", "shell-quoted");
    assert_eq!(field("LOCK_TTL_MS"), "30000");

    let mut busy = lockctl(&app);
    busy.args(["acquire", "report", "--json"]);
    let busy = output(busy).await;
    assert_eq!(busy.status.code(), Some(BUSY));
    let error: Value = serde_json::from_str(&stdout(&busy)).expect("JSON error");
    assert_eq!(error["error"]["code"], "lock_busy");
    assert_eq!(error["error"]["owner"], "ops box");
    assert!(!stdout(&busy).contains(&token) && !stderr(&busy).contains(&token));

    let mut status = lockctl(&app);
    status.args(["status", "report", "--json"]);
    let status = output(status).await;
    assert_eq!(status.status.code(), Some(0));
    let body: Value = serde_json::from_str(&stdout(&status)).expect("JSON");
    assert_eq!(body["held"], true);
    assert_eq!(body["fence"], fence);
    assert!(!stdout(&status).contains(&token), "never a token");

    let mut extend = lockctl(&app);
    extend
        .env("LOCKBROKER_TOKEN", &token)
        .args(["extend", "report", "--ttl", "2m", "--field", "ttl_ms"]);
    let extended = output(extend).await;
    assert_eq!(extended.status.code(), Some(0), "{}", stderr(&extended));
    assert_eq!(stdout(&extended), "120000");

    let mut release = lockctl(&app);
    release
        .env("LOCKBROKER_TOKEN", &token)
        .args(["release", "report", "--field", "fence"]);
    let released = output(release).await;
    assert_eq!(released.status.code(), Some(0), "{}", stderr(&released));
    assert_eq!(stdout(&released), fence.to_string());

    let mut held_field = lockctl(&app);
    held_field.args(["status", "report", "--field", "held"]);
    assert_eq!(stdout(&output(held_field).await), "false");

    let mut stale = lockctl(&app);
    stale
        .env("LOCKBROKER_TOKEN", &token)
        .args(["extend", "report", "--ttl", "10s"]);
    let stale = output(stale).await;
    assert_eq!(stale.status.code(), Some(LEASE_LOST), "{}", stderr(&stale));
    assert!(stderr(&stale).contains("lease_lost"));
    assert!(
        !stderr(&stale).contains(&token),
        "never the token in an error"
    );
}

#[tokio::test]
async fn acquire_with_field_prints_one_value_for_shell_use() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;

    let mut acquire = lockctl(&app);
    acquire.args(["acquire", "job", "--ttl", "5s", "--field", "fence"]);
    let acquired = output(acquire).await;
    assert_eq!(acquired.status.code(), Some(0), "{}", stderr(&acquired));
    let fence: u64 = stdout(&acquired).parse().expect("a bare fence");
    assert_eq!(app.status("job").await.body["fence"], fence);
}

#[tokio::test]
async fn eval_of_acquire_sets_prefixed_variables_and_leaves_the_scripts_own_alone() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let script = |acquire: &str| {
        format!(
            r#"name=mine; token=keep; owner=me; fence=0
lease=$("$LOCKCTL" acquire {acquire} --owner ops) || exit
eval "$lease"
echo "$name $token $owner $fence""#
        )
    };
    let shell = |script: String| {
        let mut sh = Command::new("sh");
        sh.env("LOCKCTL", lockctl_binary())
            .env("LOCKBROKER_URL", &app.base)
            .env_remove("LOCKBROKER_TOKEN")
            .env_remove("LOCKBROKER_API_KEY")
            .arg("-c")
            .arg(script)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        sh
    };

    let plain = output(shell(
        script("a") + r#"; echo "$LOCK_NAME $LOCK_OWNER $LOCK_FENCE""#,
    ))
    .await;
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    let lines: Vec<_> = stdout(&plain).lines().map(str::to_owned).collect();
    assert_eq!(lines[0], "mine keep me 0", "the script's own variables");
    let fence = app.status("a").await.body["fence"].clone();
    assert_eq!(lines[1], format!("a ops {fence}"));

    let chosen = output(shell(
        script("b --prefix JOB_") + r#"; echo "$JOB_NAME ${LOCK_NAME:-unset}""#,
    ))
    .await;
    assert_eq!(chosen.status.code(), Some(0), "{}", stderr(&chosen));
    assert!(stdout(&chosen).ends_with("b unset"), "{}", stdout(&chosen));

    let old = output(shell(script("c --unprefixed"))).await;
    assert_eq!(old.status.code(), Some(0), "{}", stderr(&old));
    assert!(
        stdout(&old).starts_with("c "),
        "old names: {}",
        stdout(&old)
    );

    for bad in [
        &["acquire", "d", "--prefix", "1X"][..],
        &["acquire", "d", "--prefix", "A;B"],
        &["acquire", "d", "--prefix", "X_", "--json"],
    ] {
        let mut command = lockctl(&app);
        command.args(bad);
        let refused = output(command).await;
        assert_eq!(
            refused.status.code(),
            Some(USAGE),
            "{bad:?}: {}",
            stderr(&refused)
        );
    }
    assert!(!held(&app, "d").await);
}

#[tokio::test]
async fn the_help_example_keeps_the_token_and_releases_the_lock() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();
    let mut help = lockctl(&app);
    help.arg("--help");
    let help = stdout(&output(help).await);
    assert!(
        !help.contains("fence=$(lockctl acquire"),
        "no example that throws the token away"
    );

    // The indented lines after "release on the way out:" are the example.
    let example: Vec<&str> = help
        .lines()
        .skip_while(|line| !line.ends_with("release on the way out:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .collect();
    assert!(example.len() >= 3, "an example in --help: {help}");
    let script = example
        .iter()
        .map(|line| {
            if line.trim_start().starts_with("...") {
                r#"echo "$LOCK_FENCE" > fence; lockctl status nightly-report --field held > held"#
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let bin_dir = lockctl_binary().parent().expect("bin dir").to_owned();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut sh = Command::new("sh");
    sh.current_dir(&scratch.0)
        .env("PATH", path)
        .env("LOCKBROKER_URL", &app.base)
        .env_remove("LOCKBROKER_TOKEN")
        .arg("-c")
        .arg(&script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let ran = output(sh).await;

    assert_eq!(ran.status.code(), Some(0), "{script}\n{}", stderr(&ran));
    assert_eq!(
        scratch.read("held").as_deref(),
        Some("true"),
        "held during the work"
    );
    let fence: u64 = scratch
        .read("fence")
        .expect("fence")
        .parse()
        .expect("a fence");
    let after = app.status("nightly-report").await;
    assert_eq!(after.body["held"], false, "released on the way out");
    assert_eq!(after.body["fence"], fence);
}

#[tokio::test]
async fn durations_take_fractions_and_compounds() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;

    for (name, ttl, expected) in [
        ("a", "1.5s", "1500"),
        ("b", "1m30s", "90000"),
        ("c", "500ms", "500"),
        ("d", "2h", "7200000"),
    ] {
        let mut acquire = lockctl(&app);
        acquire.args(["acquire", name, "--ttl", ttl, "--field", "ttl_ms"]);
        let acquired = output(acquire).await;
        assert_eq!(
            acquired.status.code(),
            Some(0),
            "{ttl}: {}",
            stderr(&acquired)
        );
        assert_eq!(stdout(&acquired), expected, "{ttl}");
    }

    let mut run = lockctl(&app);
    run.args(["run", "e", "--ttl", "1.5s", "--wait", "0.5s", "--", "true"]);
    let ran = output(run).await;
    assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
}

#[tokio::test]
async fn extend_past_the_brokers_max_hold_exits_80() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.locks.max_hold_ms = Some(1_000);
    let app = TestApp::spawn_with(settings).await;
    let lease = app.acquire("job", 900).await;

    let mut extend = lockctl(&app);
    extend
        .env("LOCKBROKER_TOKEN", lease.token())
        .args(["extend", "job", "--ttl", "10s"]);
    let refused = output(extend).await;
    assert_eq!(
        refused.status.code(),
        Some(MAX_HOLD),
        "{}",
        stderr(&refused)
    );
}

#[tokio::test]
async fn bad_usage_exits_64() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;

    for args in [
        &["acquire"][..],
        &["acquire", "job", "--ttl", "30"],
        &["acquire", "job", "--bogus"],
        &["acquire", "job", "--field", "nonsense"],
        &["acquire", "bad/name"],
        &["release", "job"],
        &["run", "job", "--if-busy", "wait", "--", "true"],
        &["run", "job", "--if-busy", "sometimes", "--", "true"],
        &["run", "job"],
        &["frobnicate"],
    ] {
        let mut command = lockctl(&app);
        command.args(args);
        let run = output(command).await;
        assert_eq!(run.status.code(), Some(USAGE), "{args:?}: {}", stderr(&run));
    }
    // A bad --url or --ca-cert is named as the option at fault.
    let not_a_certificate = std::env::current_exe().expect("this test's binary");
    let not_a_certificate = not_a_certificate.to_str().expect("a UTF-8 path");
    for (args, option) in [
        (&["--url", "not a url", "status", "job"][..], "--url"),
        (
            &["--ca-cert", not_a_certificate, "status", "job"],
            "--ca-cert",
        ),
    ] {
        let mut command = lockctl(&app);
        command.args(args);
        let run = output(command).await;
        assert_eq!(run.status.code(), Some(USAGE), "{args:?}: {}", stderr(&run));
        let said = stderr(&run);
        assert!(said.starts_with(&format!("lockctl: {option}: ")), "{said}");
    }
    assert!(!held(&app, "job").await, "nothing was acquired");
}

#[tokio::test]
async fn an_unreachable_broker_exits_69() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let nowhere = format!("http://127.0.0.1:{}", lockbroker_tests::redis::free_port());

    let mut status = lockctl(&app);
    status.args(["status", "job", "--json", "--url", &nowhere]);
    let status = output(status).await;
    assert_eq!(
        status.status.code(),
        Some(UNAVAILABLE),
        "{}",
        stderr(&status)
    );
    let error: Value = serde_json::from_str(&stdout(&status)).expect("JSON error");
    assert_eq!(error["error"]["code"], "broker_unreachable");
    assert!(
        stderr(&status).contains(&format!("broker unreachable at {nowhere}")),
        "names the URL it tried: {}",
        stderr(&status)
    );

    let mut run = lockctl(&app);
    run.args(["run", "job", "--url", &nowhere, "--", "true"]);
    let run = output(run).await;
    assert_eq!(run.status.code(), Some(UNAVAILABLE));
    assert!(stderr(&run).contains(&nowhere), "{}", stderr(&run));

    // A user and password in the URL are never shown.
    let with_secret = nowhere.replace("http://", "http://ops:s3cret@");
    let mut status = lockctl(&app);
    status.args(["status", "job", "--url", &with_secret]);
    let status = output(status).await;
    assert_eq!(status.status.code(), Some(UNAVAILABLE));
    assert!(stderr(&status).contains(&nowhere), "{}", stderr(&status));
    assert!(!stderr(&status).contains("s3cret"), "{}", stderr(&status));
}

#[tokio::test]
async fn help_documents_the_exit_codes() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let mut help = lockctl(&app);
    help.arg("--help");
    let help = output(help).await;
    assert_eq!(help.status.code(), Some(0));
    let text = stdout(&help);
    for code in ["64", "69", "75", "79", "80"] {
        assert!(
            text.contains(&format!("  {code}  ")),
            "exit code {code} in --help"
        );
    }
}

// ---- HTTPS ----

/// A broker serving HTTPS with `cert` and `key` until dropped.
struct HttpsBroker {
    port: u16,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl HttpsBroker {
    async fn start(redis: &RedisServer, cert: &Path, key: &Path) -> Self {
        let mut settings = test_settings(redis);
        settings.http.tls_cert_path = Some(cert.to_path_buf());
        settings.http.tls_key_path = Some(key.to_path_buf());
        let app = lockbroker_server::Application::build(settings)
            .await
            .expect("broker starts");
        let port = app.local_addr().port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(app.run_until(async {
            let _ = stopped.await;
        }));
        Self {
            port,
            stop: Some(stop),
            server: Some(server),
        }
    }

    /// `lockctl` aimed at `https://HOST:PORT`, with `args`.
    fn lockctl(&self, host: &str, args: &[&str]) -> Command {
        let mut command = Command::new(lockctl_binary());
        for (key, _) in std::env::vars() {
            if key.starts_with("LOCKBROKER_") {
                command.env_remove(key);
            }
        }
        command
            .env("LOCKBROKER_URL", format!("https://{host}:{}", self.port))
            .args(args);
        command
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }
}

/// rustls's and webpki's own names for errors, which lockctl puts in words.
fn assert_in_words(text: &str) {
    for internal in [
        "UnknownIssuer",
        "CaUsedAsEndEntity",
        "NotValidForName",
        "InvalidCertificate",
        "OtherError",
        "DnsName(",
    ] {
        assert!(!text.contains(internal), "{internal} in {text}");
    }
}

/// A self-signed certificate and key for `cn`, made the usual way with the
/// openssl CLI (which marks it CA:TRUE).
fn openssl_self_signed(scratch: &Scratch, cn: &str, san: &str) -> (PathBuf, PathBuf) {
    let (cert, key) = (
        scratch.path(&format!("{cn}.pem")),
        scratch.path(&format!("{cn}.key")),
    );
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .arg("-subj")
        .arg(format!("/CN={cn}"))
        .arg("-addext")
        .arg(format!("subjectAltName={san}"))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("the openssl CLI runs");
    assert!(made.status.success(), "{}", stderr(&made));
    (cert, key)
}

#[tokio::test]
async fn lockctl_talks_to_an_https_broker_trusting_the_given_ca() {
    let redis = RedisServer::start();
    let tls = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tls");
    let broker = HttpsBroker::start(&redis, &tls.join("server.pem"), &tls.join("server.key")).await;

    // Without the private CA the certificate is not trusted, and lockctl says
    // so in words.
    let untrusted = output(broker.lockctl("localhost", &["status", "tls-job"])).await;
    assert_eq!(
        untrusted.status.code(),
        Some(UNAVAILABLE),
        "{}",
        stderr(&untrusted)
    );
    let text = stderr(&untrusted);
    assert!(text.contains("TLS failure"), "{text}");
    assert!(
        text.contains(&format!("https://localhost:{}", broker.port)),
        "{text}"
    );
    assert!(
        text.contains("not signed by a CA this machine trusts"),
        "{text}"
    );
    assert!(text.contains("--ca-cert"), "{text}");
    assert_in_words(&text);

    let ca = tls.join("ca.pem").display().to_string();
    let acquired = output(broker.lockctl(
        "localhost",
        &["--ca-cert", &ca, "acquire", "tls-job", "--field", "fence"],
    ))
    .await;
    assert_eq!(acquired.status.code(), Some(0), "{}", stderr(&acquired));
    let fence: u64 = stdout(&acquired).parse().expect("a fence");
    assert!(fence > 0);
    let status = output(broker.lockctl(
        "localhost",
        &["--ca-cert", &ca, "status", "tls-job", "--json"],
    ))
    .await;
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    let status: Value = serde_json::from_str(&stdout(&status)).expect("JSON status");
    assert_eq!(status["held"], true);
    assert_eq!(status["fence"], fence);

    // A TLS failure has its own code under --json, and the same exit code.
    let json = output(broker.lockctl("localhost", &["status", "tls-job", "--json"])).await;
    assert_eq!(json.status.code(), Some(UNAVAILABLE));
    let error: Value = serde_json::from_str(&stdout(&json)).expect("JSON error");
    assert_eq!(error["error"]["code"], "tls_failure");

    broker.stop().await;
}

#[tokio::test]
async fn a_self_signed_openssl_certificate_works_when_given_with_ca_cert() {
    let redis = RedisServer::start();
    let scratch = Scratch::new();
    let (cert, key) = openssl_self_signed(&scratch, "localhost", "DNS:localhost,IP:127.0.0.1");
    let broker = HttpsBroker::start(&redis, &cert, &key).await;
    let ca_cert = cert.display().to_string();

    for host in ["localhost", "127.0.0.1"] {
        let acquired = output(broker.lockctl(
            host,
            &[
                "--ca-cert",
                &ca_cert,
                "acquire",
                &format!("self-{host}"),
                "--ttl",
                "5s",
            ],
        ))
        .await;
        assert_eq!(
            acquired.status.code(),
            Some(0),
            "{host}: {}",
            stderr(&acquired)
        );
        assert!(stdout(&acquired).contains("LOCK_FENCE="));
    }

    // Not given: refused, with the way out named.
    let refused = output(broker.lockctl("localhost", &["status", "job"])).await;
    assert_eq!(
        refused.status.code(),
        Some(UNAVAILABLE),
        "{}",
        stderr(&refused)
    );
    let text = stderr(&refused);
    assert!(text.contains("TLS failure"), "{text}");
    assert!(text.contains("--ca-cert"), "{text}");
    assert_in_words(&text);
    broker.stop().await;
}

#[tokio::test]
async fn a_given_certificate_for_another_name_is_refused_in_words() {
    let redis = RedisServer::start();
    let scratch = Scratch::new();
    let (cert, key) = openssl_self_signed(&scratch, "elsewhere", "DNS:elsewhere");
    let broker = HttpsBroker::start(&redis, &cert, &key).await;

    let ca_cert = cert.display().to_string();
    let refused =
        output(broker.lockctl("localhost", &["--ca-cert", &ca_cert, "status", "job"])).await;
    assert_eq!(
        refused.status.code(),
        Some(UNAVAILABLE),
        "{}",
        stderr(&refused)
    );
    let text = stderr(&refused);
    assert!(
        text.contains("certificate is for elsewhere, not for localhost"),
        "{text}"
    );
    assert_in_words(&text);
    broker.stop().await;
}

#[tokio::test]
async fn an_https_url_for_a_plain_http_broker_is_told_so() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let https = app.base.replace("http://", "https://");

    let mut status = lockctl(&app);
    status.args(["status", "job", "--url", &https]);
    let status = output(status).await;
    assert_eq!(
        status.status.code(),
        Some(UNAVAILABLE),
        "{}",
        stderr(&status)
    );
    let text = stderr(&status);
    assert!(text.contains("TLS failure"), "{text}");
    assert!(text.contains("http://"), "{text}");
    assert_in_words(&text);
}
