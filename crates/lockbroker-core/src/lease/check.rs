//! A fence check: whether a valid lease carries exactly a given fence now,
//! for a resource that keeps no state of its own (Chubby's sequencer check).

use crate::validation::ValidationError;

use super::{Fence, LockStatus};

/// The largest fence a caller can name: fences stay below 2^53 so JSON
/// readers in every language keep them exact.
const MAX_FENCE: u64 = (1 << 53) - 1;

impl Fence {
    /// Accepts a fence a caller names (a path segment): a positive decimal
    /// integer below 2^53. The error names `fence`.
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        let value = (!raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit()))
            .then(|| raw.parse::<u64>().ok())
            .flatten()
            .filter(|&value| (1..=MAX_FENCE).contains(&value));
        value.map(Self).ok_or_else(|| {
            ValidationError::new(
                "fence",
                format!("must be a positive integer of at most {MAX_FENCE}"),
            )
        })
    }
}

/// The answer to a fence check. Never a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FenceCheck {
    /// The fence asked about.
    pub fence: Fence,
    /// Whether a valid lease (exclusive, shared or permit) carries exactly
    /// that fence now. A lease in its lock-delay, released or replaced is
    /// not current.
    pub current: bool,
    /// When current: true. Otherwise whether any valid lease holds the name.
    pub held: bool,
    /// When current: how long the lease with that fence stays valid.
    /// Otherwise how long the name's current lease does (0 when free).
    pub expires_in_ms: u64,
}

impl FenceCheck {
    /// Reads the check off a status taken at one instant (one store read,
    /// or a majority's tally), so it is as fresh as that status. A status
    /// shows at most [`super::MAX_SHOWN_HOLDERS`] leases; a fence beyond
    /// them reads as not current, the answer that refuses rather than admits.
    pub fn of(status: &LockStatus, fence: Fence) -> Self {
        let lease = status
            .holders
            .iter()
            .find(|holder| holder.fence == fence && holder.expires_in_ms > 0);
        match lease {
            Some(lease) => Self {
                fence,
                current: true,
                held: true,
                expires_in_ms: lease.expires_in_ms,
            },
            _ => Self {
                fence,
                current: false,
                held: status.held,
                expires_in_ms: status.expires_in_ms,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_is_a_positive_integer_below_2_pow_53() {
        assert_eq!(Fence::parse("7").map(Fence::get), Ok(7));
        assert_eq!(
            Fence::parse("9007199254740991").map(Fence::get),
            Ok(MAX_FENCE)
        );
        for bad in ["", "0", "-1", "+1", "1.5", "abc", " 1", "9007199254740992"] {
            let error = Fence::parse(bad).expect_err(bad);
            assert_eq!(error.field, "fence", "{bad}");
        }
    }
}
