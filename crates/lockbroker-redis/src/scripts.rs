//! The Lua scripts behind every lock step. Each lives in `scripts/*.lua`, is
//! loaded once, and runs by SHA; a `NOSCRIPT` answer (Redis restarted or
//! flushed its script cache) reloads it and runs it again.
//!
//! Every script's calling convention (its keys, arguments and reply) is
//! written once in Rust, in [`calls`], as a type implementing [`ScriptCall`]:
//! the store and the benchmark's direct client both call the scripts through
//! these definitions.

pub mod calls;

use fred::clients::Client;
use fred::interfaces::LuaInterface;
use fred::types::scripts::Script;
use fred::types::Value;
use lockbroker_core::StoreError;

use crate::keys::KeyLayout;

/// What every script may be prepended with: the clock and announcements
/// (`prelude.lua`), the fair-queue helpers (`queue.lua`), the holder-set
/// helpers (`holders.lua`) and the release memos (`memos.lua`).
const PRELUDE: &str = concat!(
    include_str!("../scripts/prelude.lua"),
    "\n",
    include_str!("../scripts/queue.lua"),
    "\n",
    include_str!("../scripts/holders.lua"),
    "\n",
    include_str!("../scripts/memos.lua"),
);

/// Names a script in [`Scripts`] (and in the script latency metric).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptName {
    /// `acquire.lua`
    Acquire,
    /// `extend.lua`
    Extend,
    /// `release.lua`
    Release,
    /// `status.lua`
    Status,
    /// `leave_queue.lua`
    LeaveQueue,
    /// `force_release.lua`
    ForceRelease,
    /// `probe.lua`
    Probe,
    /// `adopt_fence.lua` (quorum mode)
    AdoptFence,
    /// `epoch.lua` (quorum mode)
    Epoch,
    /// `readmit.lua` (quorum mode)
    Readmit,
    /// `hold.lua`
    Hold,
    /// `hold_extend.lua`
    HoldExtend,
    /// `hold_release.lua`
    HoldRelease,
}

impl ScriptName {
    /// Every script, in [`Scripts`] order.
    pub const ALL: [Self; 13] = [
        Self::Acquire,
        Self::Extend,
        Self::Release,
        Self::Status,
        Self::LeaveQueue,
        Self::ForceRelease,
        Self::Probe,
        Self::AdoptFence,
        Self::Epoch,
        Self::Readmit,
        Self::Hold,
        Self::HoldExtend,
        Self::HoldRelease,
    ];

    /// The script's name for metrics: its file name without `.lua`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::Extend => "extend",
            Self::Release => "release",
            Self::Status => "status",
            Self::LeaveQueue => "leave_queue",
            Self::ForceRelease => "force_release",
            Self::Probe => "probe",
            Self::AdoptFence => "adopt_fence",
            Self::Epoch => "epoch",
            Self::Readmit => "readmit",
            Self::Hold => "hold",
            Self::HoldExtend => "hold_extend",
            Self::HoldRelease => "hold_release",
        }
    }

    fn body(self) -> &'static str {
        match self {
            Self::Acquire => include_str!("../scripts/acquire.lua"),
            Self::Extend => include_str!("../scripts/extend.lua"),
            Self::Release => include_str!("../scripts/release.lua"),
            Self::Status => include_str!("../scripts/status.lua"),
            Self::LeaveQueue => include_str!("../scripts/leave_queue.lua"),
            Self::ForceRelease => include_str!("../scripts/force_release.lua"),
            Self::Probe => include_str!("../scripts/probe.lua"),
            Self::AdoptFence => include_str!("../scripts/adopt_fence.lua"),
            Self::Epoch => include_str!("../scripts/epoch.lua"),
            Self::Readmit => include_str!("../scripts/readmit.lua"),
            Self::Hold => include_str!("../scripts/hold.lua"),
            Self::HoldExtend => include_str!("../scripts/hold_extend.lua"),
            Self::HoldRelease => include_str!("../scripts/hold_release.lua"),
        }
    }
}

/// All lock scripts, hashed once at startup.
pub struct Scripts {
    scripts: Vec<Script>,
}

impl Scripts {
    /// Assembles and hashes the embedded scripts: each body after the shared
    /// prelude, keeping a `#!lua flags=...` line first, where Redis needs it.
    pub fn new() -> Self {
        let scripts = ScriptName::ALL
            .iter()
            .map(|name| {
                let body = name.body();
                let (shebang, body) = match body.split_once('\n') {
                    Some((first, rest)) if first.starts_with("#!") => (first, rest),
                    _ => ("", body),
                };
                Script::from_lua(format!("{shebang}\n{PRELUDE}\n{body}"))
            })
            .collect();
        Self { scripts }
    }

    /// The script `name`.
    pub fn get(&self, name: ScriptName) -> &Script {
        // `ALL` lists the names in declaration order, so a name's number is
        // its place in `scripts`.
        &self.scripts[name as usize]
    }

    /// Makes sure Redis has every script cached, loading those it lacks.
    pub async fn ensure_loaded(&self, client: &Client) -> Result<(), fred::error::Error> {
        let hashes: Vec<String> = self.scripts.iter().map(|s| s.sha1().to_string()).collect();
        let present: Vec<bool> = client.script_exists(hashes).await?;
        for (script, present) in self.scripts.iter().zip(present) {
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

/// What scripts need besides a call's own fields: settings and this
/// broker's identity, the same for every call of one store.
#[derive(Clone, Debug)]
pub struct ScriptContext {
    /// Where keys live.
    pub keys: KeyLayout,
    /// How long a lock's last fence is remembered after its last grant, ms.
    pub fence_idle_ms: u64,
    /// How long a released lease is remembered, ms.
    pub release_memo_ms: u64,
    /// The caller's id in announcements, so it can tell its own.
    pub broker_id: String,
    /// The Pub/Sub channel of announcements.
    pub wake_channel: String,
    /// Cluster mode: each lock announces on a sharded channel of its own
    /// ([`KeyLayout::lock_wake_channel`]) instead of `wake_channel`.
    pub wakes_per_lock: bool,
    /// One node of a quorum: scripts that set an expiry also raise the
    /// node's lease horizon, and fair queues are ordered by the broker's
    /// arrival times so that every node's copy agrees.
    pub quorum_node: bool,
}

impl ScriptContext {
    /// Where `name`'s releases are announced.
    pub fn wake_channel_of(&self, name: &lockbroker_core::LockName) -> String {
        if self.wakes_per_lock {
            self.keys.lock_wake_channel(name)
        } else {
            self.wake_channel.clone()
        }
    }
}

/// One call of one script: its keys and arguments in the order the Lua reads
/// them, and how its reply reads.
pub trait ScriptCall {
    /// What the reply means.
    type Output;
    /// The script this calls.
    const SCRIPT: ScriptName;
    /// `KEYS`, in order.
    fn keys(&self, context: &ScriptContext) -> Vec<String>;
    /// `ARGV`, in order.
    fn args(&self, context: &ScriptContext) -> Vec<String>;
    /// Reads the script's array reply.
    fn decode(&self, reply: &mut Reply) -> Result<Self::Output, StoreError>;
}

/// One element of a script's array reply, whichever client read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyItem {
    /// A Lua number.
    Int(i64),
    /// A Lua string.
    Text(String),
    /// Anything else (a Lua `false` or `nil`).
    Nil,
}

/// Reads a script's array reply front to back.
pub struct Reply(std::vec::IntoIter<ReplyItem>);

impl Reply {
    /// A reply of `items`.
    pub fn new(items: Vec<ReplyItem>) -> Self {
        Self(items.into_iter())
    }

    /// A fred reply: an array, or a single value (a script returning `1`)
    /// read as an array of one.
    pub fn from_value(value: Value) -> Self {
        let values = match value {
            Value::Array(values) => values,
            single => vec![single],
        };
        let items = values
            .into_iter()
            .map(|value| match value {
                Value::Integer(n) => ReplyItem::Int(n),
                Value::Null => ReplyItem::Nil,
                other => other.into_string().map_or(ReplyItem::Nil, ReplyItem::Text),
            })
            .collect();
        Self::new(items)
    }

    fn next(&mut self) -> Result<ReplyItem, StoreError> {
        self.0
            .next()
            .ok_or_else(|| StoreError::Protocol("script reply is too short".into()))
    }

    /// The next item as an integer.
    pub fn int(&mut self) -> Result<i64, StoreError> {
        match self.next()? {
            ReplyItem::Int(n) => Ok(n),
            ReplyItem::Text(text) => text
                .parse()
                .map_err(|_| StoreError::Protocol("expected an integer in script reply".into())),
            ReplyItem::Nil => Err(StoreError::Protocol(
                "expected an integer in script reply".into(),
            )),
        }
    }

    /// The next item as a non-negative integer.
    pub fn uint(&mut self) -> Result<u64, StoreError> {
        u64::try_from(self.int()?)
            .map_err(|_| StoreError::Protocol("negative number in script reply".into()))
    }

    /// The next item as text.
    pub fn text(&mut self) -> Result<String, StoreError> {
        match self.next()? {
            ReplyItem::Text(text) => Ok(text),
            ReplyItem::Int(n) => Ok(n.to_string()),
            ReplyItem::Nil => Err(StoreError::Protocol("expected text in script reply".into())),
        }
    }

    /// The next item as text, `None` when empty (the scripts' "no owner").
    pub fn optional_text(&mut self) -> Result<Option<String>, StoreError> {
        let text = self.text()?;
        Ok((!text.is_empty()).then_some(text))
    }

    /// Whether items are left.
    pub fn has_more(&self) -> bool {
        self.0.len() > 0
    }
}
