//! Running one script call: by `FCALL` on a connection of the pool, sent
//! again while a Redis Cluster moves the lock's slot, timed for the metrics.

use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::{ClientState, Value};
use lockbroker_core::{LockName, StoreError};
use tokio::time::Instant;

use super::RedisLockStore;
use crate::connection::store_error;
use crate::scripts::{is_missing_function, too_old_for_functions, CallText, Reply, ScriptCall};

/// How long a script that met a slot on the move waits before it is sent
/// again.
const TRYAGAIN_PAUSE: Duration = Duration::from_millis(10);

/// How often a step that waits for its connection looks at it again, in case
/// the announcement of the connection came before the step listened.
const CONNECTED_POLL: Duration = Duration::from_millis(10);

impl RedisLockStore {
    /// The connection every step on `name` goes through: Redis runs a
    /// connection's commands in the order they were sent, so a step sent
    /// after another on the same lock runs after it. A quorum relies on it:
    /// a release sent after an acquire whose answer is still on its way must
    /// not run before it on a slow node and leave the grant behind.
    pub(super) fn client_for(&self, name: &LockName) -> &Client {
        let clients = self.inner.connections.pool.clients();
        if let [only] = clients {
            return only;
        }
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
        self.call_with_text(client, call, None).await
    }

    /// [`Self::call_on`], sending `text` (made once for every node of a
    /// quorum, and equal to `call`'s own) on the first try.
    pub(super) async fn call_with_text<C: ScriptCall>(
        &self,
        client: &Client,
        call: &C,
        mut text: Option<CallText>,
    ) -> Result<C::Output, StoreError> {
        let inner = &self.inner;
        let _admitted = self.admit()?;
        let started = Instant::now();
        if client.state() != ClientState::Connected {
            Box::pin(connected(client, inner.settings.command_timeout)).await?;
        }
        let mut result: Result<Value, _>;
        let mut reloaded = false;
        loop {
            // fred's command future is about 7 KiB: boxed, it is built once
            // in place, and the futures of callers (a waiting acquire among
            // them) hold a pointer instead of carrying it through every await.
            let scripts = &inner.scripts;
            result = match text.take() {
                Some(text) => {
                    Box::pin(scripts.fcall(client, C::SCRIPT, text.keys, text.args)).await
                }
                None => {
                    let (keys, args) = (call.keys(&inner.context), call.args(&inner.context));
                    Box::pin(scripts.fcall(client, C::SCRIPT, keys, args)).await
                }
            };
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

/// Waits, within `limit`, until `client` is connected, so that a step is
/// only ever handed to fred while it is.
///
/// fred holds a command it is given while it reconnects and sends it once
/// connected, so a step that then fails may still have run: its outcome is
/// unknown. A step never handed over cannot have run, so when no connection
/// comes in time the step says it was not sent (`Unavailable`), and a write
/// to a Redis that refuses connections is answered "nothing was changed"
/// instead of "outcome unknown". A connection that drops after this check is
/// still seen as connected until fred starts to reconnect; a step handed
/// over then keeps the unknown outcome it may have.
async fn connected(client: &Client, limit: Duration) -> Result<(), StoreError> {
    let deadline = Instant::now() + limit;
    while client.state() != ClientState::Connected {
        let now = Instant::now();
        if now >= deadline {
            return Err(StoreError::Unavailable(format!(
                "no connection to Redis within {} ms; the step was not sent",
                limit.as_millis()
            )));
        }
        let wait = CONNECTED_POLL.min(deadline - now);
        let _ = tokio::time::timeout(wait, client.wait_for_connect()).await;
    }
    Ok(())
}
