//! `lockctl run` never leaves its command running without a lease: the
//! command's whole process tree (its group, background children, and
//! descendants that left the group) is gone before the lock can be granted
//! again, whether lockctl is SIGKILLed, the command dies first, or the lease
//! is lost. Each process of a tree carries a marker in its environment, so
//! the tests find them in /proc.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lockbroker_tests::{RedisServer, TestApp};

use super::{eventually, finish, lockctl, stderr, Scratch, LEASE_LOST};

/// The environment variable that marks every process of one tree.
const MARKER: &str = "LOCKCTL_TEST_TREE";

/// A marker no other test's processes carry.
fn new_marker(tag: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The live processes carrying `marker` (a zombie has no environment left).
fn marked(marker: &str) -> Vec<u32> {
    let wanted = format!("{MARKER}={marker}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                environ
                    .split(|&byte| byte == 0)
                    .any(|entry| entry == wanted.as_bytes())
            })
        })
        .collect()
}

/// The live processes carrying `marker` that run `program`.
fn marked_running(marker: &str, program: &str) -> Vec<u32> {
    marked(marker)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                cmdline.split(|&byte| byte == 0).next() == Some(program.as_bytes())
            })
        })
        .collect()
}

/// A shell line for a command that starts while a first tree may still
/// live: it writes `none` to `file` if no process of that tree is alive at
/// its start, else the files of those found. `grep -z` reads each
/// process's environment as NUL-separated entries, `-x` matches one whole.
fn note_survivors(first: &str, file: &str) -> String {
    format!(
        r#"survivors=$(grep -lsxzF '{MARKER}={first}' /proc/[0-9]*/environ | tr '\n' ' '); echo "${{survivors:-none}}" > {file}"#
    )
}

/// A second `lockctl run NAME` that waits for the lock and notes whether
/// any process of the `first` tree is still alive when its command starts.
fn second_run(app: &TestApp, scratch: &Scratch, name: &str, first: &str) -> Command {
    let mut second = lockctl(app);
    second
        .env(MARKER, new_marker("second"))
        .args([
            "run", name, "--ttl", "3s", "--wait", "20s", "--", "sh", "-c",
        ])
        .arg(in_dir(scratch, &note_survivors(first, "seen-by-second")));
    second
}

/// `script` run in `scratch`. Unlike [`super::in_dir`], the `cd` stays in
/// the shell itself when the script starts with a background job.
fn in_dir(scratch: &Scratch, script: &str) -> String {
    format!("cd '{}' || exit 1\n{script}", scratch.0.display())
}

/// Whether a pid written by a command is still a live process.
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[tokio::test]
async fn a_sigkilled_lockctl_takes_its_commands_whole_tree_with_it_before_a_second_run_starts() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();
    let first_marker = new_marker("first");

    let mut first = lockctl(&app);
    first
        .env(MARKER, &first_marker)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .args(["run", "job", "--ttl", "3s", "--", "sh", "-c"])
        .arg(in_dir(
            &scratch,
            "sleep 30 & echo $! > background; sleep 30 & echo $! > foreground; wait",
        ));
    let mut first = first.spawn().expect("spawn the first run");
    eventually(Duration::from_secs(10), "both sleeps to start", || {
        marked_running(&first_marker, "sleep").len() == 2
    })
    .await;
    let sleeps = [
        scratch.read("background").expect("background pid"),
        scratch.read("foreground").expect("foreground pid"),
    ];
    assert!(sleeps.iter().all(|pid| alive(pid)), "{sleeps:?}");

    let second = second_run(&app, &scratch, "job", &first_marker)
        .spawn()
        .expect("spawn the second run");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        scratch.read("seen-by-second").is_none(),
        "the second run waits while the first holds the lock"
    );

    first.kill().expect("SIGKILL the first lockctl");
    first.wait().expect("reap the first lockctl");
    // The lease stays until its TTL (3 s); the tree must not wait for that.
    eventually(
        Duration::from_secs(2),
        "every process of the first tree to be gone",
        || marked(&first_marker).is_empty(),
    )
    .await;
    assert!(sleeps.iter().all(|pid| !alive(pid)), "{sleeps:?}");

    let second = finish(second).await;
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    assert_eq!(
        scratch.read("seen-by-second").as_deref(),
        Some("none"),
        "the second command started only after the first tree was gone"
    );
}

#[tokio::test]
async fn a_command_that_dies_first_takes_its_background_children_with_it_before_the_release() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;

    // The command killed by a signal, the command exiting, and a child that
    // left the command's process group (setsid) and ignores SIGTERM.
    for (script, code) in [
        (
            "sleep 30 > /dev/null 2>&1 & touch started; kill -KILL $$",
            128 + 9,
        ),
        ("sleep 30 > /dev/null 2>&1 & touch started; exit 3", 3),
        (
            "setsid sh -c 'trap \"\" TERM; sleep 30' > /dev/null 2>&1 & touch started; exit 4",
            4,
        ),
    ] {
        let scratch = Scratch::new();
        let first_marker = new_marker("first");
        let mut first = lockctl(&app);
        first
            .env(MARKER, &first_marker)
            .args([
                "run",
                "job",
                "--ttl",
                "3s",
                "--kill-after",
                "500ms",
                "--",
                "sh",
                "-c",
            ])
            .arg(in_dir(&scratch, script));
        let first = first.spawn().expect("spawn the first run");
        eventually(Duration::from_secs(10), "the command to start", || {
            scratch.path("started").exists()
        })
        .await;
        let second = second_run(&app, &scratch, "job", &first_marker)
            .spawn()
            .expect("spawn the second run");

        let first = finish(first).await;
        assert_eq!(
            first.status.code(),
            Some(code),
            "{script}: {}",
            stderr(&first)
        );
        assert_eq!(
            marked(&first_marker),
            Vec::<u32>::new(),
            "{script}: nothing of the tree outlives lockctl"
        );
        let second = finish(second).await;
        assert_eq!(
            second.status.code(),
            Some(0),
            "{script}: {}",
            stderr(&second)
        );
        assert_eq!(
            scratch.read("seen-by-second").as_deref(),
            Some("none"),
            "{script}: the lock was released only after the tree was gone"
        );
    }
}

#[tokio::test]
async fn a_lost_lease_signals_the_commands_whole_group_and_ends_it_all_before_exiting() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();
    let marker = new_marker("lost");

    let mut run = lockctl(&app);
    run.env(MARKER, &marker)
        .args([
            "run",
            "job",
            "--ttl",
            "1s",
            "--kill-after",
            "500ms",
            "--",
            "sh",
            "-c",
        ])
        .arg(in_dir(
            &scratch,
            "sh -c 'trap \"touch polite-got-term; exit 0\" TERM; sleep 30' > /dev/null 2>&1 & \
             sh -c 'trap \"touch stubborn-got-term\" TERM; n=0; \
                    while [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done' > /dev/null 2>&1 & \
             trap 'touch shell-got-term; exit 0' TERM; touch started; \
             while true; do sleep 0.05; done",
        ));
    let run = run.spawn().expect("spawn");
    eventually(Duration::from_secs(10), "the command to start", || {
        scratch.path("started").exists()
    })
    .await;

    let key = format!("{}:{{job}}:lease", app.prefix);
    assert_eq!(redis.conn().cmd(&["DEL", &key]).as_int(), Some(1));

    let run = finish(run).await;
    assert_eq!(run.status.code(), Some(LEASE_LOST), "{}", stderr(&run));
    for got_term in ["shell-got-term", "polite-got-term", "stubborn-got-term"] {
        assert!(
            scratch.path(got_term).exists(),
            "{got_term}: SIGTERM went to the whole group"
        );
    }
    assert_eq!(
        marked(&marker),
        Vec::<u32>::new(),
        "the member that outlived SIGTERM was killed before lockctl exited"
    );
}
