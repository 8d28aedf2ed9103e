//! Event streams: changes in order, a resume after a cut connection that
//! misses nothing (`Last-Event-ID`), and a stream that goes on after the
//! broker restarts.

use std::time::Duration;

use futures_util::StreamExt;
use lockbroker_client::{ChangeKind, Client, Event, EventKind, Watch, WatchOptions};
use lockbroker_tests::app::test_settings;
use lockbroker_tests::proxy::Proxy;
use lockbroker_tests::{RedisServer, TestApp};

use crate::{client, with_ttl};

const TTL: Duration = Duration::from_secs(30);

async fn next(events: &mut Watch) -> Event {
    tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("an event in time")
        .expect("the stream goes on")
        .expect("an event, not an error")
}

fn change(event: &Event) -> (ChangeKind, u64) {
    match &event.kind {
        EventKind::Change(change) => (change.kind, change.fence),
        other => panic!("a change, not {other:?}"),
    }
}

#[tokio::test]
async fn changes_arrive_in_order_after_the_opening_state() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let mut events = client.watch("nightly");
    let EventKind::State(state) = next(&mut events).await.kind else {
        panic!("a state first");
    };
    assert!(!state.held);

    let lease = client
        .lock("nightly")
        .acquire(with_ttl(TTL, "w"))
        .await
        .expect("granted");
    let fence = lease.fence();
    lease.extend(TTL).await.expect("extended");
    lease.release().await.expect("released");
    let kinds: Vec<_> = [
        next(&mut events).await,
        next(&mut events).await,
        next(&mut events).await,
    ]
    .iter()
    .map(change)
    .collect();
    assert_eq!(
        kinds,
        [
            (ChangeKind::Acquired, fence),
            (ChangeKind::Extended, fence),
            (ChangeKind::Released, fence)
        ]
    );
    assert!(events.last_event_id().is_some());
}

#[tokio::test]
async fn a_prefix_watch_lists_the_held_locks_then_follows_new_ones() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let held = client
        .lock("billing:1")
        .acquire(with_ttl(TTL, "w"))
        .await
        .expect("granted");
    let _other = client
        .lock("payroll")
        .acquire(with_ttl(TTL, "w"))
        .await
        .expect("granted");

    let mut events = client.watch_prefix("billing:", WatchOptions::default());
    let EventKind::State(state) = next(&mut events).await.kind else {
        panic!("one state per held lock under the prefix");
    };
    assert_eq!(
        (state.name.as_str(), state.fence),
        ("billing:1", Some(held.fence()))
    );
    let EventKind::StateComplete { prefix } = next(&mut events).await.kind else {
        panic!("then the marker that ends the list");
    };
    assert_eq!(prefix, "billing:");
    let taken = client
        .lock("billing:2")
        .acquire(with_ttl(TTL, "w"))
        .await
        .expect("granted");
    let EventKind::Change(change) = next(&mut events).await.kind else {
        panic!("a change to a lock taken after the stream opened");
    };
    assert_eq!(
        (change.name.as_str(), change.fence),
        ("billing:2", taken.fence())
    );
}

#[tokio::test]
async fn a_cut_stream_resumes_after_its_last_event_and_misses_nothing() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let port = app
        .base
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let proxy = Proxy::start(port).await;
    let through_proxy = Client::new(format!("http://127.0.0.1:{}", proxy.port())).expect("client");
    let direct = client(&app);

    let mut events = through_proxy.watch("resumed");
    assert!(matches!(next(&mut events).await.kind, EventKind::State(_)));
    let lease = direct
        .lock("resumed")
        .acquire(with_ttl(TTL, "w"))
        .await
        .expect("granted");
    assert_eq!(change(&next(&mut events).await).0, ChangeKind::Acquired);

    // Changes made while the watcher is cut off come after the resume, in
    // order, with no fresh state in their place.
    proxy.cut();
    lease.extend(TTL).await.expect("extended");
    let fence = lease.fence();
    lease.release().await.expect("released");
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.restore();
    assert_eq!(
        change(&next(&mut events).await),
        (ChangeKind::Extended, fence)
    );
    assert_eq!(
        change(&next(&mut events).await),
        (ChangeKind::Released, fence)
    );
}

#[tokio::test]
async fn a_watch_goes_on_after_the_broker_restarts() {
    let redis = RedisServer::start();
    let settings = test_settings(&redis);
    let mut app = TestApp::spawn_with(settings.clone()).await;
    let client = client(&app);
    let mut events = client.watch("restarted");
    assert!(matches!(next(&mut events).await.kind, EventKind::State(_)));
    let lease = client
        .lock("restarted")
        .acquire(with_ttl(TTL, "w"))
        .await
        .expect("granted");
    let acquired = next(&mut events).await;
    assert_eq!(change(&acquired), (ChangeKind::Acquired, lease.fence()));

    // The same address and Redis keys, a new process: its event ids are not
    // the old one's, so the resume opens with a fresh state.
    let mut again = settings;
    again.listen = app
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("address");
    app.shutdown().await.expect("clean shutdown");
    let _app = TestApp::spawn_with(again).await;
    let EventKind::State(state) = next(&mut events).await.kind else {
        panic!("a fresh state after the restart");
    };
    assert!(state.held, "{state:?}");
    assert_eq!(state.fence, Some(lease.fence()));
    let fence = lease.fence();
    lease
        .release()
        .await
        .expect("released through the new broker");
    assert_eq!(
        change(&next(&mut events).await),
        (ChangeKind::Released, fence)
    );
    assert_ne!(events.last_event_id(), acquired.id);
}
