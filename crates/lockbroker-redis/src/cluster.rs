//! Cluster mode's questions to the cluster itself: which primaries serve
//! it, and whether each runs a Redis that has sharded Pub/Sub.

use fred::clients::Client;
use fred::interfaces::{ClientLike, ClusterInterface};
use fred::types::config::Server;
use lockbroker_core::StoreError;

use crate::connection::store_error;

/// The oldest Redis cluster mode runs on: 7.0 brought sharded Pub/Sub
/// (`SSUBSCRIBE` / `SPUBLISH`), on which each lock's wake-ups travel.
pub const MIN_VERSION: (u32, u32) = (7, 0);

/// Every primary of the cluster, in the order of their addresses, as the
/// client knows them (it learns them first, when it knows none yet).
pub async fn primaries(client: &Client) -> Result<Vec<Server>, StoreError> {
    if client.num_primary_cluster_nodes() == 0 {
        client.sync_cluster().await.map_err(store_error)?;
    }
    let mut primaries = client
        .cached_cluster_state()
        .map(|state| state.unique_primary_nodes())
        .unwrap_or_default();
    if primaries.is_empty() {
        return Err(StoreError::Unavailable(
            "the Redis Cluster names no primary".into(),
        ));
    }
    primaries.sort_by_key(ToString::to_string);
    Ok(primaries)
}

/// Whether every primary runs a Redis cluster mode can use.
#[derive(Debug, PartialEq, Eq)]
pub enum Versions {
    /// Every primary runs [`MIN_VERSION`] or newer.
    Supported,
    /// Why not: the node and the version it runs.
    TooOld(String),
}

/// Asks every primary its Redis version.
pub async fn check_versions(client: &Client) -> Result<Versions, StoreError> {
    for server in primaries(client).await? {
        let info: String = client
            .with_cluster_node(server.clone())
            .info(Some(fred::types::InfoKind::Server))
            .await
            .map_err(store_error)?;
        let version = info
            .lines()
            .find_map(|line| line.strip_prefix("redis_version:"))
            .map(str::trim)
            .unwrap_or("unknown");
        if !supported(version) {
            return Ok(Versions::TooOld(format!(
                "Redis Cluster node {server} runs Redis {version}; cluster mode needs Redis {}.{} \
                 or newer (sharded Pub/Sub)",
                MIN_VERSION.0, MIN_VERSION.1
            )));
        }
    }
    Ok(Versions::Supported)
}

/// Whether `version` (`major.minor.patch`) is at least [`MIN_VERSION`].
fn supported(version: &str) -> bool {
    let mut parts = version.split('.').map(|part| part.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= MIN_VERSION,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::supported;

    #[test]
    fn redis_before_7_0_is_refused() {
        for old in ["6.2.14", "6.0.0", "5.0.7", "", "seven"] {
            assert!(!supported(old), "{old:?}");
        }
        for new in ["7.0.0", "7.0.15", "7.2.4", "8.0.1", "10.0.0"] {
            assert!(supported(new), "{new:?}");
        }
    }
}
