//! Several locks at once: [`Client::acquire_all`] takes a lease on every lock
//! named or on none, in one request; [`Client::release_all`] gives several
//! leases back in one.
//!
//! Each lease granted is an ordinary [`Lease`] with its own token and fence,
//! extended, renewed and released on its own or with the others. The request
//! follows the retry rule of a single acquire (see [`crate::lock`]).

use futures_util::future::try_join_all;
use lockbroker_api::{
    AcquireAllBody, AcquireAllResponse, ErrorCode, LeaseRefBody, LeaseResponse, LockAskBody,
    LockMode, ReleaseAllBody, ReleaseAllResponse, ReleaseAllResult,
};
use reqwest::Method;

use crate::client::{Client, Family};
use crate::error::Error;
use crate::lease::{Lease, Released, Shared};
use crate::lock::{attempts, lease_grant, millis, owner, resync, start, AcquireOptions};

pub(crate) const ACQUIRE_ALL: &str = "/v1/locks/acquire-all";
const RELEASE_ALL: &str = "/v1/locks/release-all";

/// One lock of [`Client::acquire_all`]: its name, and the kind of lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockAsk {
    /// The lock's name.
    pub name: String,
    /// Exclusive or shared.
    pub mode: LockMode,
}

impl LockAsk {
    /// An exclusive lease on `name`.
    pub fn exclusive(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            mode: LockMode::Exclusive,
        }
    }

    /// A shared lease on `name`.
    pub fn shared(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            mode: LockMode::Shared,
        }
    }
}

impl Client {
    /// `POST /v1/locks/acquire-all`: a lease on every lock of `locks`, or
    /// none, in the order asked; asked again until granted or `options.wait`
    /// is over, and the broker holds none of them while it waits. A busy
    /// answer names the lock in [`Error::Busy`]'s `lock`.
    ///
    /// `options` apply to every lease, except `mode` (each [`LockAsk`] has
    /// its own) and `fair` (the broker has no fair queue over several
    /// locks). Each name at most once: the broker would answer one lease at
    /// both places, which two [`Lease`]s cannot both own, so a name given
    /// twice is [`Error::Validation`] without asking. No locks answer no
    /// leases. The leases are not renewed: see [`Client::lock_all`].
    pub async fn acquire_all(
        &self,
        locks: &[LockAsk],
        options: AcquireOptions,
    ) -> Result<Vec<Lease>, Error> {
        if locks.is_empty() {
            return Ok(Vec::new());
        }
        let asks = ask_bodies(locks)?;
        let (granted, timing) = attempts(self, ACQUIRE_ALL, &options, |o, id, wait| {
            serde_json::to_value(AcquireAllBody {
                session: None,
                locks: Some(asks.clone()),
                ttl_ms: Some(millis(o.ttl)),
                wait_ms: Some(millis(wait)),
                owner: Some(owner(o)),
                request_id: Some(id.to_owned()),
                lock_delay_ms: o.lock_delay.map(millis),
            })
        })
        .await?;
        let AcquireAllResponse { leases: granted } = granted;
        let as_asked = answered_as_asked(&granted, locks);
        // Every grant becomes a lease first, so that any of them given up
        // below is released on drop instead of held until it expires.
        let leases: Vec<Lease> = (granted.into_iter().zip(locks))
            .map(|(lease, ask)| {
                let grant = lease_grant(lease, ask.mode);
                start(self, Family::Locks, grant, &options, timing)
            })
            .collect();
        if !as_asked {
            return Err(not_as_asked());
        }
        try_join_all(
            leases
                .into_iter()
                .map(|lease| resync(lease, &options, timing)),
        )
        .await
    }

    /// [`Client::acquire_all`], then [`Lease::keep_alive`] on each lease:
    /// all of them are renewed in the background until released, lost, or
    /// `max_hold`.
    pub async fn lock_all(
        &self,
        locks: &[LockAsk],
        options: AcquireOptions,
    ) -> Result<Vec<Lease>, Error> {
        let leases = self.acquire_all(locks, options).await?;
        for lease in &leases {
            lease.keep_alive();
        }
        Ok(leases)
    }

    /// `POST /v1/locks/release-all`: gives back every lease of `leases` (lock
    /// leases of this client's broker) in one request, and answers what
    /// became of each, in the order given, as its own [`Lease::release`]
    /// would: `Released` (with no `acknowledged`: the route does not say),
    /// or [`Error::LeaseLost`] for a lease the broker no longer had. Each
    /// lease ends as after its own release: renewing stops, and it reads
    /// released, or lost when the broker says so. A lease the broker had
    /// already called lost is not asked about again.
    ///
    /// `Err` when the request as a whole failed (no answer, or a refusal
    /// such as a semaphore permit among the leases): every lease asked about
    /// then ends as after its own release failing the same way, released
    /// here and left to run out unrenewed at the broker.
    pub async fn release_all(
        &self,
        leases: &[Lease],
    ) -> Result<Vec<Result<Released, Error>>, Error> {
        let mut results: Vec<Option<Result<Released, Error>>> = leases
            .iter()
            .map(|lease| lease.shared.stop_renewing())
            .collect();
        let asked: Vec<&Shared> = (leases.iter().zip(&results))
            .filter(|(_, result)| result.is_none())
            .map(|(lease, _)| &*lease.shared)
            .collect();
        if !asked.is_empty() {
            let body = ReleaseAllBody {
                leases: Some(
                    (asked.iter())
                        .map(|shared| LeaseRefBody {
                            name: Some(shared.name.clone()),
                            token: Some(shared.token.clone()),
                        })
                        .collect(),
                ),
            };
            let answer = (self.call::<ReleaseAllResponse>(
                Method::POST,
                RELEASE_ALL,
                Some(&body),
                self.inner.timeout,
            ))
            .await
            .and_then(|answer| {
                let as_asked = answer.results.len() == asked.len()
                    && (answer.results.iter().zip(&asked)).all(|(r, s)| r.name == s.name);
                as_asked
                    .then_some(answer.results)
                    .ok_or_else(|| Error::Protocol {
                        message: "release-all answered other leases than asked for".to_owned(),
                    })
            });
            let answers = match answer {
                Ok(answers) => answers,
                Err(error) => {
                    for shared in asked {
                        let _ = shared.settle(Err(error.clone()));
                    }
                    return Err(error);
                }
            };
            let mut answers = asked.into_iter().zip(answers);
            for result in results.iter_mut().filter(|result| result.is_none()) {
                if let Some((shared, answer)) = answers.next() {
                    *result = Some(shared.settle(one_result(shared, answer)));
                }
            }
        }
        Ok(results.into_iter().flatten().collect())
    }
}

/// The body's locks for `locks`, each name at most once: the broker would
/// answer one lease at both places, which two [`Lease`]s cannot both own, so
/// a name given twice is [`Error::Validation`] without asking.
pub(crate) fn ask_bodies(locks: &[LockAsk]) -> Result<Vec<LockAskBody>, Error> {
    if let Some(twice) = (1..locks.len()).find(|&i| {
        let name = &locks[i].name;
        locks[..i].iter().any(|earlier| earlier.name == *name)
    }) {
        return Err(Error::Validation {
            code: ErrorCode::InvalidRequest,
            field: Some(format!("locks[{twice}].name")),
            message: format!("lock {:?} is named twice", locks[twice].name),
        });
    }
    Ok((locks.iter())
        .map(|ask| LockAskBody {
            name: Some(ask.name.clone()),
            // An exclusive lease is the broker's default: no mode.
            mode: (ask.mode == LockMode::Shared).then_some(LockMode::Shared),
        })
        .collect())
}

/// Whether an acquire-all answered a lease on each lock asked, in order.
pub(crate) fn answered_as_asked(granted: &[LeaseResponse], locks: &[LockAsk]) -> bool {
    granted.len() == locks.len()
        && (granted.iter().zip(locks)).all(|(lease, ask)| lease.name == ask.name)
}

/// An acquire-all that answered other locks than it asked for.
pub(crate) fn not_as_asked() -> Error {
    Error::Protocol {
        message: "acquire-all answered other locks than asked for".to_owned(),
    }
}

/// The first of `leases` to end (lost, run out, at its maximum hold, or
/// released), once one does: for holding several leases as one, select on
/// it beside the work they guard. Never completes for no leases.
///
/// ```no_run
/// # use lockbroker_client::{AcquireOptions, Client, Error, LockAsk};
/// # async fn transfer(_: &[lockbroker_client::Lease]) {}
/// # async fn run(client: Client) -> Result<(), Error> {
/// let asks = [LockAsk::exclusive("account:42"), LockAsk::exclusive("account:17")];
/// let leases = client.lock_all(&asks, AcquireOptions::default()).await?;
/// tokio::select! {
///     () = transfer(&leases) => {
///         client.release_all(&leases).await?;
///     }
///     lost = lockbroker_client::first_lost(&leases) => {
///         eprintln!("{} ended mid-transfer: {:?}", lost.name(), lost.lost_reason());
///     }
/// }
/// # Ok(())
/// # }
/// ```
pub async fn first_lost(leases: &[Lease]) -> &Lease {
    if leases.is_empty() {
        return std::future::pending().await;
    }
    let ends = leases.iter().map(|lease| Box::pin(lease.lost()));
    let ((), first, _) = futures_util::future::select_all(ends).await;
    &leases[first]
}

/// One lease's result in a release-all answer.
fn one_result(shared: &Shared, result: ReleaseAllResult) -> Result<Released, Error> {
    match result {
        ReleaseAllResult {
            released: true,
            fence,
            ..
        } => Ok(Released {
            // The same token, the same fence.
            fence: fence.unwrap_or(shared.fence),
            acknowledged: None,
        }),
        ReleaseAllResult {
            error: Some(error), ..
        } => Err(Error::from_detail(error, None)),
        ReleaseAllResult { name, .. } => Err(Error::Protocol {
            message: format!("release-all said lock {name:?} was not released, without why"),
        }),
    }
}
