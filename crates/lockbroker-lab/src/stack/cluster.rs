//! Cluster mode's setup and moves: Redis Cluster nodes joined with
//! `redis-cli --cluster create`, slots moved with `redis-cli --cluster
//! reshard`, and the few questions a test asks a cluster (who serves a
//! key, which nodes are primaries), over a plain RESP connection. The lab's
//! stacks and the test harness both build their clusters here; the caller
//! owns the `redis-server` processes.

use std::process::Command;
use std::time::{Duration, Instant};

use super::sentinel::{command, Reply};

/// What a `redis-server` needs to be a cluster node: its node table in its
/// own directory, and a node timeout of 1 s so failovers in tests and lab
/// runs take seconds, not the default 15. Replicas sync at once instead of
/// after 5 s: until its first sync, a replica may not take over. A primary
/// whose slots all moved away stays a primary (by default it would become
/// a replica of the node that took them), so slots can move back to it.
pub const NODE_ARGS: [&str; 10] = [
    "--cluster-allow-replica-migration",
    "no",
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
    "--cluster-node-timeout",
    "1000",
    "--repl-diskless-sync-delay",
    "0",
];

/// Whether a cluster node may listen on `port`: its cluster bus port,
/// 10000 above, exists and is free too.
pub fn bus_port_free(port: u16) -> bool {
    port <= 55_535 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()
}

/// Joins the empty cluster nodes on `ports` into one cluster, the first
/// `ports.len() / (replicas + 1)` as primaries and each with `replicas`
/// replicas, and waits until every node serves every slot.
pub fn create(ports: &[u16], replicas: usize) -> Result<(), String> {
    let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
    args.extend(ports.iter().map(|port| format!("127.0.0.1:{port}")));
    args.extend([
        "--cluster-replicas".into(),
        replicas.to_string(),
        "--cluster-yes".into(),
    ]);
    redis_cli(&args)?;
    wait_until_stable(ports, Duration::from_secs(30))?;
    // A replica that never synced may not be promoted: wait for every one.
    let deadline = Instant::now() + Duration::from_secs(30);
    while ports.iter().any(|port| {
        matches!(command(*port, &["INFO", "replication"]),
            Some(Reply::Text(info)) if info.contains("role:slave")
                && !info.contains("master_link_status:up"))
    }) {
        if Instant::now() > deadline {
            return Err("waited 30 s for the replicas' first sync".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Moves `slots` slots from the primary on `from` to the primary on `to`
/// with `redis-cli --cluster reshard` (the source's lowest slots go first),
/// and waits until every node in `ports` agrees on the new owners.
pub fn reshard(ports: &[u16], from: u16, to: u16, slots: u16) -> Result<(), String> {
    let (from_id, to_id) = (node_id(from)?, node_id(to)?);
    redis_cli(&[
        "--cluster".into(),
        "reshard".into(),
        format!("127.0.0.1:{from}"),
        "--cluster-from".into(),
        from_id,
        "--cluster-to".into(),
        to_id,
        "--cluster-slots".into(),
        slots.to_string(),
        "--cluster-yes".into(),
    ])?;
    wait_until_stable(ports, Duration::from_secs(30))
}

/// Moves every slot of the primary on `from` to the primary on `to`, so
/// every lock it served moves, mid-flight (see [`reshard`]).
pub fn drain(ports: &[u16], from: u16, to: u16) -> Result<u16, String> {
    let slots: u16 = slot_owners(from)
        .iter()
        .filter(|(_, _, owner)| *owner == from)
        .map(|(start, end, _)| end - start + 1)
        .sum();
    if slots > 0 {
        reshard(ports, from, to, slots)?;
    }
    Ok(slots)
}

/// Waits until every node on `ports` that answers says the cluster is
/// `ok` and names the same primary for every slot.
pub fn wait_until_stable(ports: &[u16], limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        let maps: Vec<_> = ports
            .iter()
            .filter(|port| command(**port, &["PING"]).is_some())
            .map(|port| (state_ok(*port), slot_owners(*port)))
            .collect();
        let first = maps.first().map(|(_, owners)| owners);
        let agreed = maps
            .iter()
            .all(|(ok, owners)| *ok && !owners.is_empty() && Some(owners) == first);
        if agreed {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "waited {limit:?} for the cluster to agree on its slots"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The port of the primary serving `key`, as the node on `port` sees it.
pub fn owner_of(port: u16, key: &str) -> Option<u16> {
    let Some(Reply::Text(slot)) = command(port, &["CLUSTER", "KEYSLOT", key]) else {
        return None;
    };
    let slot: u16 = slot.parse().ok()?;
    slot_owners(port)
        .into_iter()
        .find(|(start, end, _)| (*start..=*end).contains(&slot))
        .map(|(_, _, owner)| owner)
}

/// The primary serving `key`, and how many slots [`reshard`] must move from
/// it to take `key` along: its slot's place among that primary's slots,
/// counted from the lowest, plus one.
pub fn slots_to_move(port: u16, key: &str) -> Option<(u16, u16)> {
    let slot = slot_of(port, key)?;
    let owners = slot_owners(port);
    let primary = owners
        .iter()
        .find(|(start, end, _)| (*start..=*end).contains(&slot))?
        .2;
    let below: u16 = owners
        .iter()
        .filter(|(start, _, owner)| *owner == primary && *start <= slot)
        .map(|(start, end, _)| (*end).min(slot) - start + 1)
        .sum();
    Some((primary, below))
}

/// The slot of `key` (its hash tag's), as the node on `port` computes it.
pub fn slot_of(port: u16, key: &str) -> Option<u16> {
    match command(port, &["CLUSTER", "KEYSLOT", key])? {
        Reply::Text(slot) => slot.parse().ok(),
        _ => None,
    }
}

/// The ports of the primaries that serve slots, as the node on `port` sees
/// them, in ascending order.
pub fn primaries(port: u16) -> Vec<u16> {
    let mut ports: Vec<u16> = slot_owners(port)
        .into_iter()
        .map(|(_, _, owner)| owner)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// How many keys the node on `port` holds.
pub fn key_count(port: u16) -> Option<u64> {
    match command(port, &["DBSIZE"])? {
        Reply::Text(count) => count.parse().ok(),
        _ => None,
    }
}

/// `CLUSTER SLOTS` as (first slot, last slot, primary port) ranges, sorted.
fn slot_owners(port: u16) -> Vec<(u16, u16, u16)> {
    let Some(Reply::Array(ranges)) = command(port, &["CLUSTER", "SLOTS"]) else {
        return Vec::new();
    };
    let mut owners: Vec<_> = ranges
        .iter()
        .filter_map(|range| {
            let Reply::Array(fields) = range else {
                return None;
            };
            let number = |reply: Option<&Reply>| match reply {
                Some(Reply::Text(text)) => text.parse::<u16>().ok(),
                _ => None,
            };
            let primary = match fields.get(2) {
                Some(Reply::Array(node)) => number(node.get(1))?,
                _ => return None,
            };
            Some((number(fields.first())?, number(fields.get(1))?, primary))
        })
        .collect();
    owners.sort_unstable();
    owners
}

fn state_ok(port: u16) -> bool {
    matches!(command(port, &["CLUSTER", "INFO"]),
        Some(Reply::Text(info)) if info.contains("cluster_state:ok"))
}

fn node_id(port: u16) -> Result<String, String> {
    match command(port, &["CLUSTER", "MYID"]) {
        Some(Reply::Text(id)) => Ok(id),
        _ => Err(format!("the node on port {port} does not name itself")),
    }
}

fn redis_cli(args: &[String]) -> Result<(), String> {
    let output = Command::new("redis-cli")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run redis-cli (apt-get install redis-tools): {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "redis-cli {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}
