//! The leases of one run: read from a grant (one lock's, or an
//! acquire-all's), named in messages, and handed to the command in its
//! environment.

use std::process::Command;

use serde_json::Value;

use super::supervisor::Lease;

/// The leases a grant carries, in the order of `names`, and the shortest
/// TTL granted: a single acquire answers the lease itself, an acquire-all
/// `{"leases": [...]}` in the order asked. `None` if one lacks token or fence.
pub fn granted(body: &Value, names: &[String]) -> Option<(Vec<Lease>, Option<u64>)> {
    let answered: Vec<&Value> = match names {
        [_] => vec![body],
        _ => body.get("leases")?.as_array()?.iter().collect(),
    };
    if answered.len() != names.len() {
        return None;
    }
    let mut leases = Vec::with_capacity(names.len());
    let mut shortest: Option<u64> = None;
    for (name, lease) in names.iter().zip(answered) {
        leases.push(Lease {
            name: name.clone(),
            token: lease.get("token")?.as_str()?.to_owned(),
            fence: lease.get("fence")?.as_u64()?,
        });
        if let Some(ms) = lease.get("ttl_ms").and_then(Value::as_u64) {
            shortest = Some(shortest.map_or(ms, |least| least.min(ms)));
        }
    }
    Some((leases, shortest))
}

/// Lock names for messages: `"a"`, or `"a" and "b"`.
pub fn shown<S: AsRef<str>>(names: &[S]) -> String {
    let quoted: Vec<String> = names
        .iter()
        .map(|name| format!("{:?}", name.as_ref()))
        .collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => quoted.concat(),
    }
}

/// Puts every lease into the command's environment, numbered from 1 in the
/// order of the command line (LOCKBROKER_LOCK_n, _FENCE_n, _TOKEN_n), with
/// LOCKBROKER_LOCKS listing the names and LOCKBROKER_FENCES the fences as
/// NAME=FENCE, after dropping the numbered variables an enclosing run left.
pub fn export(process: &mut Command, leases: &[Lease]) {
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(is_numbered_lease_variable) {
            process.env_remove(key);
        }
    }
    let names: Vec<&str> = leases.iter().map(|lease| lease.name.as_str()).collect();
    let fences: Vec<String> = leases
        .iter()
        .map(|lease| format!("{}={}", lease.name, lease.fence))
        .collect();
    process
        .env("LOCKBROKER_LOCKS", names.join(" "))
        .env("LOCKBROKER_FENCES", fences.join(" "));
    for (at, lease) in leases.iter().enumerate() {
        let n = at + 1;
        process
            .env(format!("LOCKBROKER_LOCK_{n}"), &lease.name)
            .env(format!("LOCKBROKER_FENCE_{n}"), lease.fence.to_string())
            .env(format!("LOCKBROKER_TOKEN_{n}"), &lease.token);
    }
}

/// Whether `key` is one of a run's numbered variables, LOCKBROKER_LOCK_1,
/// LOCKBROKER_FENCE_2, LOCKBROKER_TOKEN_3, ...
fn is_numbered_lease_variable(key: &str) -> bool {
    ["LOCKBROKER_LOCK_", "LOCKBROKER_FENCE_", "LOCKBROKER_TOKEN_"]
        .iter()
        .filter_map(|prefix| key.strip_prefix(prefix))
        .any(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn a_grant_of_several_gives_each_lease_in_the_order_of_the_command_line() {
        let body = json!({"leases": [
            {"name": "b", "token": "tb", "fence": 7, "ttl_ms": 3000},
            {"name": "a", "token": "ta", "fence": 9, "ttl_ms": 2000},
        ]});
        let (leases, shortest) = granted(&body, &names(&["b", "a"])).expect("leases");
        assert_eq!(
            (
                leases[0].name.as_str(),
                leases[0].token.as_str(),
                leases[0].fence
            ),
            ("b", "tb", 7)
        );
        assert_eq!((leases[1].name.as_str(), leases[1].fence), ("a", 9));
        assert_eq!(shortest, Some(2000));

        let one = json!({"name": "a", "token": "t", "fence": 1, "ttl_ms": 500});
        let (leases, shortest) = granted(&one, &names(&["a"])).expect("a lease");
        assert_eq!((leases.len(), shortest), (1, Some(500)));

        let short = json!({"leases": [{"name": "a", "token": "t", "fence": 1}]});
        assert!(granted(&short, &names(&["a", "b"])).is_none());
        let no_fence = json!({"leases": [{"token": "t"}, {"token": "u", "fence": 2}]});
        assert!(granted(&no_fence, &names(&["a", "b"])).is_none());
    }

    #[test]
    fn only_the_numbered_variables_of_a_run_are_dropped_from_an_enclosing_one() {
        for key in [
            "LOCKBROKER_LOCK_1",
            "LOCKBROKER_FENCE_12",
            "LOCKBROKER_TOKEN_3",
        ] {
            assert!(is_numbered_lease_variable(key), "{key}");
        }
        for key in [
            "LOCKBROKER_LOCK",
            "LOCKBROKER_LOCK_",
            "LOCKBROKER_LOCK_X",
            "LOCKBROKER_URL",
        ] {
            assert!(!is_numbered_lease_variable(key), "{key}");
        }
        assert_eq!(shown(&names(&["a", "b", "c"])), "\"a\", \"b\" and \"c\"");
        assert_eq!(shown(&names(&["a"])), "\"a\"");
    }
}
