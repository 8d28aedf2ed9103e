//! The Lua behind every lock step, as one Redis Functions library. Each
//! step lives in `scripts/*.lua`; the library defines the shared helpers
//! once and registers each step as a function, so a call runs only its own
//! body (an `EVALSHA` of a script ran the whole prelude's definitions on
//! every call). The library's name carries a hash of its code, so brokers of
//! two versions can share one Redis during a rolling upgrade, each calling
//! its own functions. A Redis that lost the library (restarted without its
//! data, or a new Cluster primary) answers "Function not found": the call
//! loads it and runs again. Redis Functions need Redis 7.0 or later.
//!
//! Every script's calling convention (its keys, arguments and reply) is
//! written once in Rust, in [`calls`], as a type implementing [`ScriptCall`]:
//! the store and the benchmark's direct client both call the scripts through
//! these definitions.

pub mod calls;
mod command;

pub use command::CallText;

use fred::bytes_utils::Str;
use fred::clients::Client;
use fred::interfaces::{ClientLike, FunctionInterface};
use fred::types::{CustomCommand, Value};
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
    /// `session.lua`
    Session,
    /// `acquire_together.lua` (single and Sentinel mode): after `acquire`
    /// and `hold`, which it calls.
    AcquireTogether,
    /// `extend_together.lua` (single and Sentinel mode): after `extend`
    /// and `hold_extend`, which it calls.
    ExtendTogether,
}

impl ScriptName {
    /// Every script, in [`Scripts`] order.
    pub const ALL: [Self; 16] = [
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
        Self::Session,
        Self::AcquireTogether,
        Self::ExtendTogether,
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
            Self::Session => "session",
            Self::AcquireTogether => "acquire_together",
            Self::ExtendTogether => "extend_together",
        }
    }

    /// Whether the script may write. Only `status.lua` reads alone.
    fn writes(self) -> bool {
        !matches!(self, Self::Status)
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
            Self::Session => include_str!("../scripts/session.lua"),
            Self::AcquireTogether => include_str!("../scripts/acquire_together.lua"),
            Self::ExtendTogether => include_str!("../scripts/extend_together.lua"),
        }
    }
}

/// All lock scripts, as one Redis Functions library built once at startup.
pub struct Scripts {
    /// The library's code: `FUNCTION LOAD`'s argument.
    library: String,
    /// The library's name, `lockbroker_<hash of its code>`.
    library_name: String,
    /// Each script's function name, in [`ScriptName::ALL`] order.
    functions: Vec<Str>,
}

impl Scripts {
    /// Builds the library: the shared prelude once, then each body as a
    /// function of `KEYS` and `ARGV`, with the flags of its `#!lua
    /// flags=...` line. Read-only steps are flagged `no-writes`, so they
    /// answer while Redis refuses writes (out of memory), as they did as
    /// scripts.
    pub fn new() -> Self {
        let mut bodies = String::new();
        let mut registered = Vec::new();
        for name in ScriptName::ALL {
            let body = name.body();
            let (flags, body) = match body.split_once('\n') {
                Some((first, rest)) if first.starts_with("#!lua") => (
                    first
                        .split_once("flags=")
                        .map_or("", |(_, flags)| flags.trim()),
                    rest,
                ),
                _ => (if name.writes() { "" } else { "no-writes" }, body),
            };
            let flags: Vec<String> = (flags.split(',').filter(|f| !f.is_empty()))
                .map(|f| format!("'{f}'"))
                .collect();
            registered.push((name, flags.join(", ")));
            bodies.push_str(&format!(
                "local function {}(KEYS, ARGV)\n{body}\nend\n",
                name.as_str()
            ));
        }
        let code = format!("{PRELUDE}\n{bodies}");
        let hash = &fred::util::sha1_hash(&code)[..12];
        let library_name = format!("lockbroker_{hash}");
        let mut library = format!("#!lua name={library_name}\n{code}");
        let mut functions = Vec::new();
        for (name, flags) in registered {
            let function = format!("{library_name}_{}", name.as_str());
            library.push_str(&format!(
                "redis.register_function{{function_name = '{function}', callback = {}, \
                 flags = {{{flags}}}}}\n",
                name.as_str()
            ));
            functions.push(Str::from(function));
        }
        Self {
            library,
            library_name,
            functions,
        }
    }

    /// The library's code, for `FUNCTION LOAD`.
    pub fn library(&self) -> &str {
        &self.library
    }

    /// The library's name, which changes with its code.
    pub fn library_name(&self) -> &str {
        &self.library_name
    }

    /// The function that runs the script `name`.
    pub fn function(&self, name: ScriptName) -> &str {
        self.function_name(name)
    }

    fn function_name(&self, name: ScriptName) -> &Str {
        // `ALL` lists the names in declaration order, so a name's number is
        // its place in `functions`.
        &self.functions[name as usize]
    }

    /// Runs the script `name` with `keys` and `args` on `client`. A Redis
    /// that lacks the library answers "Function not found"
    /// ([`is_missing_function`]): the caller loads it ([`Scripts::load`])
    /// and runs the step again.
    pub async fn fcall<T: Into<Str> + std::borrow::Borrow<str>>(
        &self,
        client: &Client,
        name: ScriptName,
        keys: Vec<T>,
        args: Vec<T>,
    ) -> Result<Value, fred::error::Error> {
        let function = self.function_name(name);
        let (slot, command) = command::fcall(function, keys, args, client.is_clustered());
        client
            .custom(CustomCommand::new_static("FCALL", slot, false), command)
            .await
    }

    /// Loads the library into the Redis behind `client` (every primary of a
    /// Cluster), replacing a copy of the same code: idempotent.
    pub async fn load(&self, client: &Client) -> Result<(), fred::error::Error> {
        if client.is_clustered() {
            let _: Value = client
                .function_load_cluster(true, self.library.as_str())
                .await?;
        } else {
            let _: Value = client.function_load(true, self.library.as_str()).await?;
        }
        Ok(())
    }
}

/// Whether `error` says Redis has no such function: it lost the library.
pub fn is_missing_function(error: &fred::error::Error) -> bool {
    error.details().contains("Function not found")
}

/// Whether `error` says Redis has no Functions at all (older than 7.0), and
/// if so what to tell the operator.
pub fn too_old_for_functions(error: &fred::error::Error) -> Option<String> {
    let details = error.details();
    let unknown = details.contains("unknown command") || details.contains("unknown subcommand");
    (unknown && (details.contains("FCALL") || details.contains("FUNCTION"))).then(|| {
        "this Redis has no Redis Functions: lockbroker needs Redis 7.0 or later, in every \
             mode (its lock steps run as one Functions library)"
            .to_owned()
    })
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
    /// What a script that may announce a change of `name` needs, as one
    /// argument (prelude.lua's `announce` splits it only when it announces):
    /// `<channel> <broker id> <lock name>`. Neither of the last two holds a
    /// space (wakes.rs splits the announcement itself on spaces), so the
    /// channel, a key prefix's own, may.
    pub fn announcer_of(&self, name: &lockbroker_core::LockName) -> String {
        let channel = match self.wakes_per_lock {
            true => std::borrow::Cow::Owned(self.keys.lock_wake_channel(name)),
            false => std::borrow::Cow::Borrowed(self.wake_channel.as_str()),
        };
        [&*channel, self.broker_id.as_str(), &name.wire()].join(" ")
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

    /// The next `count` items, as a reply of their own: one part of a
    /// reply that carries several (`acquire_together.lua`).
    pub fn take(&mut self, count: usize) -> Result<Reply, StoreError> {
        if self.0.len() < count {
            return Err(StoreError::Protocol("script reply is too short".into()));
        }
        let items: Vec<ReplyItem> = self.0.by_ref().take(count).collect();
        Ok(Reply::new(items))
    }
}
