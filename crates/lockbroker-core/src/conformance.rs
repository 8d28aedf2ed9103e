//! The store conformance suite: one set of tests of the [`LockStore`] contract
//! that every backend runs (feature `testing`).
//!
//! A backend's test crate implements [`Backend`] and expands
//! [`store_conformance!`](crate::store_conformance) once, which writes one
//! `#[tokio::test]` per case. Every case takes fresh brokers and lock names of
//! its own, so cases may share one backend process.
//!
//! The cases live in sibling modules by topic (one lease's life, waiting,
//! listing, many holders, sessions); the macro's list is the one place that says
//! which of them every backend runs.

use std::future::Future;

mod ask;
mod fencing;
mod forced;
mod holders;
mod leases;
mod listing;
mod sessions;
mod together;
mod waiting;

pub use fencing::*;
pub use forced::*;
pub use holders::*;
pub use leases::*;
pub use listing::*;
pub use sessions::*;
pub use together::*;
pub use waiting::*;

use crate::name::LockName;
use crate::store::LockStore;

/// A backend under test: brokers on one shared store, and a way to make the
/// store lose its data.
pub trait Backend: Send + Sync {
    /// The store each broker uses.
    type Store: LockStore;

    /// A new broker (its own connections, fence floor and announcements) on
    /// the shared backend.
    fn broker(&self) -> impl Future<Output = Self::Store> + Send;

    /// Forgets every lock and fence, as a restart without persistence does.
    fn lose_data(&self) -> impl Future<Output = ()> + Send;

    /// Records `fence` as the last fence issued for `name`, directly in the
    /// backend, as a server whose clock ran ahead (the primary a failover
    /// left behind) leaves it. Fences above the clock are what only the
    /// store's counter, and after a data loss only the brokers' floors, keep
    /// growing: a case that starts there fails when either is missing.
    fn put_last_fence(&self, name: &LockName, fence: u64) -> impl Future<Output = ()> + Send;
}

/// Writes one `#[tokio::test]` per conformance case, each running against
/// the backend that `$backend` (an expression, awaited inside the test when
/// it is a future) builds.
#[macro_export]
macro_rules! store_conformance {
    ($backend:expr) => {
        $crate::store_conformance!(@cases $backend;
            a_grant_excludes_everyone_else,
            fences_grow_across_grants_and_data_loss,
            retries_get_the_same_lease_only_from_the_same_principal,
            an_expired_lease_frees_the_lock_and_its_token_is_lost,
            lock_delay_keeps_an_expired_lock_unavailable,
            a_release_frees_at_once_and_is_remembered,
            a_release_is_remembered_across_the_next_grants,
            extends_replace_the_ttl_up_to_the_max_hold,
            force_release_ends_the_lease_for_its_holder,
            a_force_released_holder_learns_who_ended_its_lease,
            status_reports_the_holder_and_the_last_fence,
            a_fence_is_current_only_while_its_lease_is_valid,
            shared_and_permit_fences_are_current_one_by_one,
            fair_waiters_are_served_in_arrival_order,
            a_fair_waiter_that_leaves_passes_the_turn_on,
            releases_are_announced_to_every_broker,
            a_release_nobody_waits_for_is_not_announced,
            listing_shows_held_and_delayed_locks_page_by_page,
            shared_leases_coexist_and_exclude_an_exclusive_one,
            a_waiting_writer_is_not_passed_by_newer_readers,
            a_semaphore_grants_up_to_its_limit,
            a_semaphore_keeps_its_limit_while_permits_are_held,
            permits_expire_extend_and_retry_like_leases,
            freed_places_are_announced_and_force_release_ends_them_all,
            a_place_release_is_remembered_across_the_next_grants,
            listing_shows_semaphores_apart_from_locks,
            a_session_record_takes_leases_only_while_its_lease_is_valid,
            an_expired_session_takes_no_lease_and_keeps_its_record,
            a_set_of_leases_is_granted_whole_or_not_at_all
        );
    };
    (@cases $backend:expr; $($case:ident),*) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend;
                $crate::conformance::$case(&backend).await;
            }
        )*
    };
}
