//! Semaphores and shared locks over HTTP: permits up to a limit, readers
//! beside readers, a waiting writer ahead of newer readers, and every bad
//! request answered with a clear 4xx that changes nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockbroker_api::{PermitResponse, SemaphoreStatusResponse, StatusResponse};
use lockbroker_tests::app::test_settings;
use lockbroker_tests::{RedisServer, Reply, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

/// `POST /v1/semaphores/{name}/{step}` with `body`.
async fn semaphore(app: &TestApp, name: &str, step: &str, body: Value) -> Reply {
    app.post(&format!("/v1/semaphores/{name}/{step}"), body)
        .await
}

/// Acquires in the background, as a caller that waits.
fn waiting(app: &Arc<TestApp>, path: String, body: Value) -> JoinHandle<Reply> {
    let app = Arc::clone(app);
    tokio::spawn(async move { app.post(&path, body).await })
}

/// The answers of the finished tasks, taking them out of `tasks`.
async fn finished(tasks: &mut Vec<JoinHandle<Reply>>) -> Vec<Reply> {
    let mut done = Vec::new();
    let mut i = 0;
    while i < tasks.len() {
        if tasks[i].is_finished() {
            done.push(tasks.remove(i).await.expect("acquire task"));
        } else {
            i += 1;
        }
    }
    done
}

/// Waits until `count` of `tasks` finished (at most 10 s), then `settle`
/// more for any that should not finish; all that finished.
async fn finish(tasks: &mut Vec<JoinHandle<Reply>>, count: usize, settle: Duration) -> Vec<Reply> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut done = Vec::new();
    while done.len() < count && Instant::now() < deadline {
        done.extend(finished(tasks).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(settle).await;
    done.extend(finished(tasks).await);
    done
}

async fn semaphore_status(app: &TestApp, name: &str) -> SemaphoreStatusResponse {
    let reply = app.get(&format!("/v1/semaphores/{name}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    reply.decode()
}

#[tokio::test]
async fn fifty_acquirers_of_a_limit_three_semaphore_get_three_permits_and_one_per_freed_permit() {
    let redis = RedisServer::start();
    let app = Arc::new(TestApp::spawn(&redis).await);
    let body = json!({"limit": 3, "ttl_ms": 30_000, "wait_ms": 30_000});
    let mut tasks: Vec<_> = (0..50)
        .map(|_| waiting(&app, "/v1/semaphores/backups/acquire".into(), body.clone()))
        .collect();

    let granted = finish(&mut tasks, 3, Duration::from_millis(500)).await;
    assert_eq!(granted.len(), 3, "exactly the limit is granted");
    let mut permits: Vec<PermitResponse> = granted
        .iter()
        .map(|reply| {
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
            reply.decode()
        })
        .collect();
    assert!(permits.iter().all(|p| p.limit == 3));
    let status = semaphore_status(&app, "backups").await;
    assert_eq!(
        (status.held, status.limit, status.available),
        (3, Some(3), Some(0))
    );
    assert!(status.holders.iter().all(|h| h.mode == "permit"));

    // One released permit wakes exactly one waiter.
    let released = permits.remove(0);
    let reply = semaphore(&app, "backups", "release", json!({"token": released.token})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let next = finish(&mut tasks, 1, Duration::from_millis(700)).await;
    assert_eq!(next.len(), 1, "one freed permit, one more grant");
    let next: PermitResponse = next[0].decode();
    assert!(permits.iter().all(|p| next.fence > p.fence), "fences grow");

    // A holder that stops renewing frees its permit at its TTL, not before.
    let stalled = permits.remove(0);
    let reply = semaphore(
        &app,
        "backups",
        "extend",
        json!({"token": stalled.token, "ttl_ms": 1_500}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let stalled_at = Instant::now();
    let early = finish(&mut tasks, 0, Duration::from_millis(1_000)).await;
    assert!(early.is_empty(), "nothing frees before the TTL");
    let after_ttl = finish(&mut tasks, 1, Duration::from_millis(500)).await;
    assert_eq!(
        after_ttl.len(),
        1,
        "the expired permit's place goes to one waiter"
    );
    assert!(stalled_at.elapsed() >= Duration::from_millis(1_400));
    assert_eq!(tasks.len(), 45, "every other acquirer still waits");
    for task in tasks {
        task.abort();
    }
}

#[tokio::test]
async fn readers_share_the_lock_and_a_waiting_writer_goes_before_newer_readers() {
    let redis = RedisServer::start();
    let app = Arc::new(TestApp::spawn(&redis).await);
    let shared = json!({"mode": "shared", "ttl_ms": 30_000});
    let readers: Vec<Reply> = {
        let tasks: Vec<_> = (0..5)
            .map(|_| waiting(&app, "/v1/locks/report/acquire".into(), shared.clone()))
            .collect();
        let mut readers = Vec::new();
        for task in tasks {
            readers.push(task.await.expect("reader task"));
        }
        readers
    };
    let mut fences = Vec::new();
    for reader in &readers {
        assert_eq!(reader.status, StatusCode::OK, "{}", reader.body);
        assert_eq!(reader.lease().mode, "shared");
        fences.push(reader.fence());
    }
    let status: StatusResponse = app.status("report").await.decode();
    assert_eq!(
        (status.mode.as_deref(), status.holder_count),
        (Some("shared"), 5)
    );

    let writer_now = app.acquire_with("report", json!({"ttl_ms": 30_000})).await;
    assert_eq!(writer_now.status, StatusCode::LOCKED);
    assert_eq!(writer_now.error().holders.map(|h| h.len()), Some(5));

    let write = json!({"ttl_ms": 30_000, "wait_ms": 30_000});
    let mut writer = vec![waiting(&app, "/v1/locks/report/acquire".into(), write)];
    tokio::time::sleep(Duration::from_millis(300)).await;
    let newer_now = app.acquire_with("report", shared.clone()).await;
    assert_eq!(
        newer_now.status,
        StatusCode::LOCKED,
        "a waiting writer is first"
    );
    let late = json!({"mode": "shared", "ttl_ms": 30_000, "wait_ms": 30_000});
    let mut newer = vec![waiting(&app, "/v1/locks/report/acquire".into(), late)];
    tokio::time::sleep(Duration::from_millis(300)).await;

    for reader in &readers {
        assert_eq!(
            app.release("report", &reader.token()).await.status,
            StatusCode::OK
        );
    }
    let written = finish(&mut writer, 1, Duration::from_millis(500)).await;
    assert_eq!(written.len(), 1);
    let written = &written[0];
    assert_eq!(written.lease().mode, "exclusive");
    assert!(fences.iter().all(|f| written.fence() > *f));
    assert!(
        finished(&mut newer).await.is_empty(),
        "the newer reader waits for the writer"
    );
    assert_eq!(
        app.release("report", &written.token()).await.status,
        StatusCode::OK
    );
    let read = finish(&mut newer, 1, Duration::ZERO).await;
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].status, StatusCode::OK);
    assert!(read[0].fence() > written.fence());
}

#[tokio::test]
async fn bad_semaphore_and_shared_requests_get_a_clear_4xx_that_changes_nothing() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let permit = semaphore(&app, "s", "acquire", json!({"limit": 2, "ttl_ms": 30_000})).await;
    assert_eq!(permit.status, StatusCode::OK, "{}", permit.body);
    let permit: PermitResponse = permit.decode();
    let reader = app
        .acquire_with("l", json!({"mode": "shared", "ttl_ms": 30_000}))
        .await;
    let reader_token = reader.token();
    let before = (
        semaphore_status(&app, "s").await,
        app.status("l").await.body,
    );

    let conflict = semaphore(&app, "s", "acquire", json!({"limit": 5})).await;
    assert_eq!(
        (conflict.status, conflict.code()),
        (StatusCode::CONFLICT, "limit_conflict")
    );
    assert_eq!(conflict.error().limit, Some(2), "names the limit in force");
    assert!(conflict.error().message.contains("\"limit\": 2"));
    for (body, what) in [
        (json!({"limit": 0}), "a limit of 0"),
        (json!({"limit": 10_001}), "a limit above the maximum"),
        (json!({"ttl_ms": 1_000}), "no limit"),
        (json!({"limit": 2, "mode": "shared"}), "a mode"),
    ] {
        let refused = semaphore(&app, "s", "acquire", body).await;
        assert_eq!(
            refused.status,
            StatusCode::BAD_REQUEST,
            "{what}: {}",
            refused.body
        );
        let field = refused.error().field;
        assert!(
            matches!(field.as_deref(), Some("limit" | "mode")),
            "{what}: {field:?}"
        );
    }
    let bogus = app.acquire_with("l", json!({"mode": "bogus"})).await;
    assert_eq!(
        (bogus.status, bogus.error().field.as_deref()),
        (StatusCode::BAD_REQUEST, Some("mode"))
    );
    let limit_on_lock = app.acquire_with("l", json!({"limit": 3})).await;
    assert_eq!(limit_on_lock.status, StatusCode::BAD_REQUEST);

    // A token sent to the other kind's routes is a caller's mistake, named.
    for (path, token) in [
        ("/v1/locks/s/extend", &permit.token),
        ("/v1/locks/s/release", &permit.token),
        ("/v1/semaphores/l/extend", &reader_token),
        ("/v1/semaphores/l/release", &reader_token),
    ] {
        let refused = app.post(path, json!({"token": token})).await;
        assert_eq!(
            refused.status,
            StatusCode::BAD_REQUEST,
            "{path}: {}",
            refused.body
        );
        assert_eq!(refused.error().field.as_deref(), Some("token"), "{path}");
        assert!(
            !refused.body.to_string().contains(token.as_str()),
            "never echoes a token"
        );
    }
    let after = (
        semaphore_status(&app, "s").await,
        app.status("l").await.body,
    );
    assert_eq!(before.0.held, after.0.held);
    assert_eq!(before.0.limit, after.0.limit);
    assert_eq!(before.0.fence, after.0.fence);
    assert_eq!(before.1["holder_count"], after.1["holder_count"]);
    assert_eq!(before.1["fence"], after.1["fence"]);
}

#[tokio::test]
async fn a_freed_permit_on_one_broker_wakes_a_waiter_on_another_and_operators_see_and_free_them() {
    let redis = RedisServer::start();
    let one = TestApp::spawn(&redis).await;
    let mut settings = test_settings(&redis);
    settings.redis.key_prefix = one.prefix.clone();
    let two = Arc::new(TestApp::spawn_with(settings).await);
    let first = semaphore(
        &one,
        "jobs:gpu",
        "acquire",
        json!({"limit": 1, "owner": "a"}),
    )
    .await;
    let first: PermitResponse = first.decode();
    let body = json!({"limit": 1, "wait_ms": 20_000, "owner": "b"});
    let mut waiter = vec![waiting(
        &two,
        "/v1/semaphores/jobs:gpu/acquire".into(),
        body,
    )];
    tokio::time::sleep(Duration::from_millis(300)).await;
    let early = finished(&mut waiter).await;
    assert!(
        early.is_empty(),
        "the waiter waits for the permit: {early:?}"
    );
    let released_at = Instant::now();
    let reply = semaphore(&one, "jobs:gpu", "release", json!({"token": first.token})).await;
    assert_eq!(reply.status, StatusCode::OK);
    let woken = finish(&mut waiter, 1, Duration::ZERO).await;
    assert_eq!(woken.len(), 1);
    assert_eq!(woken[0].status, StatusCode::OK);
    assert!(
        released_at.elapsed() < Duration::from_secs(2),
        "pushed, not polled"
    );

    let listed = one.get("/v1/semaphores?prefix=jobs:").await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
    assert_eq!(
        listed.body["semaphores"][0]["name"], "jobs:gpu",
        "{}",
        listed.body
    );
    assert_eq!(listed.body["semaphores"][0]["holders"][0]["owner"], "b");
    let locks = one.get("/v1/locks?prefix=jobs:").await;
    assert_eq!(
        locks.body["locks"],
        json!([]),
        "semaphores are apart from locks"
    );
    let forced = one
        .send(one.http.delete(one.url("/v1/semaphores/jobs:gpu")))
        .await;
    assert_eq!(forced.status, StatusCode::OK, "{}", forced.body);
    assert_eq!(forced.body["leases_ended"], 1);
    let status = semaphore_status(&one, "jobs:gpu").await;
    assert_eq!((status.held, status.limit), (0, None));
    let metrics = one.metrics().await;
    let acquired =
        r#"lockbroker_acquires_total{family="other",kind="semaphore",outcome="acquired"} 1"#;
    assert!(metrics.contains(acquired), "{metrics}");
}

/// A permit's release re-sent after its place went to the next permit still
/// reports the clean release with its own fence; an extend of that permit
/// says its holder released it.
#[tokio::test]
async fn a_permit_release_re_sent_after_the_next_grant_still_reports_the_release() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let first = semaphore(
        &app,
        "slots",
        "acquire",
        json!({"limit": 1, "ttl_ms": 10_000}),
    )
    .await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let (first_token, first_fence) = (first.body["token"].clone(), first.body["fence"].clone());
    let token = json!({"token": first_token});
    let released = semaphore(&app, "slots", "release", token.clone()).await;
    assert_eq!(released.status, StatusCode::OK, "{}", released.body);
    let next = semaphore(
        &app,
        "slots",
        "acquire",
        json!({"limit": 1, "ttl_ms": 10_000}),
    )
    .await;
    assert_eq!(
        next.status,
        StatusCode::OK,
        "the next permit: {}",
        next.body
    );
    let again = semaphore(&app, "slots", "release", token.clone()).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert_eq!(again.body["fence"], first_fence, "the first permit's fence");
    let extend = semaphore(
        &app,
        "slots",
        "extend",
        json!({"token": first_token, "ttl_ms": 10_000}),
    )
    .await;
    assert_eq!(
        (extend.status, extend.code()),
        (StatusCode::CONFLICT, "lease_lost")
    );
    let message = extend.body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("released by its holder"), "{message}");
    let status = semaphore_status(&app, "slots").await;
    assert_eq!(status.held, 1, "the next permit still holds its place");
}
