//! `lockctl`, the command-line client, run as a process against a real broker:
//! `run` (fence in the environment, skip when busy, stop on a lost lease,
//! exit codes) and the acquire/extend/release/status subcommands.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

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
    settings.locks.max_hold_ms = 1_000;
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
        .contains("released=true"));
    assert!(!held(&app, "job").await);
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
    let token = field("token");
    let fence: u64 = field("fence").parse().expect("fence");
    assert_eq!(field("name"), "report");
    assert_eq!(field("owner"), "'ops box'", "shell-quoted");
    assert_eq!(field("ttl_ms"), "30000");

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
async fn extend_past_the_brokers_max_hold_exits_80() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.locks.max_hold_ms = 1_000;
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

    let mut run = lockctl(&app);
    run.args(["run", "job", "--url", &nowhere, "--", "true"]);
    assert_eq!(output(run).await.status.code(), Some(UNAVAILABLE));
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

#[tokio::test]
async fn lockctl_talks_to_an_https_broker_trusting_the_given_ca() {
    let redis = RedisServer::start();
    let tls = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tls");
    let mut settings = test_settings(&redis);
    settings.http.tls_cert_path = tls.join("server.pem").display().to_string();
    settings.http.tls_key_path = tls.join("server.key").display().to_string();
    let app = lockbroker_server::Application::build(settings)
        .await
        .expect("broker starts");
    let url = format!("https://localhost:{}", app.local_addr().port());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));
    let https = |args: &[&str]| {
        let mut command = Command::new(lockctl_binary());
        for (key, _) in std::env::vars() {
            if key.starts_with("LOCKBROKER_") {
                command.env_remove(key);
            }
        }
        command.env("LOCKBROKER_URL", &url).args(args);
        command
    };

    // Without the private CA the certificate is not trusted.
    let untrusted = output(https(&["status", "tls-job"])).await;
    assert_eq!(
        untrusted.status.code(),
        Some(UNAVAILABLE),
        "{}",
        stderr(&untrusted)
    );

    let ca = tls.join("ca.pem").display().to_string();
    let acquired = output(https(&[
        "--ca-cert",
        &ca,
        "acquire",
        "tls-job",
        "--field",
        "fence",
    ]))
    .await;
    assert_eq!(acquired.status.code(), Some(0), "{}", stderr(&acquired));
    let fence: u64 = stdout(&acquired).parse().expect("a fence");
    assert!(fence > 0);
    let status = output(https(&["--ca-cert", &ca, "status", "tls-job", "--json"])).await;
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    let status: Value = serde_json::from_str(&stdout(&status)).expect("JSON status");
    assert_eq!(status["held"], true);
    assert_eq!(status["fence"], fence);

    let _ = stop.send(());
    let _ = server.await;
}
