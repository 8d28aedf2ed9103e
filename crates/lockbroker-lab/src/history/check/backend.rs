//! [`Backend`]: the store the brokers ran on, and what that lets the checker
//! read from an answer. Single mode keeps a lease on one Redis; sentinel mode
//! on whichever Redis is the primary, which a failover can replace with a
//! replica that missed the latest writes; quorum mode on a majority of
//! nodes, with expiries moved earlier by a drift allowance.

/// Redlock's drift allowance, as the brokers are configured
/// (`redis.drift_factor`, `redis.drift_ms`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Drift {
    /// A share of the TTL.
    pub factor: f64,
    /// A constant, ms.
    pub ms: u64,
}

impl Default for Drift {
    fn default() -> Self {
        Self::BROKER_DEFAULT
    }
}

impl Drift {
    /// The broker's defaults: 1% of the TTL and 2 ms.
    pub const BROKER_DEFAULT: Self = Self {
        factor: 0.01,
        ms: 2,
    };

    /// What the broker takes off a lease of `ttl_ms`: ⌈ttl × factor⌉ + ms.
    pub fn allowance(&self, ttl_ms: u64) -> u64 {
        (ttl_ms as f64 * self.factor).ceil() as u64 + self.ms
    }
}

/// Which store answered, and so which promises the checker holds it to.
#[derive(Clone, Debug, Default)]
pub enum Backend {
    /// One Redis: every reported instant is that Redis's clock, exactly.
    #[default]
    Single,
    /// Quorum mode over several nodes.
    Quorum {
        /// The allowance the brokers take off every expiry. Taking it larger
        /// than the brokers do only widens the clock-offset bounds.
        drift: Drift,
        /// Local µs at which a node was killed to come back empty, or `None`
        /// when nobody knows (a run against brokers the checker did not
        /// start): then any node may have restarted at any time.
        restarts: Option<Vec<i64>>,
    },
    /// Sentinel mode: one primary at a time. A failover may lose the leases,
    /// extends and releases the old primary acknowledged last, so the rules
    /// of exclusivity and of acknowledged steps do not span one; fences must
    /// still grow across it.
    Sentinel {
        /// Local µs at which the primary was killed, or `None` when nobody
        /// knows (a run against brokers the checker did not start): then a
        /// failover may have happened at any time.
        failovers: Option<Vec<i64>>,
    },
}

impl Backend {
    /// Quorum mode with the brokers' default drift and no node restarts.
    pub fn quorum() -> Self {
        Self::Quorum {
            drift: Drift::default(),
            restarts: Some(Vec::new()),
        }
    }

    /// Whether leases live on a majority of nodes.
    pub fn is_quorum(&self) -> bool {
        matches!(self, Self::Quorum { .. })
    }

    /// The Redis instant (ms, floor) a node ran the grant or extend that an
    /// answer reports. One Redis answers `expires_at = now + ttl`. A quorum
    /// answer carries the requested `ttl` and the earliest node's expiry less
    /// the allowance, so that node ran at `expires_at - ttl + allowance`:
    /// inside the request's window, like single mode's instant.
    pub(super) fn node_instant(&self, ttl_ms: u64, expires_at_ms: u64) -> f64 {
        let allowance = match self {
            Self::Single | Self::Sentinel { .. } => 0,
            Self::Quorum { drift, .. } => drift.allowance(ttl_ms),
        };
        (expires_at_ms + allowance) as f64 - ttl_ms as f64
    }

    /// Whether a node may have restarted empty, or the primary failed over,
    /// between the local instants `from_us` and `to_us`: a lease may then
    /// be lost before its expiry.
    pub(super) fn restarted_between(&self, from_us: i64, to_us: i64) -> bool {
        match self {
            Self::Single => false,
            Self::Quorum { restarts, .. } => happened_between(restarts.as_deref(), from_us, to_us),
            Self::Sentinel { failovers } => happened_between(failovers.as_deref(), from_us, to_us),
        }
    }

    /// Whether a step the broker gave up on may still run on Redis long
    /// after its answer: in sentinel mode the Redis client sends the
    /// commands of a dropped connection again to the new primary, seconds
    /// later. Elsewhere a step's commands run before its answer, or within
    /// a node's timeout of it.
    pub(super) fn may_run_steps_late(&self) -> bool {
        matches!(self, Self::Sentinel { .. })
    }

    /// Whether the primary may have failed over between the local instants
    /// `from_us` and `to_us` (sentinel mode): what the old primary
    /// acknowledged, a grant or a release, may then be undone.
    pub(super) fn failed_over_between(&self, from_us: i64, to_us: i64) -> bool {
        match self {
            Self::Sentinel { failovers } => happened_between(failovers.as_deref(), from_us, to_us),
            Self::Single | Self::Quorum { .. } => false,
        }
    }
}

/// Whether any of `instants` lies in `from_us..=to_us`; when they are
/// unknown (`None`), any instant may.
fn happened_between(instants: Option<&[i64]>, from_us: i64, to_us: i64) -> bool {
    instants.is_none_or(|at| at.iter().any(|t| (from_us..=to_us).contains(t)))
}
