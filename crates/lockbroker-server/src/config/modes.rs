//! Each backend mode's own settings rules: which settings a mode needs, and
//! which belong to another mode.

use super::schema::{RedisConfig, RedisMode};
use super::validate::invalid;
use super::ConfigError;

/// The mode's own rules: quorum mode needs an odd number (at least 3) of
/// distinct servers, sentinel mode at least one Sentinel and a service name,
/// cluster mode at least one seed node;
/// each mode refuses the others' settings, so a half-changed configuration
/// does not quietly run in the mode it left.
pub(super) fn check_redis_mode(redis: &RedisConfig) -> Result<(), ConfigError> {
    if !matches!(redis.mode, RedisMode::Quorum | RedisMode::Cluster) && !redis.nodes.is_empty() {
        return Err(invalid(format!(
            "redis.nodes lists nodes but redis.mode is \"{}\": set redis.mode = \"quorum\" or \"cluster\" to use them",
            redis.mode.as_str()
        )));
    }
    if redis.mode != RedisMode::Sentinel && !redis.sentinels.is_empty() {
        return Err(invalid(format!(
            "redis.sentinels lists Sentinels but redis.mode is \"{}\": set redis.mode = \"sentinel\" to use them",
            redis.mode.as_str()
        )));
    }
    check_replica_ack(redis)?;
    match redis.mode {
        RedisMode::Single => Ok(()),
        RedisMode::Sentinel => check_sentinels(redis),
        RedisMode::Quorum => check_quorum(redis),
        RedisMode::Cluster => check_cluster(redis),
    }
}

/// Replica acknowledgement: for the primary-and-replicas modes only, and
/// bounded by the command timeout (the `WAIT` is a command like any other).
fn check_replica_ack(redis: &RedisConfig) -> Result<(), ConfigError> {
    if redis.min_replicas_acked == 0 {
        return Ok(());
    }
    if redis.mode == RedisMode::Quorum {
        return Err(invalid(
            "redis.min_replicas_acked: quorum mode does not wait for replicas; its nodes are \
             independent primaries and a majority of them is what keeps a lease",
        ));
    }
    if redis.replica_ack_timeout_ms == 0 || redis.replica_ack_timeout_ms >= redis.command_timeout_ms
    {
        return Err(invalid(format!(
            "redis.replica_ack_timeout_ms must be between 1 and redis.command_timeout_ms ({}), got {}",
            redis.command_timeout_ms, redis.replica_ack_timeout_ms
        )));
    }
    Ok(())
}

/// Sentinel mode: at least one Sentinel, each `host:port`, and the name
/// they monitor the primary under.
fn check_sentinels(redis: &RedisConfig) -> Result<(), ConfigError> {
    if redis.sentinels.is_empty() {
        return Err(invalid(
            "redis.sentinels: sentinel mode needs at least one Sentinel (host:port)",
        ));
    }
    for (at, address) in redis.sentinels.iter().enumerate() {
        if sentinel_address(address).is_none() {
            return Err(invalid(format!(
                "redis.sentinels: Sentinel {} is not host:port (got {address:?})",
                at + 1
            )));
        }
    }
    if redis.service_name.trim().is_empty() {
        return Err(invalid(
            "redis.service_name: sentinel mode needs the name the Sentinels monitor the primary under",
        ));
    }
    Ok(())
}

/// A Sentinel's `host:port` (`[v6]:port` for an IPv6 address).
pub(super) fn sentinel_address(address: &str) -> Option<(String, u16)> {
    let (host, port) = address.trim().rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port: u16 = port.parse().ok()?;
    (!host.is_empty() && port != 0).then(|| (host.to_owned(), port))
}

/// Cluster mode: at least one seed node, each a URL of database 0 (a Redis
/// Cluster has no other).
fn check_cluster(redis: &RedisConfig) -> Result<(), ConfigError> {
    if redis.nodes.is_empty() {
        return Err(invalid(
            "redis.nodes: cluster mode needs at least one seed node (redis://host:port)",
        ));
    }
    for (at, url) in redis.nodes.iter().enumerate() {
        if node_server(url).is_none() {
            return Err(invalid(format!(
                "redis.nodes: seed node {} is not a redis:// or rediss:// URL with a host",
                at + 1
            )));
        }
        let database = url
            .split_once("://")
            .and_then(|(_, rest)| rest.split_once('/'));
        if let Some((_, db)) = database.filter(|(_, db)| !matches!(*db, "" | "0")) {
            return Err(invalid(format!(
                "redis.nodes: seed node {} names database {db}; a Redis Cluster has only database 0",
                at + 1
            )));
        }
    }
    Ok(())
}

/// The host and port of each seed node of a cluster-mode configuration
/// (already checked by [`check_redis_mode`]).
pub(super) fn cluster_seeds(redis: &RedisConfig) -> Vec<(String, u16)> {
    redis
        .nodes
        .iter()
        .filter_map(|url| node_server(url))
        .collect()
}

/// Quorum mode: an odd number, at least 3, of distinct servers.
fn check_quorum(redis: &RedisConfig) -> Result<(), ConfigError> {
    let count = redis.nodes.len();
    if count < 3 {
        return Err(invalid(format!(
            "redis.nodes: quorum mode needs at least 3 nodes, got {count}"
        )));
    }
    if count % 2 == 0 {
        return Err(invalid(format!(
            "redis.nodes: quorum mode needs an odd number of nodes, got {count} (a majority of \
             {count} survives no more failures than one of {})",
            count - 1
        )));
    }
    let mut servers: Vec<(String, u16)> = Vec::with_capacity(count);
    for (at, url) in redis.nodes.iter().enumerate() {
        let server = node_server(url).ok_or_else(|| {
            invalid(format!(
                "redis.nodes: node {} is not a redis:// or rediss:// URL with a host",
                at + 1
            ))
        })?;
        if let Some(before) = servers.iter().position(|s| *s == server) {
            return Err(invalid(format!(
                "redis.nodes: nodes {} and {} are the same server ({}:{}); every node must be \
                 an independent Redis",
                before + 1,
                at + 1,
                server.0,
                server.1
            )));
        }
        servers.push(server);
    }
    if redis.node_timeout_ms == 0 {
        return Err(invalid("redis.node_timeout_ms must be at least 1"));
    }
    if !(0.0..0.5).contains(&redis.drift_factor) {
        return Err(invalid(
            "redis.drift_factor must be at least 0 and below 0.5",
        ));
    }
    Ok(())
}

/// The server a node URL names: its host (loopback names as one) and port.
/// The database number and credentials do not make another server.
fn node_server(url: &str) -> Option<(String, u16)> {
    let rest = url
        .strip_prefix("redis://")
        .or_else(|| url.strip_prefix("rediss://"))?;
    let authority = rest.split('/').next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let (host, port) = match host_port.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port.parse().ok()?),
        _ => (host_port, 6379),
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    if host.is_empty() {
        return None;
    }
    let host = match host.as_str() {
        "localhost" | "::1" | "127.0.0.1" => "127.0.0.1".to_owned(),
        _ => host,
    };
    Some((host, port))
}
