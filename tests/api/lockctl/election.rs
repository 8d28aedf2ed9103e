//! `lockctl elect` and `lockctl watch`: two hosts campaign for one lock;
//! leadership passes when the leader's command ends or its lease runs out,
//! every term is larger, and `watch` prints each change.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use lockbroker_tests::{RedisServer, TestApp};
use serde_json::Value;

use super::{eventually, lockctl, Scratch};

/// A host campaigning for `leader` with `--again`: each term appends
/// `<term> <host>` to `terms`, then runs until `stop-<term>` appears.
fn candidate(app: &TestApp, scratch: &Scratch, host: &str) -> Child {
    let mut command = lockctl(app);
    command.args([
        "elect", "leader", "--ttl", "1s", "--again", "--owner", host, "--", "sh", "-c",
    ]);
    command.arg(format!(
        r#"cd '{dir}' && echo "$LOCKBROKER_FENCE {host}" >> terms && while [ ! -e "stop-$LOCKBROKER_FENCE" ]; do sleep 0.05; done"#,
        dir = scratch.0.display()
    ));
    command.spawn().expect("spawn lockctl elect")
}

/// The terms so far: `(term, host)` in the order they began.
fn terms(scratch: &Scratch) -> Vec<(u64, String)> {
    let text = scratch.read("terms").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (term, host) = line.split_once(' ')?;
            Some((term.parse().ok()?, host.to_owned()))
        })
        .collect()
}

async fn wait_for_terms(scratch: &Scratch, count: usize, within: Duration) -> Vec<(u64, String)> {
    eventually(within, &format!("term {count} to begin"), || {
        terms(scratch).len() >= count
    })
    .await;
    terms(scratch)
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn leadership_passes_when_the_leaders_command_ends_or_its_lease_runs_out_and_terms_grow() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();
    let mut watch = lockctl(&app);
    watch.args(["watch", "leader", "--json"]);
    let watcher = watch.spawn().expect("spawn lockctl watch");
    let mut hosts = [
        candidate(&app, &scratch, "a"),
        candidate(&app, &scratch, "b"),
    ];

    let first = wait_for_terms(&scratch, 1, Duration::from_secs(10)).await;
    let (term1, leader1) = first[0].clone();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        terms(&scratch).len(),
        1,
        "one leader at a time, renewing past its TTL"
    );

    // The leader's command ends: it resigns, and the other host leads at once.
    std::fs::write(scratch.path(&format!("stop-{term1}")), "").expect("stop file");
    let second = wait_for_terms(&scratch, 2, Duration::from_secs(5)).await;
    let (term2, leader2) = second[1].clone();
    assert!(term2 > term1, "terms grow: {term2} > {term1}");
    assert_ne!(leader2, leader1, "the other host leads");

    // The leader dies without resigning: its lease runs out, and the other
    // host (campaigning again) leads within the TTL.
    let dead = if leader2 == "a" { 0 } else { 1 };
    let killed_at = Instant::now();
    kill(&mut hosts[dead]);
    let third = wait_for_terms(&scratch, 3, Duration::from_secs(5)).await;
    let (term3, leader3) = third[2].clone();
    assert!(term3 > term2);
    assert_eq!(leader3, leader1);
    assert!(
        killed_at.elapsed() < Duration::from_millis(2_500),
        "within the 1 s TTL and the campaign's pause: {:?}",
        killed_at.elapsed()
    );

    for term in [term2, term3] {
        std::fs::write(scratch.path(&format!("stop-{term}")), "").expect("stop file");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for host in &mut hosts {
        kill(host);
    }
    // `watch` printed each change as it happened, in order.
    let sent = Command::new("kill")
        .args(["-TERM", &watcher.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let printed = tokio::task::spawn_blocking(move || watcher.wait_with_output())
        .await
        .expect("join")
        .expect("watch output");
    assert_eq!(printed.status.code(), Some(0), "SIGTERM ends watch cleanly");
    let events: Vec<Value> = String::from_utf8_lossy(&printed.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let seen = |kind: &str, term: u64| {
        events
            .iter()
            .any(|e| e["type"] == kind && e["fence"].as_u64() == Some(term))
    };
    // It may start before the first term (`state` free, then `acquired`)
    // or during it (`state` held by the first leader).
    let start = events.first().expect("the state first");
    assert_eq!(start["type"], "state", "{events:?}");
    let first_seen = seen("acquired", term1) || start["fence"].as_u64() == Some(term1);
    assert!(first_seen && seen("released", term1), "{events:?}");
    assert!(
        seen("acquired", term2) && seen("expired", term2),
        "{events:?}"
    );
    assert!(seen("acquired", term3), "{events:?}");
    assert!(
        seen("extended", term1),
        "renewals show as extends: {events:?}"
    );
}
