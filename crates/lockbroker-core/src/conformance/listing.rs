//! The cases of listing locks: which locks a page shows, and paging on.

use crate::listing::ListRequest;
use crate::name::LockPrefix;
use crate::store::LockStore;

use super::ask::{granted, name, release, run_id, Ask};
use super::Backend;

/// The listing pages through held locks and locks in their lock-delay under
/// a prefix, and leaves out free ones.
pub async fn listing_shows_held_and_delayed_locks_page_by_page<B: Backend>(backend: &B) {
    let store = backend.broker().await;
    let run = run_id();
    let mut held = Vec::new();
    for i in 0..5 {
        let lock = name(&run, &format!("listed-{i}"));
        granted(Ask::new(10_000).on(&store, &lock).await, "grant");
        held.push(lock);
    }
    let freed = name(&run, "listed-free");
    let ask = Ask::new(10_000);
    granted(ask.on(&store, &freed).await, "grant");
    release(&store, &freed, &ask).await;
    let mut request = ListRequest {
        prefix: LockPrefix::parse("prefix", &format!("conf-{run}-")).expect("prefix"),
        limit: crate::ListLimit::parse(2).expect("limit"),
        ..ListRequest::default()
    };
    let mut seen = Vec::new();
    for _ in 0..100 {
        let page = store.list(&request).await.expect("list");
        seen.extend(page.locks.into_iter().map(|entry| entry.name));
        match page.next_cursor {
            Some(cursor) => request.cursor = cursor,
            None => break,
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen, held, "every held lock, and only those");
}
