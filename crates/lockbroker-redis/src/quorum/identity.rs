//! Which quorum nodes are independent primaries. Node URLs can name one
//! server in many spellings (`127.1`, `localhost.`, a host name, another
//! database number), and a URL can name a replica; only the servers know.
//! Each server's `run_id` tells servers apart and its role tells a replica,
//! so a node is correct when it is a primary and no node before it in the
//! list is the same server. One server listed twice keeps one vote.

use futures_util::future::join_all;

use crate::store::{NodeIdentity, RedisLockStore};

/// Why each node is no independent primary (`None` when it is, or when its
/// identity is unknown), from the identities of the nodes that answered.
pub fn misconfigurations(
    identities: &[Option<NodeIdentity>],
    endpoints: &[String],
) -> Vec<Option<String>> {
    identities
        .iter()
        .enumerate()
        .map(|(at, identity)| {
            let identity = identity.as_ref()?;
            if let Some(primary) = &identity.primary_of {
                return Some(format!(
                    "{} is a replica (of {primary}), which refuses every write; every node must \
                     be an independent Redis primary",
                    endpoints[at]
                ));
            }
            let first = identities[..at]
                .iter()
                .position(|other| other.as_ref().is_some_and(|o| o.run_id == identity.run_id))?;
            Some(format!(
                "{} is the same Redis server as {} (run_id {}); every node must be an \
                 independent Redis primary, and one server counts once",
                endpoints[at], endpoints[first], identity.run_id
            ))
        })
        .collect()
}

/// Asks every node which server it is, each within the time a first answer
/// may take (a connection, then a command), and returns why
/// the nodes that answered are not independent primaries, one reason per
/// misconfigured node. A node that does not answer in time is checked by
/// the standing watcher once it does.
pub async fn check_at_start(nodes: &[RedisLockStore]) -> Vec<String> {
    let identities: Vec<Option<NodeIdentity>> = join_all(nodes.iter().map(|node| async move {
        tokio::time::timeout(node.first_answer_limit(), node.identity())
            .await
            .ok()
            .and_then(Result::ok)
    }))
    .await;
    let endpoints: Vec<String> = nodes.iter().map(RedisLockStore::endpoint).collect();
    misconfigurations(&identities, &endpoints)
        .into_iter()
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn primary(run_id: &str) -> Option<NodeIdentity> {
        Some(NodeIdentity {
            run_id: run_id.into(),
            primary_of: None,
        })
    }

    #[test]
    fn a_server_listed_twice_keeps_its_first_place_and_a_replica_none() {
        let endpoints: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        let replica = Some(NodeIdentity {
            run_id: "r".into(),
            primary_of: Some("127.0.0.1:1".into()),
        });
        let found = misconfigurations(&[primary("x"), None, primary("x"), replica], &endpoints);
        assert_eq!(found[0], None);
        assert_eq!(found[1], None, "not known yet");
        let says =
            |at: usize, what: &str| found[at].as_deref().is_some_and(|why| why.contains(what));
        assert!(says(2, "c is the same Redis server as a"), "{found:?}");
        assert!(says(3, "d is a replica"), "{found:?}");
        let fine = misconfigurations(&[primary("x"), primary("y"), primary("z")], &endpoints);
        assert!(fine.iter().all(Option::is_none));
    }
}
