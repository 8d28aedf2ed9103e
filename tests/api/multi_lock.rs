//! Several locks at once: `acquire-all` takes a lease on every lock or on
//! none, callers asking for overlapping sets in any order never deadlock,
//! and `release-all` says what became of each lease.

use std::time::Duration;

use lockbroker_api::{AcquireAllResponse, ReleaseAllResponse};
use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// `{"locks": [{"name": ...}, ...]}` with `extra` fields beside it.
fn all_of(names: &[&str], extra: Value) -> Value {
    let mut body = json!({
        "locks": names.iter().map(|name| json!({"name": name})).collect::<Vec<_>>(),
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    body
}

/// `body` sent to `path` is refused with `400` naming `field`.
async fn refused_naming(app: &TestApp, path: &str, body: Value, field: &str) {
    let refused = app.post(path, body.clone()).await;
    assert_eq!(
        refused.status,
        StatusCode::BAD_REQUEST,
        "{body}: {}",
        refused.body
    );
    let named = refused.error().field;
    assert_eq!(named.as_deref(), Some(field), "{body}: {}", refused.body);
}

async fn held(app: &TestApp, name: &str) -> bool {
    app.status(name).await.body["held"] == true
}

#[tokio::test]
async fn acquire_all_takes_a_lease_on_every_lock_or_on_none() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let holder = app.acquire("ledger:b", 60_000).await;

    let refused = app
        .post(
            "/v1/locks/acquire-all",
            all_of(
                &["ledger:c", "ledger:b", "ledger:a"],
                json!({"ttl_ms": 60_000}),
            ),
        )
        .await;
    assert_eq!(refused.status, StatusCode::LOCKED, "{}", refused.body);
    let error = refused.error();
    assert_eq!(error.lock.as_deref(), Some("ledger:b"), "{}", refused.body);
    assert_eq!(error.fence, Some(holder.fence()));
    assert!(
        error
            .message
            .ends_with("none of the locks asked for was taken"),
        "{}",
        error.message
    );
    for name in ["ledger:a", "ledger:c"] {
        assert!(!held(&app, name).await, "{name} was left held");
    }

    app.release("ledger:b", &holder.token()).await;
    let granted = app
        .post(
            "/v1/locks/acquire-all",
            all_of(
                &["ledger:c", "ledger:b", "ledger:a"],
                json!({"ttl_ms": 60_000, "owner": "transfer-7"}),
            ),
        )
        .await;
    assert_eq!(granted.status, StatusCode::OK, "{}", granted.body);
    let leases = granted.decode::<AcquireAllResponse>().leases;
    let names: Vec<&str> = leases.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        ["ledger:c", "ledger:b", "ledger:a"],
        "in the order asked"
    );
    assert!(leases[1].fence > holder.fence());
    assert!(leases[0].token != leases[1].token && leases[1].token != leases[2].token);
    for lease in &leases {
        assert_eq!(lease.mode, "exclusive");
        let status = app.status(&lease.name).await;
        assert_eq!(status.body["owner"], "transfer-7", "{}", status.body);
        assert_eq!(status.body["fence"], lease.fence);
    }
}

#[tokio::test]
async fn callers_asking_for_overlapping_sets_in_opposite_orders_all_get_them() {
    let redis = RedisServer::start();
    let app = std::sync::Arc::new(TestApp::spawn(&redis).await);
    let mut callers = Vec::new();
    for caller in 0..8 {
        let app = std::sync::Arc::clone(&app);
        let names = if caller % 2 == 0 {
            ["acct:x", "acct:y", "acct:z"]
        } else {
            ["acct:z", "acct:y", "acct:x"]
        };
        callers.push(tokio::spawn(async move {
            let body = all_of(&names, json!({"ttl_ms": 10_000, "wait_ms": 20_000}));
            let granted = app.post("/v1/locks/acquire-all", body).await;
            assert_eq!(granted.status, StatusCode::OK, "{}", granted.body);
            let leases = granted.decode::<AcquireAllResponse>().leases;
            tokio::time::sleep(Duration::from_millis(20)).await;
            let release = json!({
                "leases": leases
                    .iter()
                    .map(|l| json!({"name": l.name, "token": l.token}))
                    .collect::<Vec<_>>(),
            });
            let released = app.post("/v1/locks/release-all", release).await;
            assert_eq!(released.status, StatusCode::OK, "{}", released.body);
            let results = released.decode::<ReleaseAllResponse>().results;
            assert!(results.iter().all(|r| r.released), "{}", released.body);
            leases
                .into_iter()
                .map(|l| (l.name, l.fence))
                .collect::<Vec<_>>()
        }));
    }
    let mut fences: Vec<(String, u64)> = Vec::new();
    for caller in callers {
        let leases = tokio::time::timeout(Duration::from_secs(30), caller)
            .await
            .expect("every caller got its locks: no deadlock")
            .expect("caller");
        fences.extend(leases);
    }
    // Eight grants of each lock, each with a fence of its own.
    for name in ["acct:x", "acct:y", "acct:z"] {
        let mut of_lock: Vec<u64> = (fences.iter())
            .filter(|(n, _)| n == name)
            .map(|(_, f)| *f)
            .collect();
        of_lock.sort_unstable();
        of_lock.dedup();
        assert_eq!(of_lock.len(), 8, "{name}: {of_lock:?}");
    }
}

#[tokio::test]
async fn two_callers_looping_over_one_pair_in_opposite_orders_both_make_progress() {
    let redis = RedisServer::start();
    let app = std::sync::Arc::new(TestApp::spawn(&redis).await);
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let mut callers = Vec::new();
    for names in [["pair:a", "pair:b"], ["pair:b", "pair:a"]] {
        let app = std::sync::Arc::clone(&app);
        callers.push(tokio::spawn(async move {
            let mut fences: Vec<(String, u64)> = Vec::new();
            while std::time::Instant::now() < until {
                let body = all_of(&names, json!({"ttl_ms": 10_000, "wait_ms": 5_000}));
                let granted = app.post("/v1/locks/acquire-all", body).await;
                assert_eq!(granted.status, StatusCode::OK, "{}", granted.body);
                let leases = granted.decode::<AcquireAllResponse>().leases;
                let release = json!({
                    "leases": leases
                        .iter()
                        .map(|l| json!({"name": l.name, "token": l.token}))
                        .collect::<Vec<_>>(),
                });
                fences.extend(leases.into_iter().map(|l| (l.name, l.fence)));
                tokio::time::sleep(Duration::from_millis(5)).await;
                let released = app.post("/v1/locks/release-all", release).await;
                let results = released.decode::<ReleaseAllResponse>().results;
                assert!(results.iter().all(|r| r.released), "{}", released.body);
            }
            fences
        }));
    }
    let mut every: Vec<(String, u64)> = Vec::new();
    for caller in callers {
        let fences = tokio::time::timeout(Duration::from_secs(40), caller)
            .await
            .expect("no deadlock: both callers finish")
            .expect("caller");
        // Each caller got the pair again and again, not once and then
        // starved behind the other.
        assert!(fences.len() >= 2 * 10, "{} grants", fences.len() / 2);
        every.extend(fences);
    }
    // Every grant of either lock carries a fence of its own.
    for name in ["pair:a", "pair:b"] {
        let mut of_lock: Vec<u64> = (every.iter())
            .filter(|(n, _)| n == name)
            .map(|(_, f)| *f)
            .collect();
        let grants = of_lock.len();
        of_lock.sort_unstable();
        of_lock.dedup();
        assert_eq!(of_lock.len(), grants, "{name}");
    }
}

/// Where every lock lives on one server (single and Sentinel mode), each
/// try takes the whole set in one step: while one lock of a set is held by
/// another lease, a third caller never sees the free one held, as it could
/// when a set is taken one lock at a time and given back (Cluster and
/// quorum mode, where this test has nothing to check).
#[tokio::test]
async fn a_third_caller_never_sees_a_part_of_a_set_held_on_one_server() {
    if !lockbroker_tests::modes::one_server_mode() {
        return;
    }
    let redis = RedisServer::start();
    let app = std::sync::Arc::new(TestApp::spawn(&redis).await);
    let holder = app.acquire("set:b", 60_000).await;
    assert_eq!(holder.status, StatusCode::OK);
    let until = std::time::Instant::now() + Duration::from_secs(3);
    let mut callers = Vec::new();
    for names in [["set:a", "set:b"], ["set:b", "set:a"]] {
        let app = std::sync::Arc::clone(&app);
        callers.push(tokio::spawn(async move {
            let mut tries = 0;
            while std::time::Instant::now() < until {
                let answer = app
                    .post("/v1/locks/acquire-all", all_of(&names, json!({})))
                    .await;
                assert_eq!(answer.status, StatusCode::LOCKED, "{}", answer.body);
                tries += 1;
            }
            tries
        }));
    }
    let (mut reads, mut shown) = (0, Vec::new());
    while std::time::Instant::now() < until {
        let status = app.status("set:a").await;
        reads += 1;
        if status.body["held"] == true {
            shown.push(status.body);
        }
    }
    let mut tries = 0;
    for caller in callers {
        tries += caller.await.expect("caller");
    }
    assert!(tries >= 100 && reads >= 100, "{tries} tries, {reads} reads");
    assert!(
        shown.is_empty(),
        "set:a shown held {} times by a set given back, first: {}",
        shown.len(),
        shown[0]
    );
}

#[tokio::test]
async fn a_waiting_acquire_all_holds_nothing_while_it_waits() {
    let redis = RedisServer::start();
    let app = std::sync::Arc::new(TestApp::spawn(&redis).await);
    let holder = app.acquire("table:q", 60_000).await;
    let waiter = {
        let app = std::sync::Arc::clone(&app);
        tokio::spawn(async move {
            let body = all_of(
                &["table:p", "table:q"],
                json!({"ttl_ms": 60_000, "wait_ms": 10_000}),
            );
            app.post("/v1/locks/acquire-all", body).await
        })
    };
    // It found table:q busy after taking table:p, gave table:p back, and
    // waits for table:q alone: another caller can use table:p meanwhile.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !held(&app, "table:p").await,
        "table:p is held while waiting"
    );
    let passer = app.acquire("table:p", 60_000).await;
    assert_eq!(passer.status, StatusCode::OK, "{}", passer.body);
    app.release("table:p", &passer.token()).await;

    app.release("table:q", &holder.token()).await;
    let granted = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("granted once both are free")
        .expect("waiter");
    assert_eq!(granted.status, StatusCode::OK, "{}", granted.body);
    let leases = granted.decode::<AcquireAllResponse>().leases;
    assert!(leases[1].fence > holder.fence());
    assert!(held(&app, "table:p").await && held(&app, "table:q").await);
}

#[tokio::test]
async fn a_waiting_acquire_all_answers_busy_at_its_deadline_and_takes_nothing() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let holder = app.acquire("nightly:b", 60_000).await;
    let started = std::time::Instant::now();
    let refused = app
        .post(
            "/v1/locks/acquire-all",
            all_of(&["nightly:a", "nightly:b"], json!({"wait_ms": 400})),
        )
        .await;
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_eq!(refused.status, StatusCode::LOCKED, "{}", refused.body);
    assert_eq!(refused.error().lock.as_deref(), Some("nightly:b"));
    assert_eq!(refused.error().fence, Some(holder.fence()));
    assert!(!held(&app, "nightly:a").await);
}

#[tokio::test]
async fn a_retry_with_the_same_request_id_gets_the_same_leases() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let body = all_of(
        &["batch:1", "batch:2"],
        json!({"ttl_ms": 60_000, "request_id": "move-42", "owner": "mover"}),
    );
    let first = app.post("/v1/locks/acquire-all", body.clone()).await;
    let again = app.post("/v1/locks/acquire-all", body).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    let (first, again) = (
        first.decode::<AcquireAllResponse>().leases,
        again.decode::<AcquireAllResponse>().leases,
    );
    for (a, b) in first.iter().zip(&again) {
        assert_eq!((&a.token, a.fence), (&b.token, b.fence));
    }
}

#[tokio::test]
async fn a_lock_named_twice_is_taken_once_exclusively_if_either_place_asks_so() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let body = json!({"locks": [
        {"name": "twice:a", "mode": "shared"},
        {"name": "twice:b"},
        {"name": "twice:a"},
    ]});
    let granted = app.post("/v1/locks/acquire-all", body).await;
    assert_eq!(granted.status, StatusCode::OK, "{}", granted.body);
    let leases = granted.decode::<AcquireAllResponse>().leases;
    assert_eq!(leases.len(), 3);
    assert_eq!(
        leases[0].token, leases[2].token,
        "one lease, at both places"
    );
    assert_eq!(leases[0].mode, "exclusive");
    let status = app.status("twice:a").await;
    assert_eq!(status.body["holder_count"], 1, "{}", status.body);
}

#[tokio::test]
async fn release_all_says_what_became_of_each_lease() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let kept = app.acquire("pair:kept", 60_000).await;
    let short = app.acquire("pair:short", 400).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let released = app
        .post(
            "/v1/locks/release-all",
            json!({"leases": [
                {"name": "pair:kept", "token": kept.token()},
                {"name": "pair:short", "token": short.token()},
            ]}),
        )
        .await;
    assert_eq!(released.status, StatusCode::OK, "{}", released.body);
    let results = released.decode::<ReleaseAllResponse>().results;
    assert_eq!(results[0].name, "pair:kept");
    assert!(results[0].released);
    assert_eq!(results[0].fence, Some(kept.fence()));
    assert_eq!(results[1].name, "pair:short");
    assert!(!results[1].released);
    let error = results[1].error.as_ref().expect("why not");
    assert_eq!(error.code.as_str(), "lease_lost", "{}", released.body);
    assert!(!held(&app, "pair:kept").await);
}

#[tokio::test]
async fn bad_requests_over_several_locks_name_the_field_and_take_nothing() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let too_many: Vec<String> = (0..33).map(|i| format!("many:{i}")).collect();
    let too_many: Vec<&str> = too_many.iter().map(String::as_str).collect();
    for (body, field) in [
        (json!({}), "locks"),
        (json!({"locks": []}), "locks"),
        (all_of(&too_many, json!({})), "locks"),
        (all_of(&["ok", "bad name"], json!({})), "locks[1].name"),
        (json!({"locks": [{"mode": "shared"}]}), "locks[0].name"),
        (
            json!({"locks": [{"name": "x", "mode": "permit"}]}),
            "locks[0].mode",
        ),
        (all_of(&["ttl:a"], json!({"ttl_ms": 0})), "ttl_ms"),
    ] {
        refused_naming(&app, "/v1/locks/acquire-all", body, field).await;
    }
    for name in ["ok", "ttl:a"] {
        assert!(!held(&app, name).await, "{name}");
    }
    for (body, field) in [
        (json!({"leases": []}), "leases"),
        (json!({"leases": [{"name": "x"}]}), "leases[0].token"),
        (json!({"leases": [{"token": "t"}]}), "leases[0].name"),
        (
            json!({"leases": [{"name": "x", "token": ""}]}),
            "leases[0].token",
        ),
    ] {
        refused_naming(&app, "/v1/locks/release-all", body, field).await;
    }
    // The two routes' names are no lock names.
    let reserved = app.acquire("acquire-all", 1_000).await;
    assert_eq!(
        reserved.status,
        StatusCode::BAD_REQUEST,
        "{}",
        reserved.body
    );
}
