//! Logs what the store follows of Redis's shape as it changes: the primary
//! a Sentinel names (after a failover) and a Cluster's slot map. Each change
//! is logged once, from one client's events, never per request.

use fred::clients::{Client, SubscriberClient};
use fred::interfaces::EventInterface;
use fred::types::ClusterStateChange;
use tokio::sync::broadcast::error::RecvError;

/// Sentinel mode: logs each time the primary the client connects to is at
/// another address than before (a failover the store followed).
pub async fn log_primary_moves(subscriber: SubscriberClient) {
    let mut reconnects = subscriber.reconnect_rx();
    let mut primary = None;
    loop {
        match reconnects.recv().await {
            Ok(server) => {
                let now = server.to_string();
                if let Some(before) = primary.as_ref().filter(|before| **before != now) {
                    tracing::warn!(
                        from = %before,
                        to = %now,
                        "followed a Sentinel failover: the primary moved"
                    );
                }
                primary = Some(now);
            }
            Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
    }
}

/// Cluster mode: logs each change of the slot map one client of the pool
/// follows (every client of the pool follows the same cluster).
pub async fn log_slot_map_changes(client: Client) {
    let mut changes = client.cluster_change_rx();
    loop {
        match changes.recv().await {
            Ok(changes) => {
                let described: Vec<String> = changes
                    .iter()
                    .map(|change| match change {
                        ClusterStateChange::Add(server) => format!("{server} joined"),
                        ClusterStateChange::Remove(server) => format!("{server} left"),
                        ClusterStateChange::Rebalance => "slots moved".to_owned(),
                    })
                    .collect();
                tracing::info!(
                    changes = described.join(", "),
                    "the Redis Cluster's slot map changed"
                );
            }
            Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
    }
}
