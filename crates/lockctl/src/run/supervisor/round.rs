//! One round of renewals over several leases: which answer counts.

use serde_json::Value;

use crate::client::BrokerError;

/// The answer that counts among a round's, each with its lock: a lost lease
/// first (the command must stop), then the broker's max hold with the least
/// time left, then any other failure; if every renewal succeeded, a success
/// carrying the shortest TTL granted, about the first lock.
pub(super) fn what_counts(
    answers: Vec<(String, Result<Value, BrokerError>)>,
) -> (String, Result<Value, BrokerError>) {
    let rank = |result: &Result<Value, BrokerError>| match result {
        Err(error) if error.code() == "lease_lost" => (0, 0),
        Err(error) if error.code() == "max_hold_exceeded" => {
            (1, error.detail_u64("expires_in_ms").unwrap_or(0))
        }
        Err(_) => (2, 0),
        Ok(_) => (3, 0),
    };
    let shortest = answers
        .iter()
        .filter_map(|(_, result)| result.as_ref().ok())
        .filter_map(|body| body.get("ttl_ms").and_then(Value::as_u64))
        .min();
    let mut answers = answers;
    // A stable sort: among equals, the first lock in the run's order.
    answers.sort_by_key(|(_, result)| rank(result));
    let mut answers = answers.into_iter();
    match answers.next() {
        Some((lock, Ok(_))) => {
            let body = shortest.map_or_else(
                || serde_json::json!({}),
                |ms| serde_json::json!({ "ttl_ms": ms }),
            );
            (lock, Ok(body))
        }
        Some(counts) => counts,
        None => (String::new(), Ok(serde_json::json!({}))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refused(status: u16, error: Value) -> Result<Value, BrokerError> {
        let Value::Object(error) = error else {
            panic!("an object")
        };
        Err(BrokerError::Rejected {
            status,
            error,
            retry_after: None,
        })
    }

    fn answers(
        results: Vec<Result<Value, BrokerError>>,
    ) -> Vec<(String, Result<Value, BrokerError>)> {
        ["a", "b", "c"]
            .iter()
            .map(|name| (*name).to_owned())
            .zip(results)
            .collect()
    }

    #[test]
    fn a_lost_lease_counts_over_any_other_answer_of_a_round() {
        let lost = || refused(409, json!({"code": "lease_lost", "message": "m"}));
        let down = || refused(503, json!({"code": "backend_unavailable", "message": "m"}));
        let (lock, result) = what_counts(answers(vec![Ok(json!({"ttl_ms": 5})), down(), lost()]));
        assert_eq!(lock, "c");
        assert_eq!(
            result.map_err(|e| e.code().to_owned()),
            Err("lease_lost".to_owned())
        );

        let (lock, result) = what_counts(answers(vec![Ok(json!({})), down(), down()]));
        assert_eq!(lock, "b", "the first failure in the run's order");
        assert!(result.is_err());
    }

    #[test]
    fn the_max_hold_with_the_least_time_left_counts_over_a_transient_failure() {
        let at_max = |left: u64| {
            refused(
                409,
                json!({"code": "max_hold_exceeded", "message": "m", "expires_in_ms": left}),
            )
        };
        let down = refused(503, json!({"code": "backend_unavailable", "message": "m"}));
        let (lock, result) = what_counts(answers(vec![down, at_max(900), at_max(300)]));
        assert_eq!(lock, "c");
        assert!(matches!(result, Err(error) if error.detail_u64("expires_in_ms") == Some(300)));
    }

    #[test]
    fn a_round_that_all_succeeded_carries_the_shortest_ttl() {
        let (lock, result) = what_counts(answers(vec![
            Ok(json!({"ttl_ms": 3000})),
            Ok(json!({"ttl_ms": 2000})),
            Ok(json!({"ttl_ms": 2500})),
        ]));
        assert_eq!(lock, "a");
        assert_eq!(result.ok(), Some(json!({"ttl_ms": 2000})));
    }
}
