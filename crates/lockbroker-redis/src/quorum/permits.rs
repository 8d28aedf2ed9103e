//! Quorum mode: how many nodes a semaphore's permit needs, so that no more
//! permits than the limit are ever valid together.

use lockbroker_core::ExtendOutcome;

use super::fan_out::Answers;

/// How many of `nodes` must hold each permit of a semaphore with `limit` so
/// that no more than `limit` permits are ever valid together.
pub(super) fn permit_quorum(limit: u32, nodes: usize) -> usize {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    (limit.saturating_mul(nodes) / limit.saturating_add(1) + 1).min(nodes)
}

/// The highest semaphore limit that the nodes which extended a permit
/// report: how many of them it needs.
pub(super) fn extended_limit(answers: &Answers<ExtendOutcome>) -> Option<u32> {
    (answers.iter().flatten().flatten())
        .filter_map(|answer| match answer {
            ExtendOutcome::Extended(renewal) => renewal.limit,
            _ => None,
        })
        .max()
}

#[cfg(test)]
mod tests {
    use super::permit_quorum;

    #[test]
    fn a_permit_needs_enough_nodes_that_limit_plus_one_permits_must_meet() {
        // (limit, nodes, needed)
        for (limit, nodes, needed) in [
            (1, 3, 2),
            (2, 3, 3),
            (10, 3, 3),
            (1, 5, 3),
            (2, 5, 4),
            (3, 5, 4),
            (4, 5, 5),
            (10_000, 5, 5),
        ] {
            let q = permit_quorum(limit, nodes);
            assert_eq!(q, needed, "limit {limit} on {nodes} nodes");
            // limit + 1 permits on q nodes each overfill some node.
            assert!((limit as usize + 1) * q > limit as usize * nodes);
        }
    }
}
