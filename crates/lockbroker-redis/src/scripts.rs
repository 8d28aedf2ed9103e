//! The Lua scripts behind every lock step. Each lives in `scripts/*.lua`, is
//! loaded once, and runs by SHA; a `NOSCRIPT` answer (Redis restarted or
//! flushed its script cache) reloads it and runs it again.

use fred::clients::Client;
use fred::interfaces::LuaInterface;
use fred::types::scripts::Script;

/// All lock scripts, hashed once at startup.
pub struct Scripts {
    /// Grants a free lock, or reports the holder.
    pub acquire: Script,
    /// Replaces the remaining TTL of a held lease.
    pub extend: Script,
    /// Frees a held lock.
    pub release: Script,
    /// Reads a lock's state.
    pub status: Script,
}

impl Scripts {
    /// Hashes the embedded scripts.
    pub fn new() -> Self {
        Self {
            acquire: Script::from_lua(include_str!("../scripts/acquire.lua")),
            extend: Script::from_lua(include_str!("../scripts/extend.lua")),
            release: Script::from_lua(include_str!("../scripts/release.lua")),
            status: Script::from_lua(include_str!("../scripts/status.lua")),
        }
    }

    fn all(&self) -> [&Script; 4] {
        [&self.acquire, &self.extend, &self.release, &self.status]
    }

    /// Makes sure Redis has every script cached, loading those it lacks.
    pub async fn ensure_loaded(&self, client: &Client) -> Result<(), fred::error::Error> {
        let hashes: Vec<String> = self.all().iter().map(|s| s.sha1().to_string()).collect();
        let present: Vec<bool> = client.script_exists(hashes).await?;
        for (script, present) in self.all().into_iter().zip(present) {
            if !present {
                script.load(client).await?;
            }
        }
        Ok(())
    }
}

impl Default for Scripts {
    fn default() -> Self {
        Self::new()
    }
}
