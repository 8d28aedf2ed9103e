//! Verbatim calls: the broker's answer as it sent it, for a tool that shows
//! it (`lockctl --json`), with every field of a refusal kept.

use std::time::Duration;

use std::sync::Mutex;

use lockbroker_api::{AcquireBody, ExtendBody, ReleaseBody};
use lockbroker_client::{Family, Route, TransportKind, VerbatimError};
use lockbroker_tests::{RedisServer, TestApp};

use crate::client;

const TIMEOUT: Duration = Duration::from_secs(10);

fn acquire_body(owner: &str) -> AcquireBody {
    AcquireBody {
        ttl_ms: Some(30_000),
        owner: Some(owner.to_owned()),
        ..AcquireBody::default()
    }
}

#[tokio::test]
async fn a_success_is_the_object_sent_and_a_refusal_keeps_its_details() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);

    let route = Route::Acquire(Family::Locks, "report:job");
    let grant = client
        .send_verbatim(route, Some(&acquire_body("a")), TIMEOUT)
        .await
        .expect("granted");
    assert_eq!(grant["name"], "report:job");
    assert_eq!(grant["owner"], "a");
    let fence = grant["fence"].as_u64().expect("a fence");

    let busy = client
        .send_verbatim(route, Some(&acquire_body("b")), TIMEOUT)
        .await
        .expect_err("busy");
    let VerbatimError::Refused { status, error, .. } = &busy else {
        panic!("a refusal, not {busy:?}");
    };
    assert_eq!(*status, 423);
    assert_eq!(error["code"], "lock_busy");
    // Details the typed error has no field for are kept too.
    assert_eq!(error["owner"], "a");
    assert_eq!(error["fence"], fence);
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));

    let status = client
        .send_verbatim(
            Route::Status(Family::Locks, "report:job"),
            None::<&()>,
            TIMEOUT,
        )
        .await
        .expect("status");
    assert_eq!(status["held"], true);
    assert!(
        status.get("token").is_none(),
        "a status never shows a token"
    );

    let gone = ExtendBody::new("not-a-token", Some(1_000));
    let refused = client
        .send_verbatim(
            Route::Extend(Family::Locks, "report:job"),
            Some(&gone),
            TIMEOUT,
        )
        .await
        .expect_err("no such lease");
    assert!(
        matches!(
            &refused,
            VerbatimError::Refused {
                status: 400 | 409,
                ..
            }
        ),
        "{refused:?}"
    );
}

#[tokio::test]
async fn an_event_stream_opens_with_the_state_and_no_broker_is_a_transport_failure() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);

    let mut events = client
        .events_verbatim(Route::Events(Family::Locks, "nightly"), None)
        .await
        .expect("a stream");
    let first = tokio::time::timeout(TIMEOUT, events.next())
        .await
        .expect("in time")
        .expect("a message")
        .expect("the stream goes on");
    assert_eq!(first.event, "state");

    let nowhere = lockbroker_client::Client::new("http://127.0.0.1:1").expect("client");
    let refused = nowhere
        .send_verbatim(Route::Status(Family::Locks, "x"), None::<&()>, TIMEOUT)
        .await
        .expect_err("nothing listens on port 1");
    assert!(
        matches!(
            refused,
            VerbatimError::Transport {
                kind: TransportKind::Connect,
                tls: None,
                ..
            }
        ),
        "{refused:?}"
    );
}

#[tokio::test]
async fn an_acquire_is_asked_again_with_one_request_id_as_the_callers_rule_says() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let route = Route::Acquire(Family::Locks, "handoff");
    let held = client
        .send_verbatim(route, Some(&acquire_body("a")), TIMEOUT)
        .await
        .expect("granted");
    let token = held["token"].as_str().expect("a token").to_owned();

    // A rule that gives up: one attempt, and the refusal as sent.
    let gave_up = client
        .acquire_verbatim(
            route,
            Duration::from_secs(5),
            |_, _| acquire_body("b"),
            |_, _| None,
        )
        .await
        .expect_err("busy, and the rule gives up");
    assert!(
        matches!(&gave_up, VerbatimError::Refused { status: 423, .. }),
        "{gave_up:?}"
    );

    // A rule that asks again: granted once the holder lets go, and every
    // attempt carried the same request_id.
    let releasing = {
        let client = client.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let route = Route::Release(Family::Locks, "handoff");
            client
                .send_verbatim(route, Some(&ReleaseBody::new(&token)), TIMEOUT)
                .await
                .expect("released");
        })
    };
    let ids = Mutex::new(Vec::new());
    let body = |request_id: &str, _wait: Duration| {
        ids.lock().expect("ids").push(request_id.to_owned());
        // No wait in the broker: the rule's pauses do the waiting.
        AcquireBody {
            wait_ms: Some(0),
            request_id: Some(request_id.to_owned()),
            ..acquire_body("b")
        }
    };
    let grant = client
        .acquire_verbatim(route, Duration::from_secs(5), body, |error, attempt| {
            assert!(matches!(error, VerbatimError::Refused { status: 423, .. }));
            assert!(attempt.left <= Duration::from_secs(5));
            Some(Duration::from_millis(50))
        })
        .await
        .expect("granted after the release");
    releasing.await.expect("release task");
    assert_eq!(grant.body["owner"], "b");
    assert!(grant.received >= grant.sent);
    let ids = ids.into_inner().expect("ids");
    assert!(ids.len() > 1, "asked again: {ids:?}");
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
}
