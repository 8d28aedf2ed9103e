//! The bodies of lockctl's acquires: what each kind of lease asks the
//! broker for, and what it leaves out so that older brokers still accept it.
//! A lease under a session sends the session's token instead of a TTL and
//! lock-delay of its own.

use std::time::Duration;

use lockbroker_api::{
    AcquireAllBody, AcquireBody, LockAskBody, LockMode, Secret, SemaphoreAcquireBody,
};

use super::{AcquireOptions, LeaseKind};
use crate::duration::millis;

/// The acquire body of a lock lease: `"mode": "shared"` for a shared lease,
/// and no `mode` for an exclusive one (the broker's default), so it still
/// reaches a broker from before shared locks, whose request types refuse
/// fields they do not know.
pub(super) fn lock_body(
    options: &AcquireOptions,
    request_id: String,
    wait: Duration,
) -> AcquireBody {
    let (ttl_ms, lock_delay_ms, session) = terms(options);
    AcquireBody {
        ttl_ms,
        wait_ms: Some(millis(wait)),
        owner: options.owner.clone(),
        request_id: Some(request_id),
        lock_delay_ms,
        fair: options.fair.then_some(true),
        session,
        mode: (options.kind == LeaseKind::Shared).then_some(LockMode::Shared),
    }
}

/// The acquire body of a semaphore permit among at most `limit`.
pub(super) fn permit_body(
    options: &AcquireOptions,
    limit: u64,
    request_id: String,
    wait: Duration,
) -> SemaphoreAcquireBody {
    let (ttl_ms, lock_delay_ms, session) = terms(options);
    SemaphoreAcquireBody {
        limit: Some(limit),
        ttl_ms,
        wait_ms: Some(millis(wait)),
        owner: options.owner.clone(),
        request_id: Some(request_id),
        lock_delay_ms,
        fair: options.fair.then_some(true),
        session,
    }
}

/// The acquire-all body: every lock of `names` in the mode of `options`
/// (no `mode` for an exclusive lease, the broker's default), and the other
/// fields as a single acquire sends them. It has no `fair`: `run` refuses
/// `--fair` with several locks.
pub(super) fn acquire_all_body(
    names: &[String],
    options: &AcquireOptions,
    request_id: String,
    wait: Duration,
) -> AcquireAllBody {
    let mode = (options.kind == LeaseKind::Shared).then_some(LockMode::Shared);
    let (ttl_ms, lock_delay_ms, session) = terms(options);
    AcquireAllBody {
        locks: Some(
            names
                .iter()
                .map(|name| LockAskBody {
                    name: Some(name.clone()),
                    mode,
                })
                .collect(),
        ),
        ttl_ms,
        wait_ms: Some(millis(wait)),
        owner: options.owner.clone(),
        request_id: Some(request_id),
        lock_delay_ms,
        session,
    }
}

/// The lease's `ttl_ms`, `lock_delay_ms` and `session`: its own TTL and
/// lock-delay, or under a session only the session's token (the broker
/// refuses either beside it).
fn terms(options: &AcquireOptions) -> (Option<u64>, Option<u64>, Option<Secret>) {
    match &options.session {
        Some(session) => (None, None, Some(session.clone())),
        None => (
            Some(millis(options.ttl)),
            options.lock_delay.map(millis),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde::Serialize;
    use serde_json::Value;

    use super::*;

    fn options(kind: LeaseKind) -> AcquireOptions {
        AcquireOptions {
            kind,
            ttl: Duration::from_secs(30),
            wait: Duration::ZERO,
            owner: Some("host:1".to_owned()),
            lock_delay: None,
            fair: false,
            session: None,
        }
    }

    fn json(body: impl Serialize) -> Value {
        serde_json::to_value(body).expect("a body serializes")
    }

    #[test]
    fn only_shared_and_permit_acquires_add_a_field() {
        let id = || "r1".to_owned();
        let exclusive = json(lock_body(
            &options(LeaseKind::Exclusive),
            id(),
            Duration::ZERO,
        ));
        assert_eq!(exclusive["ttl_ms"], 30_000);
        assert_eq!(exclusive["owner"], "host:1");
        assert!(exclusive.get("mode").is_none(), "{exclusive}");
        assert!(exclusive.get("limit").is_none(), "{exclusive}");

        let shared = json(lock_body(&options(LeaseKind::Shared), id(), Duration::ZERO));
        assert_eq!(shared["mode"], "shared");
        assert!(shared.get("limit").is_none(), "{shared}");

        let wait = Duration::from_millis(1500);
        let permit = options(LeaseKind::Permit { limit: 3 });
        let permit = json(permit_body(&permit, 3, id(), wait));
        assert_eq!(permit["limit"], 3);
        assert_eq!(permit["wait_ms"], 1500);
        assert_eq!(permit["request_id"], "r1");
        assert!(permit.get("mode").is_none(), "{permit}");
    }

    #[test]
    fn an_acquire_all_asks_for_every_lock_in_the_mode_of_the_run() {
        let names = ["ledger:a".to_owned(), "ledger:b".to_owned()];
        let id = || "r1".to_owned();
        let exclusive = options(LeaseKind::Exclusive);
        let body = json(acquire_all_body(&names, &exclusive, id(), Duration::ZERO));
        assert_eq!(body["locks"][0]["name"], "ledger:a");
        assert_eq!(body["locks"][1]["name"], "ledger:b");
        assert!(body["locks"][0].get("mode").is_none(), "{body}");
        assert_eq!(body["ttl_ms"], 30_000);
        assert_eq!(body["request_id"], "r1");
        assert_eq!(body["owner"], "host:1");
        assert!(body.get("fair").is_none(), "{body}");

        let shared = options(LeaseKind::Shared);
        let shared = json(acquire_all_body(&names, &shared, id(), Duration::ZERO));
        assert_eq!(shared["locks"][1]["mode"], "shared");
    }

    #[test]
    fn under_a_session_the_token_replaces_the_ttl_and_lock_delay() {
        let names = ["ledger:a".to_owned(), "ledger:b".to_owned()];
        let token = "0123456789abcdef.0123456789abcdef0123456789abcdef";
        let under = AcquireOptions {
            lock_delay: Some(Duration::from_secs(1)),
            session: Some(Secret(token.to_owned())),
            ..options(LeaseKind::Exclusive)
        };
        let body = json(acquire_all_body(
            &names,
            &under,
            "r1".to_owned(),
            Duration::ZERO,
        ));
        assert_eq!(body["session"], token);
        assert!(body.get("ttl_ms").is_none(), "{body}");
        assert!(body.get("lock_delay_ms").is_none(), "{body}");
        assert_eq!(body["owner"], "host:1");
        assert!(!format!("{under:?}").contains(token), "{under:?}");
        let alone = json(acquire_all_body(
            &names,
            &options(LeaseKind::Exclusive),
            "r1".to_owned(),
            Duration::ZERO,
        ));
        assert!(alone.get("session").is_none(), "{alone}");
    }
}
