//! The operator listing: `SCAN` over the keys of held names a page at a time, on the
//! one Redis or on every primary of a cluster in turn.

use fred::interfaces::KeysInterface;
use fred::types::config::Server;
use fred::types::Value;
use futures_util::stream::{self, StreamExt};
use lockbroker_core::{ListCursor, ListRequest, LockEntry, LockPage, LockStore, StoreError};

use super::RedisLockStore;
use crate::cluster;
use crate::connection::store_error;

/// The most `SCAN` calls one page of a listing makes.
const MAX_SCAN_ROUNDS: usize = 8;

/// Status reads one page runs at once. A page of 1,000 names is read in
/// batches rather than as 1,000 scripts at once, so a listing never floods
/// the connection that lock steps share (each batch pipelines on it).
const READS_AT_ONCE: usize = 32;

/// Cluster mode: a listing cursor holds the primary it is on (in the order
/// of their addresses) in the bits from here up, and that primary's own
/// `SCAN` cursor below. On one Redis it is the `SCAN` cursor itself.
const NODE_SHIFT: u32 = 56;

impl RedisLockStore {
    pub(super) async fn list_page(&self, request: &ListRequest) -> Result<LockPage, StoreError> {
        let keys = &self.inner.context.keys;
        let client = self.client();
        // One Redis is one node with no address to send to.
        let nodes: Vec<Option<Server>> = if self.inner.settings.cluster.is_some() {
            cluster::primaries(client)
                .await?
                .into_iter()
                .map(Some)
                .collect()
        } else {
            vec![None]
        };
        let pattern = keys.held_pattern(request.space, &request.prefix);
        let limit = request.limit.get();
        let count = u32::try_from(limit).unwrap_or(u32::MAX);
        let start = request.cursor.get();
        let mut node = usize::try_from(start >> NODE_SHIFT).unwrap_or(usize::MAX);
        let mut cursor = start & ((1 << NODE_SHIFT) - 1);
        let mut names = Vec::new();
        // SCAN, never KEYS: each round visits about `limit` keys. A few rounds
        // fill a page when matches are sparse, and no more, so a keyspace full
        // of other keys cannot make one request slow.
        for _ in 0..MAX_SCAN_ROUNDS {
            // A cursor past the last primary (the cluster shrank since the
            // page before) ends the listing.
            let Some(server) = nodes.get(node) else {
                break;
            };
            let _admitted = self.admit()?;
            let reply: Value = match server {
                Some(server) => {
                    client
                        .with_cluster_node(server.clone())
                        .scan_page(cursor.to_string(), pattern.as_str(), Some(count), None)
                        .await
                }
                None => {
                    client
                        .scan_page(cursor.to_string(), pattern.as_str(), Some(count), None)
                        .await
                }
            }
            .map_err(store_error)?;
            let (next, found) = scan_reply(reply)?;
            names
                .extend((found.iter()).filter_map(|key| keys.name_of_held_key(request.space, key)));
            cursor = next;
            if cursor == 0 {
                node = node.saturating_add(1);
            }
            if node >= nodes.len() || names.len() >= limit {
                break;
            }
        }
        names.sort();
        names.dedup();
        // Each lock is read by the status script, one key set per call, so the
        // listing also works where a lock's keys live on their own Cluster slot.
        let mut reads = stream::iter(names)
            .map(|name| async move {
                let status = self.status(&name).await;
                (name, status)
            })
            .buffer_unordered(READS_AT_ONCE);
        let mut locks = Vec::new();
        while let Some((name, status)) = reads.next().await {
            let status = status?;
            if status.held || status.available_in_ms > 0 {
                locks.push(LockEntry { name, status });
            }
        }
        locks.sort_by(|a, b| a.name.cmp(&b.name));
        let next = u64::try_from(node)
            .ok()
            .filter(|_| node < nodes.len())
            .map(|node| ListCursor::new(node << NODE_SHIFT | cursor));
        Ok(LockPage {
            locks,
            next_cursor: next,
        })
    }
}

/// Reads a `SCAN` reply: the next cursor and the keys of this round.
fn scan_reply(reply: Value) -> Result<(u64, Vec<String>), StoreError> {
    let malformed = || StoreError::Protocol("malformed SCAN reply".into());
    let Value::Array(mut parts) = reply else {
        return Err(malformed());
    };
    if parts.len() != 2 {
        return Err(malformed());
    }
    let keys = parts.pop().ok_or_else(malformed)?;
    let cursor = parts
        .pop()
        .and_then(|c| c.as_string())
        .and_then(|c| c.parse().ok())
        .ok_or_else(malformed)?;
    let Value::Array(keys) = keys else {
        return Err(malformed());
    };
    Ok((
        cursor,
        keys.into_iter().filter_map(Value::into_string).collect(),
    ))
}
