//! Running one script call: by `FCALL` on a connection of the pool, sent
//! again while a Redis Cluster moves the lock's slot, timed for the metrics.

use fred::clients::Client;
use fred::types::Value;
use lockbroker_core::{LockName, StoreError};
use tokio::time::Instant;

use super::RedisLockStore;
use crate::connection::store_error;
use crate::scripts::{is_missing_function, too_old_for_functions, Reply, ScriptCall};

/// How long a script that met a slot on the move waits before it is sent
/// again.
const TRYAGAIN_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

impl RedisLockStore {
    /// The connection every step on `name` goes through: Redis runs a
    /// connection's commands in the order they were sent, so a step sent
    /// after another on the same lock runs after it. A quorum relies on it:
    /// a release sent after an acquire whose answer is still on its way must
    /// not run before it on a slow node and leave the grant behind.
    pub(super) fn client_for(&self, name: &LockName) -> &Client {
        let clients = self.inner.connections.pool.clients();
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(name.as_str(), &mut hasher);
        let at = std::hash::Hasher::finish(&hasher) as usize % clients.len().max(1);
        clients.get(at).unwrap_or_else(|| self.client())
    }

    /// Runs `call`'s script on a connection of the pool.
    pub(super) async fn call<C: ScriptCall>(&self, call: &C) -> Result<C::Output, StoreError> {
        self.call_on(self.client(), call).await
    }

    /// Runs `call`'s script on `client`'s connection, reports its latency,
    /// and reads its reply.
    pub(super) async fn call_on<C: ScriptCall>(
        &self,
        client: &Client,
        call: &C,
    ) -> Result<C::Output, StoreError> {
        let inner = &self.inner;
        let _admitted = self.admit()?;
        let started = Instant::now();
        let mut result: Result<Value, _>;
        let mut reloaded = false;
        loop {
            let (keys, args) = (call.keys(&inner.context), call.args(&inner.context));
            // fred's command future is about 7 KiB: boxed, it is built once
            // in place, and the futures of callers (a waiting acquire among
            // them) hold a pointer instead of carrying it through every await.
            result = Box::pin(inner.scripts.fcall(client, C::SCRIPT, keys, args)).await;
            // A Redis that lost the library (restarted without its data, a
            // new Cluster primary) is given it, once, and the step sent again.
            if !reloaded && matches!(&result, Err(e) if is_missing_function(e)) {
                reloaded = true;
                if let Err(error) = Box::pin(inner.scripts.load(client)).await {
                    result = Err(error);
                    break;
                }
                continue;
            }
            // Cluster mode: while a resharding moves the lock's slot, a
            // script whose keys are split between the two nodes runs on
            // neither (`TRYAGAIN`); it is sent again until the move ends,
            // within the command timeout.
            let moving = matches!(&result, Err(e) if e.details().starts_with("TRYAGAIN"));
            if !moving || started.elapsed() >= inner.settings.command_timeout {
                break;
            }
            tokio::time::sleep(TRYAGAIN_PAUSE).await;
        }
        if let Some(observer) = &inner.observer {
            let elapsed = started.elapsed();
            observer.script_finished(C::SCRIPT.as_str(), elapsed);
            if let Some(node) = inner.node_index {
                observer.node_script_finished(node, elapsed);
            }
        }
        let value = result.map_err(|error| match too_old_for_functions(&error) {
            Some(why) => StoreError::Unavailable(why),
            None => store_error(error),
        })?;
        call.decode(&mut Reply::from_value(value))
    }
}
