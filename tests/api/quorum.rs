//! Quorum mode against real `redis-server`s: the store conformance suite on
//! three nodes, and on five the failures Redlock exists for (nodes down,
//! a node restarted empty while a lease is held, a slow node, lost data).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockbroker_core::conformance::Backend;
use lockbroker_core::{
    AcquireOutcome, AcquireParams, FairEntry, Fence, LeaseKind, LeaseToken, LockDelay, LockName,
    LockStore, Principal, ReleaseOutcome, StoreError, Ttl,
};
use lockbroker_redis::quorum::{Drift, QuorumSettings, QuorumStore};
use lockbroker_redis::{QuorumEvent, RedisSettings, StoreObserver};
use lockbroker_tests::proxy::Proxy;
use lockbroker_tests::RedisServer;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Independent `redis-server`s, and brokers (quorum stores) over them.
struct Quorum {
    servers: Vec<RedisServer>,
    /// Where each broker connects to each node (a proxy's URL, or the node's).
    urls: Vec<String>,
    prefix: String,
    brokers: AtomicU32,
    /// Each broker's per-node timeout.
    node_timeout: Duration,
}

impl Quorum {
    fn start(nodes: usize) -> Self {
        let servers: Vec<RedisServer> = (0..nodes).map(|_| RedisServer::start()).collect();
        let urls = servers.iter().map(RedisServer::url).collect();
        Self {
            servers,
            urls,
            prefix: format!("quorum{}", NEXT.fetch_add(1, Ordering::Relaxed)),
            brokers: AtomicU32::new(0),
            node_timeout: Duration::from_millis(200),
        }
    }

    fn settings(&self) -> QuorumSettings {
        QuorumSettings {
            nodes: self
                .urls
                .iter()
                .map(|url| RedisSettings {
                    url: url.clone(),
                    key_prefix: self.prefix.clone(),
                    command_timeout: self.node_timeout,
                    connect_timeout: Duration::from_millis(200),
                    ..RedisSettings::default()
                })
                .collect(),
            drift: Drift::default(),
        }
    }

    /// A broker, once a majority answers and every live node's wake channel
    /// has its subscription.
    async fn connect(&self) -> QuorumStore {
        let store = QuorumStore::connect(self.settings(), None).expect("store");
        let brokers = i64::from(self.brokers.fetch_add(1, Ordering::Relaxed) + 1);
        let channel = format!("{}:wake", self.prefix);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let subscribed = self.servers.iter().all(|server| {
                let reply = server.conn().cmd(&["PUBSUB", "NUMSUB", &channel]);
                reply.as_array().get(1).and_then(|c| c.as_int()) >= Some(brokers)
            });
            if subscribed && store.ping().await.is_ok() {
                return store;
            }
            assert!(Instant::now() < deadline, "the quorum never became ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Backend for Quorum {
    type Store = QuorumStore;

    async fn broker(&self) -> QuorumStore {
        self.connect().await
    }

    async fn put_last_fence(&self, name: &LockName, fence: u64) {
        let key = lockbroker_redis::KeyLayout::new(self.prefix.clone()).fence(name);
        for server in &self.servers {
            server.conn().cmd(&["SET", &key, &fence.to_string()]);
        }
    }

    async fn lose_data(&self) {
        for server in &self.servers {
            server.conn().cmd(&["FLUSHALL"]);
        }
        // Every broker sees the nodes' new epochs within a look or two.
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
}

mod contended;
mod holders;
mod stalled;

mod conformance {
    use super::Quorum;

    lockbroker_core::store_conformance!(Quorum::start(3));
}

fn name(text: &str) -> LockName {
    LockName::parse(text).expect("valid name")
}

/// A plain acquire of `lock` (a lease of `kind`, among at most `limit` for
/// a permit): no owner, request id, lock-delay or queue, and no wait.
fn plain<'a>(
    lock: &'a LockName,
    kind: LeaseKind,
    limit: Option<u32>,
    token: &'a LeaseToken,
    ttl_ms: u64,
) -> AcquireParams<'a> {
    AcquireParams {
        name: lock,
        kind,
        limit,
        token,
        ttl: Ttl::parse("ttl_ms", ttl_ms, u64::MAX).expect("ttl"),
        owner: None,
        request_id: None,
        principal: &ANONYMOUS,
        lock_delay: LockDelay::default(),
        fair: None,
        waits: false,
    }
}

/// Who asks in these tests: a broker without API keys.
static ANONYMOUS: Principal = Principal::ANONYMOUS;

/// One acquire of `lock` with a fresh token; the fence when granted.
async fn try_acquire(
    store: &QuorumStore,
    lock: &LockName,
    ttl_ms: u64,
) -> Result<Result<(Fence, LeaseToken, u64), u64>, StoreError> {
    let token = LeaseToken::generate();
    let params = plain(lock, LeaseKind::Exclusive, None, &token, ttl_ms);
    let outcome = store.acquire(params).await?;
    Ok(match outcome {
        AcquireOutcome::Granted(lease) => Ok((lease.fence, lease.token, lease.validity_ms)),
        AcquireOutcome::Busy { blockers, .. } => Err(blockers.holder.fence.get()),
        AcquireOutcome::LimitConflict { limit } => panic!("a lock has no limit: {limit}"),
        // A split vote names no holder.
        AcquireOutcome::Contended => Err(0),
    })
}

async fn granted(store: &QuorumStore, lock: &LockName, ttl_ms: u64) -> (Fence, LeaseToken, u64) {
    match try_acquire(store, lock, ttl_ms).await {
        Ok(Ok(grant)) => grant,
        other => panic!("expected a grant: {other:?}"),
    }
}

#[tokio::test]
async fn two_nodes_down_of_five_still_grant_a_third_stops_everything() {
    let mut quorum = Quorum::start(5);
    let store = quorum.connect().await;
    let lock = name("quorum-down");
    let (mut last, token, _) = granted(&store, &lock, 5_000).await;
    assert!(matches!(
        store.release(&lock, &token).await,
        Ok(ReleaseOutcome::Released(_))
    ));

    quorum.servers[0].kill();
    quorum.servers[1].kill();
    for _ in 0..3 {
        let (fence, token, _) = granted(&store, &lock, 5_000).await;
        assert!(fence > last, "{fence} > {last}");
        last = fence;
        store.release(&lock, &token).await.expect("release");
    }

    quorum.servers[2].kill();
    let refused = try_acquire(&store, &lock, 5_000).await;
    assert!(
        matches!(refused, Err(StoreError::Unavailable(_))),
        "{refused:?}"
    );
    assert!(store.ping().await.is_err(), "not ready without a majority");

    for at in 0..3 {
        quorum.servers[at].restart();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(Ok((fence, _, _))) = try_acquire(&store, &lock, 5_000).await {
            assert!(fence > last, "fences grow across the outage");
            break;
        }
        assert!(Instant::now() < deadline, "the quorum never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_node_restarted_empty_while_a_lease_is_held_grants_nobody_else() {
    let mut quorum = Quorum::start(5);
    let store = quorum.connect().await;
    let lock = name("quorum-restart");
    // The holder's lease lives on nodes 0, 1 and 2 only.
    quorum.servers[3].kill();
    quorum.servers[4].kill();
    // The lease is valid for its validity counted from before it was asked for.
    let asked_at = Instant::now();
    let (held, _, validity_ms) = granted(&store, &lock, 3_000).await;
    quorum.servers[3].restart();
    quorum.servers[4].restart();
    // Node 0 loses its data: with 3 and 4 it would be a majority of empty nodes.
    quorum.servers[0].restart();

    let mut refusals = 0;
    loop {
        match try_acquire(&store, &lock, 1_000).await {
            Ok(Ok((fence, _, _))) => {
                assert!(
                    asked_at.elapsed() >= Duration::from_millis(validity_ms),
                    "a second holder {:?} into a lease valid for {validity_ms} ms",
                    asked_at.elapsed()
                );
                assert!(fence > held, "{fence} > {held}");
                break;
            }
            Ok(Err(_)) | Err(_) => refusals += 1,
        }
        assert!(
            asked_at.elapsed() < Duration::from_secs(15),
            "never granted again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        refusals > 0,
        "the lock was refused while the lease was valid"
    );
}

#[tokio::test]
async fn a_slow_node_is_not_waited_for_and_validity_counts_from_the_first_send() {
    let mut quorum = Quorum::start(5);
    let proxy = Proxy::start(quorum.servers[0].port()).await;
    quorum.urls[0] = proxy.url();
    let store = quorum.connect().await;
    let lock = name("quorum-slow");
    let (_, token, fast_validity) = granted(&store, &lock, 2_000).await;
    store.release(&lock, &token).await.expect("release");

    // Slower than the 200 ms node timeout: the node counts as a refusal.
    proxy.delay(Duration::from_millis(400));
    let started = Instant::now();
    let (_, token, validity) = granted(&store, &lock, 2_000).await;
    let elapsed = started.elapsed();
    assert!(validity < 2_000 && validity > 0, "{validity}");
    assert!(
        u128::from(validity) <= 2_000 - elapsed.as_millis().min(2_000) + 5,
        "validity {validity} ms after {elapsed:?}"
    );
    assert!(fast_validity > 0);
    proxy.restore();
    store.release(&lock, &token).await.expect("release");
}

#[tokio::test]
async fn fences_grow_after_a_minority_and_then_every_node_lose_their_data() {
    let quorum = Quorum::start(5);
    let store = quorum.connect().await;
    let lock = name("quorum-flush");
    let mut last = Fence::new(0);
    for flushed in [vec![0, 1], vec![0, 1, 2, 3, 4]] {
        let (fence, token, _) = granted(&store, &lock, 5_000).await;
        assert!(fence > last);
        last = fence;
        store.release(&lock, &token).await.expect("release");
        for at in flushed {
            quorum.servers[at].conn().cmd(&["FLUSHALL"]);
        }
        tokio::time::sleep(Duration::from_millis(600)).await;
        let (fence, token, _) = granted(&store, &lock, 5_000).await;
        assert!(fence > last, "{fence} > {last}");
        last = fence;
        store.release(&lock, &token).await.expect("release");
    }
}

/// Counts what the quorum store reports to its observer.
#[derive(Default)]
struct Counts {
    write_backs: AtomicU32,
    rollbacks: AtomicU32,
    late_grants: AtomicU32,
    node_scripts: std::sync::Mutex<Vec<usize>>,
}

impl StoreObserver for Counts {
    fn script_finished(&self, _: &'static str, _: Duration) {}

    fn fence_floor_raised(&self) {}

    fn node_script_finished(&self, node: usize, _: Duration) {
        self.node_scripts.lock().expect("nodes").push(node);
    }

    fn quorum_event(&self, event: QuorumEvent) {
        match event {
            QuorumEvent::FenceWrittenBack => self.write_backs.fetch_add(1, Ordering::Relaxed),
            QuorumEvent::GrantRolledBack => self.rollbacks.fetch_add(1, Ordering::Relaxed),
            QuorumEvent::LateGrantSettled => self.late_grants.fetch_add(1, Ordering::Relaxed),
        };
    }
}

impl Quorum {
    /// A broker reporting to a fresh [`Counts`].
    async fn observed(&self) -> (QuorumStore, Arc<Counts>) {
        let counts = Arc::new(Counts::default());
        let observer: Arc<dyn StoreObserver> = Arc::clone(&counts) as _;
        let store = QuorumStore::connect(self.settings(), Some(observer)).expect("store");
        while store.ping().await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (store, counts)
    }

    /// Waits until every node keeps `fence` as the last fence of `lock`.
    async fn marks_become(&self, lock: &LockName, fence: Fence) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let want = Some(fence.get().to_string());
        while (0..self.servers.len()).any(|at| self.fence_mark(at, lock) != want) {
            let marks: Vec<_> = (0..self.servers.len())
                .map(|at| self.fence_mark(at, lock))
                .collect();
            assert!(Instant::now() < deadline, "marks {marks:?}, not {fence:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The last fence node `at` keeps for lock `name` (the `f` field of its
    /// lease hash).
    fn fence_mark(&self, at: usize, name: &LockName) -> Option<String> {
        let key = lockbroker_redis::KeyLayout::new(self.prefix.clone()).lease(name);
        let reply = self.servers[at].conn().cmd(&["HGET", &key, "f"]);
        reply.as_text().map(str::to_owned)
    }
}

#[tokio::test]
async fn every_copy_carries_the_granted_fence_and_a_node_ahead_costs_one_more_round() {
    let quorum = Quorum::start(3);
    let (store, counts) = quorum.observed().await;
    let lock = name("quorum-agree");
    let (fence, token, _) = granted(&store, &lock, 5_000).await;
    assert_eq!(counts.write_backs.load(Ordering::Relaxed), 0);
    // A node that answered after the grant was decided carries the fence
    // too: every node issued exactly one above the proposal.
    quorum.marks_become(&lock, fence).await;
    store.release(&lock, &token).await.expect("release");

    // Node 1's mark runs far ahead (it alone saw a later grant): it refuses
    // the proposal and says how far ahead it is. Node 2 stalls, so the
    // grant needs node 1: a second round proposes above its fence.
    let ahead = fence.get() + 1_000_000_000_000;
    let key = format!("{}:{{quorum-agree}}:lease", quorum.prefix);
    quorum.servers[1]
        .conn()
        .cmd(&["HSET", &key, "f", &ahead.to_string()]);
    quorum.servers[2].pause();
    let (fence, token, _) = granted(&store, &lock, 5_000).await;
    assert!(fence.get() > ahead + 1, "{fence:?}");
    assert_eq!(counts.write_backs.load(Ordering::Relaxed), 0);
    for at in 0..2 {
        let mark = quorum.fence_mark(at, &lock);
        assert_eq!(mark, Some(fence.get().to_string()), "node {at}");
    }
    // Running again, node 2 runs both rounds: the first undone, the second
    // granted with the same fence as the others.
    quorum.servers[2].resume();
    quorum.marks_become(&lock, fence).await;
    store.release(&lock, &token).await.expect("release");
    let seen = counts.node_scripts.lock().expect("nodes").clone();
    assert!(
        (0..3).all(|at| seen.contains(&at)),
        "latency per node: {seen:?}"
    );
}

/// A fair acquire by `waiter`, which arrived at `arrived_at_us`.
async fn fair_try(
    store: &QuorumStore,
    lock: &LockName,
    waiter: &str,
    arrived_at_us: u64,
) -> AcquireOutcome {
    store
        .acquire(AcquireParams {
            name: lock,
            kind: LeaseKind::Exclusive,
            limit: None,
            token: &LeaseToken::generate(),
            ttl: Ttl::parse("ttl_ms", 10_000, u64::MAX).expect("ttl"),
            owner: None,
            request_id: None,
            principal: &Principal::ANONYMOUS,
            lock_delay: LockDelay::default(),
            fair: Some(FairEntry {
                waiter_id: waiter,
                always: true,
                entry_ttl_ms: 10_000,
                arrived_at_us,
            }),
            waits: true,
        })
        .await
        .expect("the quorum answers")
}

#[tokio::test]
async fn a_grant_undone_on_a_minority_costs_the_fair_waiter_nothing() {
    let quorum = Quorum::start(3);
    let (store, counts) = quorum.observed().await;
    let lock = name("quorum-fair");
    let (_, holder, _) = granted(&store, &lock, 30_000).await;
    let first = fair_try(&store, &lock, "first", 1_000).await;
    let second = fair_try(&store, &lock, "second", 2_000).await;
    assert!(matches!(first, AcquireOutcome::Busy { .. }));
    assert!(matches!(second, AcquireOutcome::Busy { .. }));

    // Node 0 lost the holder's lease: it alone grants the first waiter,
    // which no majority backs, so the grant is undone there.
    let lease = format!("{}:{{quorum-fair}}:lease", quorum.prefix);
    quorum.servers[0].conn().cmd(&["DEL", &lease]);
    let retry = fair_try(&store, &lock, "first", 1_000).await;
    assert!(matches!(retry, AcquireOutcome::Busy { .. }), "{retry:?}");
    // Undone at once when node 0 answered before the refusal was decided,
    // else in the background once it answers.
    let queue = format!("{}:{{quorum-fair}}:queue", quorum.prefix);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let undone =
            counts.rollbacks.load(Ordering::Relaxed) + counts.late_grants.load(Ordering::Relaxed);
        let line = quorum.servers[0].conn().cmd(&["ZRANGE", &queue, "0", "-1"]);
        let line: Vec<&str> = line.as_array().iter().filter_map(|w| w.as_text()).collect();
        if undone == 1 && line == ["first", "second"] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "undone {undone} times; node 0's line {line:?}, not the first waiter first"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    store.release(&lock, &holder).await.expect("release");
    assert!(matches!(
        fair_try(&store, &lock, "second", 2_000).await,
        AcquireOutcome::Busy { .. }
    ));
    assert!(matches!(
        fair_try(&store, &lock, "first", 1_000).await,
        AcquireOutcome::Granted(_)
    ));
}

#[tokio::test]
async fn a_node_back_empty_is_readmitted_above_every_fence_the_others_kept() {
    let quorum = Quorum::start(5);
    let store = quorum.connect().await;
    let lock = name("quorum-readmit");
    let (_, token, _) = granted(&store, &lock, 5_000).await;
    store.release(&lock, &token).await.expect("release");
    // A grant on nodes 0, 1 and 2 issued a fence far above every clock (a
    // broker whose clock ran ahead, say), which nodes 3 and 4 never saw.
    let high: u64 = 5_000_000_000_000_000;
    let lease_key = format!("{}:{{quorum-readmit}}:lease", quorum.prefix);
    let epoch_key = format!("{}:epoch", quorum.prefix);
    for at in 0..3 {
        let mut conn = quorum.servers[at].conn();
        conn.cmd(&["HSET", &lease_key, "f", &high.to_string()]);
        conn.cmd(&["HSET", &epoch_key, "max", &high.to_string()]);
    }
    // Node 0 loses its data and is readmitted; then nodes 1 and 2, the only
    // others that knew that fence, stop answering.
    quorum.servers[0].conn().cmd(&["FLUSHALL"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pending = quorum.servers[0]
            .conn()
            .cmd(&["HGET", &epoch_key, "pending"]);
        let readmitted = quorum.servers[0].conn().cmd(&["HGET", &epoch_key, "floor"]);
        if pending.as_text().is_none() && readmitted.as_text().is_some() {
            assert_eq!(readmitted.as_text(), Some(high.to_string().as_str()));
            break;
        }
        assert!(Instant::now() < deadline, "node 0 was never readmitted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    quorum.servers[1].pause();
    quorum.servers[2].pause();

    // A broker that never saw that fence takes the lock on nodes 0, 3 and 4:
    // node 0's floor keeps the fence above it.
    let (fresh, _) = quorum.observed().await;
    let (fence, token, _) = granted(&fresh, &lock, 5_000).await;
    assert!(fence.get() > high, "{fence} > {high}");
    fresh.release(&lock, &token).await.expect("release");
    quorum.servers[1].resume();
    quorum.servers[2].resume();
}

/// Which server a node is, asked of the servers: a broker whose node list
/// names one server twice (in any spelling) or a replica refuses to start,
/// and a node found to be one later counts toward no majority.
mod identity {
    use std::time::{Duration, Instant};

    use lockbroker_server::config::RedisMode;
    use lockbroker_server::{Application, Settings};
    use lockbroker_tests::app::test_settings;
    use lockbroker_tests::proxy::Proxy;
    use lockbroker_tests::sentinel::start_replica;
    use lockbroker_tests::{RedisServer, TestApp};
    use reqwest::StatusCode;

    /// Quorum-mode settings over `urls`.
    fn settings(first: &RedisServer, urls: Vec<String>) -> Settings {
        let mut settings = test_settings(first);
        settings.redis.mode = RedisMode::Quorum;
        settings.redis.nodes = urls;
        settings.redis.node_timeout_ms = 200;
        settings
    }

    /// Why the broker refused to start over `urls`; panics if it started.
    async fn refusal(first: &RedisServer, urls: Vec<String>) -> String {
        match Application::build(settings(first, urls.clone())).await {
            Ok(_) => panic!("a broker over {urls:?} started"),
            Err(error) => error.to_string(),
        }
    }

    #[tokio::test]
    async fn one_server_in_two_spellings_or_a_replica_refuses_to_start() {
        let (p, q) = (RedisServer::start(), RedisServer::start());
        let other_spellings = [
            format!("redis://127.1:{}/0", p.port()),
            format!("redis://127.0.0.1:{}/1", p.port()),
            format!("redis://2130706433:{}/0", p.port()),
        ];
        for spelling in other_spellings {
            let why = refusal(&p, vec![p.url(), spelling.clone(), q.url()]).await;
            assert!(
                why.contains(&format!(
                    "{spelling} is the same Redis server as {}",
                    p.url()
                )),
                "{why}"
            );
        }
        let replica = start_replica(&p);
        let why = refusal(&p, vec![p.url(), q.url(), replica.url()]).await;
        assert!(
            why.contains(&format!("{} is a replica", replica.url())),
            "{why}"
        );

        // With one node stopped, the two that answer are still compared.
        let mut r = RedisServer::start();
        r.kill();
        let twice = format!("redis://127.1:{}/0", p.port());
        let why = refusal(&p, vec![p.url(), twice, r.url()]).await;
        assert!(why.contains("is the same Redis server as"), "{why}");
    }

    /// The value of `series` in a scrape of `app`, once it is `want`.
    async fn wait_for_sample(app: &TestApp, series: &str, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = app.metrics().await;
            let value = text
                .lines()
                .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '));
            if value == Some(want) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{series} never became {want}:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    #[tokio::test]
    async fn a_server_listed_twice_that_shows_up_later_is_no_second_vote() {
        let (p, mut q) = (RedisServer::start(), RedisServer::start());
        // Node 1 is node 0's server through a proxy, cut while the broker
        // starts: the start check cannot see it.
        let proxy = Proxy::start(p.port()).await;
        proxy.cut();
        let app = TestApp::spawn_with(settings(&p, vec![p.url(), proxy.url(), q.url()])).await;
        assert_eq!(app.acquire("before", 5_000).await.status, StatusCode::OK);

        proxy.restore();
        wait_for_sample(
            &app,
            r#"lockbroker_quorum_node_misconfigured{node="1"}"#,
            "1",
        )
        .await;
        wait_for_sample(
            &app,
            r#"lockbroker_quorum_node_misconfigured{node="0"}"#,
            "0",
        )
        .await;
        assert_eq!(
            app.get("/readyz").await.status,
            StatusCode::OK,
            "nodes 0 and 2 remain"
        );

        // Node 0's server alone is no majority, whichever places it has.
        q.kill();
        let refused = app.acquire("after", 5_000).await;
        assert_eq!(
            refused.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{:?}",
            refused.body
        );
        assert_eq!(
            app.get("/readyz").await.status,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[tokio::test]
    async fn a_replica_that_comes_up_as_a_node_is_marked_and_counted_toward_nothing() {
        let (p, mut q) = (RedisServer::start(), RedisServer::start());
        let mut replica = start_replica(&p);
        replica.kill();
        let app = TestApp::spawn_with(settings(&p, vec![p.url(), q.url(), replica.url()])).await;
        replica.restart();
        wait_for_sample(
            &app,
            r#"lockbroker_quorum_node_misconfigured{node="2"}"#,
            "1",
        )
        .await;
        q.kill();
        assert_eq!(
            app.acquire("job", 5_000).await.status,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
