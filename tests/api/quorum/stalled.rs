//! A stalled node (SIGSTOP: its connections stay open, nothing answers)
//! costs a quorum nothing: every step is answered by the nodes that answer,
//! and the stalled node is set straight once it runs again. A black-holed
//! network (connections open, every byte dropped) is the same to the quorum.

use std::time::{Duration, Instant};

use lockbroker_core::{LockName, LockStore, ReleaseOutcome, Ttl};
use lockbroker_redis::quorum::QuorumStore;
use lockbroker_redis::KeyLayout;
use lockbroker_tests::proxy::Proxy;
use lockbroker_tests::RedisServer;

use super::{granted, name, try_acquire, Quorum};

/// Nodes that answer in a second or so at worst, however loaded the
/// machine; a step that waited for a stalled node would take this long.
const NODE_TIMEOUT: Duration = Duration::from_secs(6);

/// Well under [`NODE_TIMEOUT`]: a step answered within this did not wait
/// for the stalled node.
const NOT_WAITED: Duration = Duration::from_secs(3);

fn quorum(nodes: usize) -> Quorum {
    Quorum {
        node_timeout: NODE_TIMEOUT,
        ..Quorum::start(nodes)
    }
}

/// A broker that knows every node in good standing, so that each step is
/// sent to all of them.
async fn every_node_known(store: QuorumStore) -> QuorumStore {
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.node_counts().up.iter().any(|up| !up) {
        assert!(Instant::now() < deadline, "some node never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store
}

/// Node `server`'s clock, Unix ms.
fn now_ms_on(server: &RedisServer) -> Option<u64> {
    let time = server.conn().cmd(&["TIME"]);
    let parts = time.as_array();
    let secs: u64 = parts[0].as_text()?.parse().ok()?;
    let micros: u64 = parts[1].as_text()?.parse().ok()?;
    Some(secs * 1_000 + micros / 1_000)
}

/// How long the lease node `server` keeps for `lock` stays valid there, ms
/// (0 when it has none, or it expired).
fn valid_for_on(server: &RedisServer, prefix: &str, lock: &LockName) -> u64 {
    let key = KeyLayout::new(prefix.to_owned()).lease(lock);
    let exp = server.conn().cmd(&["HGET", &key, "exp"]);
    let exp: u64 = exp.as_text().and_then(|t| t.parse().ok()).unwrap_or(0);
    exp.saturating_sub(now_ms_on(server).unwrap_or(u64::MAX))
}

/// The token and fence of the lease node `server` keeps for `lock`, while
/// it is valid there.
fn copy_on(server: &RedisServer, prefix: &str, lock: &LockName) -> Option<(String, u64)> {
    let key = KeyLayout::new(prefix.to_owned()).lease(lock);
    let now_ms = now_ms_on(server)?;
    let fields = server
        .conn()
        .cmd(&["HMGET", &key, "token", "fence", "exp", "rel"]);
    let fields = fields.as_array();
    let token = fields[0].as_text()?.to_owned();
    let fence = fields[1].as_text()?.parse().ok()?;
    let expires: u64 = fields[2].as_text()?.parse().ok()?;
    let released = fields[3].as_text() == Some("1");
    (!released && expires > now_ms).then_some((token, fence))
}

/// Waits up to 10 s for `done`, which must then hold.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_stalled_node_is_not_waited_for_and_carries_only_the_granted_fence_once_it_runs() {
    let quorum = quorum(3);
    let store = every_node_known(quorum.connect().await).await;
    let (lock, ahead_lock) = (name("stalled-grant"), name("stalled-ahead"));
    // For the second lock the stalled node would issue a fence far above
    // the others' when it runs the acquire: it must not keep a copy with it.
    let ahead = 1u64 << 52;
    let fence_key = KeyLayout::new(quorum.prefix.clone()).fence(&ahead_lock);
    quorum.servers[2]
        .conn()
        .cmd(&["SET", &fence_key, &ahead.to_string()]);
    quorum.servers[2].pause();

    let started = Instant::now();
    let (fence, token, validity) = granted(&store, &lock, 30_000).await;
    let status = store.status(&lock).await.expect("status");
    let ttl = Ttl::parse("ttl_ms", 30_000, u64::MAX).expect("ttl");
    let extended = store.extend(&lock, &token, ttl, 0).await;
    let (ahead_fence, ahead_token, _) = granted(&store, &ahead_lock, 30_000).await;
    let elapsed = started.elapsed();
    assert!(elapsed < NOT_WAITED, "the steps waited {elapsed:?}");
    assert!(validity > 25_000, "{validity}");
    assert!(status.held, "{status:?}");
    assert_eq!(status.fence, Some(fence));
    assert!(extended.is_ok(), "{extended:?}");
    assert!(ahead_fence.get() < ahead, "{ahead_fence:?}");

    // Running again, the node runs the acquires it was sent: it grants the
    // first with the same fence as the others, and refuses the second
    // rather than issue its own fence for that lease.
    quorum.servers[2].resume();
    let expected = Some((token.expose().to_owned(), fence.get()));
    eventually("the stalled node carries the granted fence", || {
        copy_on(&quorum.servers[2], &quorum.prefix, &lock) == expected
    })
    .await;
    for server in &quorum.servers[..2] {
        assert_eq!(copy_on(server, &quorum.prefix, &lock), expected);
    }
    let ahead_copy = Some((ahead_token.expose().to_owned(), ahead_fence.get()));
    for server in &quorum.servers[..2] {
        assert_eq!(copy_on(server, &quorum.prefix, &ahead_lock), ahead_copy);
    }
    // It has run what it was sent by now (a few commands, each in µs).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        copy_on(&quorum.servers[2], &quorum.prefix, &ahead_lock),
        None
    );

    let released = store.release(&lock, &token).await.expect("release");
    assert!(
        matches!(released, ReleaseOutcome::Released(_)),
        "{released:?}"
    );
    let (next, _, _) = granted(&store, &lock, 1_000).await;
    assert!(next > fence, "{next:?} after {fence:?}");
}

#[tokio::test]
async fn an_acquire_refused_while_a_node_stalls_leaves_no_grant_there_once_it_runs() {
    let quorum = Quorum {
        node_timeout: Duration::from_secs(2),
        ..Quorum::start(3)
    };
    let (store, counts) = quorum.observed().await;
    let store = every_node_known(store).await;
    let lock = name("stalled-refusal");
    let (holder_fence, _, _) = granted(&store, &lock, 30_000).await;
    // The third node lost its copy: it will grant the next acquire.
    let key = KeyLayout::new(quorum.prefix.clone()).lease(&lock);
    quorum.servers[2].conn().cmd(&["DEL", &key]);
    quorum.servers[2].pause();
    // A refusal waits for every node not known slow; this one is known
    // slow once a step sent to it timed out (in the background: the status
    // is answered by the other two).
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.node_counts().slow != [false, false, true] {
        assert!(
            Instant::now() < deadline,
            "the stalled node never counted as slow"
        );
        let _ = store.status(&lock).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let started = Instant::now();
    let refused = try_acquire(&store, &lock, 30_000).await.expect("answer");
    let elapsed = started.elapsed();
    assert_eq!(refused, Err(holder_fence.get()), "busy, naming the holder");
    assert!(
        elapsed < Duration::from_secs(1),
        "the refusal waited {elapsed:?}"
    );

    // Running again, the node grants the refused acquire late; the broker
    // undoes it there.
    quorum.servers[2].resume();
    eventually("the late grant is counted and undone", || {
        counts
            .late_grants
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
            && copy_on(&quorum.servers[2], &quorum.prefix, &lock).is_none()
    })
    .await;
    // And it stays undone: nothing else comes for it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(copy_on(&quorum.servers[2], &quorum.prefix, &lock), None);
}

#[tokio::test]
async fn a_node_that_timed_out_is_not_waited_for_until_it_answers_in_time_again() {
    let quorum = Quorum {
        node_timeout: Duration::from_secs(3),
        ..Quorum::start(3)
    };
    let store = every_node_known(quorum.connect().await).await;
    let first = undecided(&quorum, &store, "timed-out-first").await;
    let second = undecided(&quorum, &store, "timed-out-second").await;
    quorum.servers[2].pause();

    // The first waits for the node's timeout, and the node is known slow.
    let answer = try_acquire(&store, &first, 30_000).await;
    assert!(answer.is_ok_and(|a| a.is_err()), "refused");
    assert_eq!(store.node_counts().slow, [false, false, true]);
    // The next is decided by the nodes that answer.
    let started = Instant::now();
    let answer = try_acquire(&store, &second, 30_000).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_millis(1_500),
        "it waited {elapsed:?}"
    );
    assert_eq!(
        answer.expect("answer"),
        Err(0),
        "contended: no majority holds"
    );

    // Running again, it answers in time and is waited for again.
    quorum.servers[2].resume();
    let lock = name("timed-out-later");
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.node_counts().slow != [false, false, false] {
        assert!(Instant::now() < deadline, "the node stayed slow");
        let _ = store.status(&lock).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A lock that one node holds and one lost its copy of: an acquire of it
/// needs the third node's answer to be decided.
async fn undecided(quorum: &Quorum, store: &QuorumStore, text: &str) -> LockName {
    let lock = name(text);
    granted(store, &lock, 30_000).await;
    let key = KeyLayout::new(quorum.prefix.clone()).lease(&lock);
    quorum.servers[1].conn().cmd(&["DEL", &key]);
    lock
}

#[tokio::test]
async fn a_blackholed_node_is_not_waited_for_and_serves_again_once_its_network_is_back() {
    // Connections to the third node stay open and every byte is dropped: a
    // black-holed network, which no connection error reveals.
    let mut quorum = Quorum {
        node_timeout: Duration::from_secs(3),
        ..Quorum::start(3)
    };
    let proxy = Proxy::start(quorum.servers[2].port()).await;
    quorum.urls[2] = proxy.url();
    let store = every_node_known(quorum.connect().await).await;
    let lock = name("blackholed");
    proxy.blackhole();

    let (fence, token, _) = granted(&store, &lock, 30_000).await;
    // Once a step timed out there, the node is known slow.
    let deadline = Instant::now() + Duration::from_secs(15);
    while store.node_counts().slow != [false, false, true] {
        assert!(Instant::now() < deadline, "the node never counted as slow");
        let _ = store.status(&lock).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let started = Instant::now();
    let refused = try_acquire(&store, &lock, 30_000).await.expect("answer");
    let status = store.status(&lock).await.expect("status");
    let ttl = Ttl::parse("ttl_ms", 30_000, u64::MAX).expect("ttl");
    let extended = store.extend(&lock, &token, ttl, 0).await;
    let released = store.release(&lock, &token).await.expect("release");
    let (next, next_token, _) = granted(&store, &lock, 30_000).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_millis(1_500),
        "five steps waited {elapsed:?}"
    );
    assert_eq!(refused, Err(fence.get()), "busy, naming the holder");
    assert!(status.held && status.fence == Some(fence), "{status:?}");
    assert!(extended.is_ok(), "{extended:?}");
    assert!(
        matches!(released, ReleaseOutcome::Released(_)),
        "{released:?}"
    );
    assert!(next > fence, "{next:?} after {fence:?}");

    // The network back, the node answers in time and counts again; it keeps
    // no copy of a lease with a fence the grant did not return.
    proxy.restore();
    let deadline = Instant::now() + Duration::from_secs(15);
    while store.node_counts().slow != [false, false, false] {
        assert!(Instant::now() < deadline, "the node stayed slow");
        let _ = store.status(&lock).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let copy = copy_on(&quorum.servers[2], &quorum.prefix, &lock);
    assert!(
        copy.is_none() || copy == Some((next_token.expose().to_owned(), next.get())),
        "{copy:?}"
    );
    store.release(&lock, &next_token).await.expect("release");
    let (last, last_token, _) = granted(&store, &lock, 30_000).await;
    assert!(last > next, "{last:?} after {next:?}");
    eventually("the node is sent the grant again", || {
        copy_on(&quorum.servers[2], &quorum.prefix, &lock)
            == Some((last_token.expose().to_owned(), last.get()))
    })
    .await;
}

/// Every step is answered once a majority decided it; the nodes that answer
/// after the decision still run it (docs/quorum.md, "Late nodes and slow
/// nodes"), so every node of five carries each grant with its fence, each
/// extension and each release.
#[tokio::test]
async fn the_nodes_a_step_does_not_wait_for_still_carry_every_grant_and_release() {
    let quorum = quorum(5);
    let store = every_node_known(quorum.connect().await).await;
    let prefix = &quorum.prefix;
    for round in 0..5 {
        let lock = name(&format!("led-{round}"));
        let (fence, token, _) = granted(&store, &lock, 30_000).await;
        let copy = Some((token.expose().to_owned(), fence.get()));
        eventually("every node carries the grant", || {
            (quorum.servers.iter()).all(|server| copy_on(server, prefix, &lock) == copy)
        })
        .await;
        let ttl = Ttl::parse("ttl_ms", 60_000, u64::MAX).expect("ttl");
        store.extend(&lock, &token, ttl, 0).await.expect("extend");
        eventually("every node carries the extension", || {
            (quorum.servers.iter()).all(|server| valid_for_on(server, prefix, &lock) > 40_000)
        })
        .await;
        let released = store.release(&lock, &token).await.expect("release");
        assert!(
            matches!(released, ReleaseOutcome::Released(_)),
            "{released:?}"
        );
        eventually("every node released it", || {
            (quorum.servers.iter()).all(|server| copy_on(server, prefix, &lock).is_none())
        })
        .await;
    }
}
