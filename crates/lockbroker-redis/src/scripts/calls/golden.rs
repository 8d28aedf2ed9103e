//! The exact `KEYS` and `ARGV` of each lock step's script call, pinned: a
//! change to a script's calling convention shows here, beside the header
//! of its `.lua` file, or fails.

use lockbroker_core::{
    AcquireParams, FairEntry, LeaseKind, LeaseToken, LockDelay, LockName, Owner, Principal,
    RequestId, Space, Ttl,
};

use super::{
    AcquireCall, ExtendCall, HoldCall, HoldExtendCall, HoldReleaseCall, ReleaseCall, StatusCall,
};
use crate::keys::KeyLayout;
use crate::scripts::{ScriptCall, ScriptContext};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

fn context(quorum_node: bool) -> ScriptContext {
    ScriptContext {
        keys: KeyLayout::new("lb"),
        fence_idle_ms: 604_800_000,
        release_memo_ms: 60_000,
        broker_id: "b1".into(),
        wake_channel: "lb:wake".into(),
        wakes_per_lock: false,
        quorum_node,
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The six arguments every acquire of [`Request`] sends, with `floor`,
/// then `optional` (the ones it gives, up to the last).
fn acquire_args(floor: &str, optional: &[&str]) -> Vec<String> {
    let always = [TOKEN, "30000", "500", "604800000", floor, "lb:wake b1 job"];
    strings(&[&always[..], optional].concat())
}

struct Request {
    name: LockName,
    token: LeaseToken,
    owner: Owner,
    request_id: RequestId,
    principal: Principal,
}

impl Request {
    fn new(space: Space) -> Self {
        Self {
            name: LockName::parse_in(space, "job").expect("name"),
            token: LeaseToken::parse(TOKEN).expect("token"),
            owner: Owner::parse("worker-1").expect("owner"),
            request_id: RequestId::parse("r-7").expect("request id"),
            principal: Principal::key("ops"),
        }
    }

    fn params<'a>(&'a self, kind: LeaseKind, fair: Option<FairEntry<'a>>) -> AcquireParams<'a> {
        AcquireParams {
            name: &self.name,
            kind,
            limit: (kind == LeaseKind::Permit).then_some(3),
            token: &self.token,
            ttl: Ttl::parse("ttl_ms", 30_000, 3_600_000).expect("ttl"),
            owner: Some(&self.owner),
            request_id: Some(&self.request_id),
            principal: &self.principal,
            lock_delay: LockDelay::parse(500, 60_000).expect("delay"),
            fair,
            waits: fair.is_some(),
        }
    }

    /// An extend of the lease to 10 seconds, with no limit on its hold.
    fn extend(&self) -> ExtendCall<'_> {
        ExtendCall {
            name: &self.name,
            token: &self.token,
            ttl: Ttl::parse("ttl_ms", 10_000, 3_600_000).expect("ttl"),
            max_hold_ms: 0,
        }
    }

    /// The lease's release by its holder.
    fn release(&self) -> ReleaseCall<'_> {
        ReleaseCall {
            name: &self.name,
            token: &self.token,
            requeue: None,
            undo: false,
        }
    }
}

static ANONYMOUS: Principal = Principal::ANONYMOUS;

/// `params` without the owner, request id and principal a request may name.
fn naming_nothing(mut params: AcquireParams<'_>) -> AcquireParams<'_> {
    (params.owner, params.request_id, params.principal) = (None, None, &ANONYMOUS);
    params
}

const FAIR: FairEntry<'static> = FairEntry {
    waiter_id: "w-1",
    always: true,
    entry_ttl_ms: 4_000,
    arrived_at_us: 1_700_000_000_000_000,
};

#[test]
fn an_exclusive_acquire_sends_the_lease_key_and_its_arguments_up_to_the_last_given() {
    let request = Request::new(Space::Lock);
    let params = request.params(LeaseKind::Exclusive, None);
    let call = AcquireCall {
        params: &params,
        fence_floor: 42,
        epoch: None,
    };
    let context = context(false);
    assert_eq!(call.keys(&context), strings(&["lb:{job}:lease"]));
    assert_eq!(
        call.args(&context),
        acquire_args("42", &["", "worker-1", "r-7", "ops"])
    );
}

#[test]
fn an_acquire_that_names_nothing_optional_sends_six_arguments() {
    let request = Request::new(Space::Lock);
    let params = naming_nothing(request.params(LeaseKind::Exclusive, None));
    let call = AcquireCall {
        params: &params,
        fence_floor: 0,
        epoch: None,
    };
    assert_eq!(call.args(&context(false)), acquire_args("0", &[]));
}

#[test]
fn a_fair_waiter_on_a_quorum_node_sends_its_arrival_and_the_nodes_epoch() {
    let request = Request::new(Space::Lock);
    let params = request.params(LeaseKind::Exclusive, Some(FAIR));
    let call = AcquireCall {
        params: &params,
        fence_floor: 0,
        epoch: Some("e-9"),
    };
    let context = context(true);
    assert_eq!(
        call.keys(&context),
        strings(&["lb:{job}:lease", "lb:horizon", "lb:epoch"])
    );
    assert_eq!(
        call.args(&context),
        acquire_args(
            "0",
            &[
                "e-9",
                "worker-1",
                "r-7",
                "ops",
                "w-1",
                "4000",
                "1700000000000000",
                "1",
                "1"
            ]
        )
    );
}

#[test]
fn a_quorum_node_is_sent_its_epoch_right_after_the_six_and_nothing_empty_after_it() {
    let request = Request::new(Space::Lock);
    let params = naming_nothing(request.params(LeaseKind::Exclusive, None));
    let call = AcquireCall {
        params: &params,
        fence_floor: 7,
        epoch: Some("e-9"),
    };
    assert_eq!(call.args(&context(true)), acquire_args("7", &["e-9"]));
}

#[test]
fn a_permit_sends_the_lease_key_every_argument_and_its_limit() {
    let request = Request::new(Space::Semaphore);
    let params = request.params(LeaseKind::Permit, None);
    let call = HoldCall(AcquireCall {
        params: &params,
        fence_floor: 0,
        epoch: None,
    });
    let context = context(false);
    assert_eq!(call.keys(&context), strings(&["lb:sem:{job}:lease"]));
    let args = call.args(&context);
    assert_eq!(
        args.len(),
        16,
        "every argument, the empty ones too, then the limit"
    );
    assert_eq!(
        args[5], "lb:wake b1 s/job",
        "the semaphore's name on the wire"
    );
    assert_eq!((args[6].as_str(), args[11].as_str()), ("", ""));
    assert_eq!((args[7].as_str(), args[15].as_str()), ("worker-1", "3"));
}

#[test]
fn extend_release_and_status_send_what_their_headers_say() {
    let request = Request::new(Space::Lock);
    let context = context(false);
    let extend = request.extend();
    assert_eq!(extend.keys(&context), strings(&["lb:{job}:lease"]));
    assert_eq!(
        extend.args(&context),
        strings(&[TOKEN, "10000", "0", "604800000"])
    );
    let quorum = self::context(true);
    assert_eq!(
        extend.keys(&quorum),
        strings(&["lb:{job}:lease", "lb:horizon"])
    );

    let release = request.release();
    assert_eq!(release.keys(&context), strings(&["lb:{job}:lease"]));
    assert_eq!(
        release.args(&context),
        strings(&[TOKEN, "60000", "lb:wake b1 job"])
    );
    let undo = ReleaseCall {
        requeue: Some(FAIR),
        undo: true,
        ..release
    };
    assert_eq!(
        undo.args(&context),
        strings(&[
            TOKEN,
            "0",
            "lb:wake b1 job",
            "w-1",
            "1700000000000000",
            "4000"
        ])
    );

    let status = StatusCall {
        name: &request.name,
    };
    assert_eq!(status.keys(&context), strings(&["lb:{job}:lease"]));
    assert!(status.args(&context).is_empty());
}

/// A quorum makes an acquire's text once and puts each node's epoch in:
/// what each node is sent must be what the call made for it alone says.
#[test]
fn the_text_made_once_for_every_node_is_each_nodes_own_with_its_epoch_in() {
    use crate::scripts::calls::{quorum_acquire_text, with_epoch};
    use crate::scripts::CallText;

    let context = context(true);
    let cases = [
        (Space::Lock, LeaseKind::Exclusive),
        (Space::Lock, LeaseKind::Shared),
        (Space::Semaphore, LeaseKind::Permit),
    ];
    for (space, kind) in cases {
        let request = Request::new(space);
        {
            for fair in [None, Some(FAIR)] {
                let params = match fair {
                    Some(_) => request.params(kind, fair),
                    None => naming_nothing(request.params(kind, None)),
                };
                let once = quorum_acquire_text(&params, 41, &context);
                for epoch in ["e-1", "a-much-longer-epoch-id"] {
                    let call = AcquireCall {
                        params: &params,
                        fence_floor: 41,
                        epoch: Some(epoch),
                    };
                    let own = match kind {
                        LeaseKind::Exclusive => CallText::of(&call, &context),
                        _ => CallText::of(&HoldCall(call), &context),
                    };
                    let node = with_epoch(&once, epoch);
                    assert_eq!(node.keys, own.keys, "{kind:?}, fair {fair:?}");
                    assert_eq!(node.args, own.args, "{kind:?}, fair {fair:?}");
                }
            }
        }
    }
}

#[test]
fn a_cluster_announces_on_the_locks_own_channel() {
    let request = Request::new(Space::Lock);
    let context = ScriptContext {
        wakes_per_lock: true,
        ..context(false)
    };
    let release = request.release();
    assert_eq!(
        release.args(&context),
        strings(&[TOKEN, "60000", "lb:{job}:wake b1 job"])
    );
}

#[test]
fn a_permits_extend_and_release_send_the_semaphores_lease_key_alone() {
    let request = Request::new(Space::Semaphore);
    let (single, quorum) = (context(false), context(true));
    let extend = HoldExtendCall(request.extend());
    assert_eq!(extend.keys(&single), strings(&["lb:sem:{job}:lease"]));
    assert_eq!(
        extend.keys(&quorum),
        strings(&["lb:sem:{job}:lease", "lb:horizon"])
    );
    let release = HoldReleaseCall(request.release());
    assert_eq!(release.keys(&single), strings(&["lb:sem:{job}:lease"]));
    assert_eq!(
        release.args(&single),
        strings(&[TOKEN, "60000", "lb:wake b1 s/job"])
    );
}
