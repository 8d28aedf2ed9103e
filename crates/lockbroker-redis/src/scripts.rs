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
    /// Takes a fair waiter out of a lock's queue.
    pub leave_queue: Script,
    /// Ends whatever lease holds a lock, for operators.
    pub force_release: Script,
    /// Checks that Redis takes writes, for readiness.
    pub probe: Script,
}

/// Helpers shared by the scripts that touch the fair queue; Redis has no
/// `require`, so they are prepended to each script's text.
const QUEUE_PRELUDE: &str = include_str!("../scripts/queue.lua");

fn with_queue_helpers(body: &str) -> Script {
    // A `#!lua flags=...` line must stay the script's first line.
    let (shebang, body) = match body.split_once('\n') {
        Some((first, rest)) if first.starts_with("#!") => (format!("{first}\n"), rest),
        _ => (String::new(), body),
    };
    Script::from_lua(format!("{shebang}{QUEUE_PRELUDE}\n{body}"))
}

impl Scripts {
    /// Hashes the embedded scripts.
    pub fn new() -> Self {
        Self {
            acquire: with_queue_helpers(include_str!("../scripts/acquire.lua")),
            extend: Script::from_lua(include_str!("../scripts/extend.lua")),
            release: with_queue_helpers(include_str!("../scripts/release.lua")),
            status: Script::from_lua(include_str!("../scripts/status.lua")),
            leave_queue: with_queue_helpers(include_str!("../scripts/leave_queue.lua")),
            force_release: with_queue_helpers(include_str!("../scripts/force_release.lua")),
            probe: Script::from_lua(include_str!("../scripts/probe.lua")),
        }
    }

    fn all(&self) -> [&Script; 7] {
        [
            &self.acquire,
            &self.extend,
            &self.release,
            &self.status,
            &self.leave_queue,
            &self.force_release,
            &self.probe,
        ]
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
