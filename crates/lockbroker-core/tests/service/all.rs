//! `acquire_all` on the in-memory store: every lock or none, waiting while
//! holding nothing, and a bad request refused before anything is taken.

use std::sync::Arc;
use std::time::Duration;

use lockbroker_core::memory::MemoryStore;
use lockbroker_core::{AcquireAllError, LeaseKind, LockAsk, LockError, LockName};
use tokio::time::sleep;

use super::{ask, held, hold, name, service};

fn all_of(names: &[&str]) -> Vec<LockAsk> {
    names
        .iter()
        .map(|n| LockAsk {
            name: name(n),
            kind: LeaseKind::Exclusive,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn acquire_all_takes_every_lock_or_none_and_waits_holding_nothing() {
    let service = service(MemoryStore::new());
    let (a, b) = (name("all-a"), name("all-b"));
    let holder = hold(&service, &b, 10_000).await;

    // Without a wait: busy on b, and a is given back.
    let refused = service
        .acquire_all(&all_of(&["all-b", "all-a"]), ask(10_000, 0))
        .await;
    let Err(refused) = refused else {
        panic!("granted while b is held")
    };
    assert_eq!(refused.name.as_ref(), Some(&b));
    assert!(
        matches!(refused.error, LockError::Busy(_)),
        "{:?}",
        refused.error
    );
    assert!(!held(&service, &a).await, "a was given back");

    // With a wait: a is free while it waits for b alone.
    let waiter = {
        let service = Arc::clone(&service);
        tokio::spawn(async move {
            let grants = service
                .acquire_all(&all_of(&["all-b", "all-a"]), ask(10_000, 5_000))
                .await
                .map_err(|e| e.error)?;
            let names: Vec<LockName> = grants.iter().map(|g| g.lease().name.clone()).collect();
            grants
                .into_iter()
                .for_each(lockbroker_core::Grant::delivered);
            Ok::<_, LockError>(names)
        })
    };
    sleep(Duration::from_millis(100)).await;
    assert!(!held(&service, &a).await, "a is held while waiting for b");
    service.release(&b, &holder).await.expect("released");
    let names = waiter.await.expect("waiter").expect("granted");
    assert_eq!(names, vec![b.clone(), a.clone()], "in the order asked");
    assert!(held(&service, &a).await && held(&service, &b).await);
}

#[tokio::test(start_paused = true)]
async fn acquire_all_refuses_a_bad_request_before_taking_anything() {
    let service = service(MemoryStore::new());
    let twice = service
        .acquire_all(&all_of(&["t-a", "t-a"]), ask(1_000, 0))
        .await;
    assert!(matches!(
        twice,
        Err(AcquireAllError {
            name: None,
            error: LockError::Invalid(_)
        })
    ));
    let bad_ttl = service.acquire_all(&all_of(&["t-b"]), ask(0, 0)).await;
    assert!(matches!(
        bad_ttl,
        Err(AcquireAllError {
            name: None,
            error: LockError::Invalid(_)
        })
    ));
    let none = service.acquire_all(&[], ask(1_000, 0)).await;
    assert!(none.is_err());
    assert!(!held(&service, &name("t-a")).await && !held(&service, &name("t-b")).await);
}
