//! The shared client scenarios (`clients/scenarios/*.json`, described in its
//! README) replayed through this client's public API against a real broker.
//! Every file runs; a step this client cannot express fails the run, as does
//! a malformed one, and so does a folder without scenarios. A failure names
//! the file, the step and what differed.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use lockbroker_client::{
    AcquireOptions, ChangeKind, Client, Election, Error, Event, EventKind, FenceCheckResponse,
    Lease, LeaseEnd, LeaseKind, LockMode, Session, DEFAULT_TTL,
};
use lockbroker_tests::{RedisServer, TestApp};
use serde_json::{json, Map, Number, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};

use crate::client;
use arguments::whole;
use candidates::{leader_state, Candidate, Term};
use operations::error_of;

mod arguments;
mod candidates;
mod expectations;
mod operations;
mod sessions;

/// Every operation this runner knows, and the arguments it takes.
const STEP_ARGS: &[(&str, &[&str])] = &[
    (
        "acquire",
        &["lock", "ttl_ms", "wait_ms", "owner", "shared", "request_id"],
    ),
    (
        "acquire_permit",
        &["semaphore", "limit", "ttl_ms", "wait_ms", "owner"],
    ),
    ("lock", &["lock", "ttl_ms", "owner", "shared"]),
    ("await", &["step"]),
    ("extend", &["lease", "ttl_ms"]),
    ("extend_token", &["lease", "ttl_ms"]),
    ("release", &["lease"]),
    ("lease_state", &["lease"]),
    ("status", &["lock"]),
    ("semaphore_status", &["semaphore"]),
    ("check_fence", &["lock", "fence"]),
    ("check_semaphore_fence", &["semaphore", "fence"]),
    ("lease_check_fence", &["lease"]),
    ("watch", &["lock"]),
    ("next_event", &["watch"]),
    ("sleep", &["ms"]),
    ("open_session", &["ttl_ms", "owner", "lock_delay_ms"]),
    (
        "session_acquire",
        &["session", "lock", "shared", "wait_ms", "owner"],
    ),
    (
        "session_acquire_permit",
        &["session", "semaphore", "limit", "wait_ms", "owner"],
    ),
    ("session_status", &["session"]),
    ("session_state", &["session"]),
    ("close_session", &["session"]),
    ("end_session_elsewhere", &["session"]),
    ("campaign", &["lock", "ttl_ms", "max_hold_ms", "owner"]),
    ("leader_state", &["candidate"]),
    ("resign", &["candidate"]),
];
/// Keys every step may have, besides its operation's arguments.
const COMMON_KEYS: &[&str] = &["do", "as", "expect", "within_ms", "async", "note"];
/// Reads, which `within_ms` may repeat.
const READ_STEPS: &[&str] = &[
    "status",
    "semaphore_status",
    "check_fence",
    "check_semaphore_fence",
    "lease_check_fence",
    "lease_state",
    "leader_state",
    "session_status",
    "session_state",
];
/// The grants (and campaigns) `async` may start.
const ASYNC_STEPS: &[&str] = &["acquire", "acquire_permit", "lock", "campaign"];
/// A candidate's TTL when the step names none, as [`Client::election`] has it.
const ELECTION_TTL: Duration = Duration::from_secs(10);
/// A candidate's longest term when the step names none, as [`Client::election`] has it.
const ELECTION_MAX_HOLD: Duration = Duration::from_secs(24 * 3600);
/// How often a `within_ms` read is repeated.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// How long `next_event` waits.
const EVENT_WAIT: Duration = Duration::from_secs(5);
/// How long an `async` step may take to finish once awaited.
const AWAIT_LIMIT: Duration = Duration::from_secs(30);

/// A result's fields, as the scenarios name them.
type Fields = Map<String, Value>;

/// Why a run stopped: a step that came out otherwise than expected, or one
/// that cannot run as written (or that this client cannot express).
type Failure = String;

#[tokio::test]
async fn every_scenario_replays_through_the_client() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/scenarios");
    let files = scenario_files(&folder);
    assert!(!files.is_empty(), "no scenario in {}", folder.display());
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);

    let mut failures = Vec::new();
    for path in &files {
        let file = path.file_name().map_or_else(
            || path.display().to_string(),
            |name| name.to_string_lossy().into_owned(),
        );
        if let Err(failure) = replay_file(&client, path).await {
            failures.push(format!("{file}: {failure}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} scenarios failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

/// The `*.json` files of `folder`, in name order; none if it cannot be read.
fn scenario_files(folder: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    files
}

/// One scenario file, replayed; whatever it holds is released at the end,
/// whether it passed or not.
async fn replay_file(client: &Client, path: &Path) -> Result<(), Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot be read: {e}"))?;
    let scenario: Value = serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
    let scenario = scenario.as_object().ok_or("a scenario is an object")?;
    let mut keys: Vec<&str> = scenario.keys().map(String::as_str).collect();
    keys.sort_unstable();
    if keys != ["about", "steps"] {
        return Err(format!("a scenario has about and steps only, not {keys:?}"));
    }
    let about = scenario["about"].as_str().unwrap_or_default();
    let steps = scenario["steps"].as_array().map_or(&[][..], Vec::as_slice);
    if about.is_empty() || steps.is_empty() {
        return Err("a scenario needs an about and steps".into());
    }
    let mut replay = Replay::new(client.clone());
    let run = replay.run(steps).await;
    let cleanup = replay.finish().await;
    run.and(cleanup)
}

/// What a step (or an async one, once awaited) came to.
struct Outcome {
    /// The result's fields, or the client's error to compare with `expect`.
    result: Result<Fields, Error>,
    /// The lease a grant made.
    lease: Option<Arc<Lease>>,
}

impl Outcome {
    fn fields(fields: Fields) -> Self {
        Self {
            result: Ok(fields),
            lease: None,
        }
    }

    /// A call's answer: its fields, or its error.
    fn of<T>(answer: Result<T, Error>, fields: impl FnOnce(T) -> Fields) -> Self {
        Self {
            result: answer.map(fields),
            lease: None,
        }
    }
}

/// A watch whose events a task hands over through a channel, so it opens at
/// its step and a later step can wait for the next event with a timeout.
struct OpenWatch {
    events: mpsc::UnboundedReceiver<Result<Event, Error>>,
    pump: JoinHandle<()>,
}

/// One scenario's run: its names' prefix, and what its steps kept.
struct Replay {
    client: Client,
    prefix: String,
    results: HashMap<String, Fields>,
    leases: HashMap<String, Arc<Lease>>,
    /// Leases no name reaches (a grant without `as`, or a name used again):
    /// held until the end, as the other runners hold them, since dropping a
    /// lease here would release it.
    unnamed: Vec<Arc<Lease>>,
    watches: HashMap<String, OpenWatch>,
    pending: HashMap<String, JoinHandle<Outcome>>,
    candidates: HashMap<String, Candidate>,
    sessions: HashMap<String, Session>,
}

impl Replay {
    fn new(client: Client) -> Self {
        Self {
            client,
            prefix: format!("scn-{:08x}-", rand::random::<u32>()),
            results: HashMap::new(),
            leases: HashMap::new(),
            unnamed: Vec::new(),
            watches: HashMap::new(),
            pending: HashMap::new(),
            candidates: HashMap::new(),
            sessions: HashMap::new(),
        }
    }

    async fn run(&mut self, steps: &[Value]) -> Result<(), Failure> {
        for (i, step) in steps.iter().enumerate() {
            let step = step
                .as_object()
                .ok_or_else(|| format!("step {}: a step is an object", i + 1))?;
            let op = validate(i, step)?;
            let label = format!("step {} ({op})", i + 1);
            let name = step.get("as").and_then(Value::as_str).map(str::to_owned);
            if step.get("async") == Some(&Value::Bool(true)) && op == "campaign" {
                let election = self.election(&label, step)?;
                let campaign = election.clone();
                let task = tokio::spawn(async move { campaign.campaign().await });
                let candidate = Candidate {
                    election,
                    term: Term::Campaigning(task),
                };
                // validate() made sure an async step has `as`.
                self.candidates.insert(name.unwrap_or_default(), candidate);
                continue;
            }
            if step.get("async") == Some(&Value::Bool(true)) {
                let grant = self.grant(&label, op, step)?;
                let task = tokio::spawn(grant.send(self.client.clone(), self.prefix.clone()));
                // validate() made sure an async step has `as`.
                self.pending.insert(name.unwrap_or_default(), task);
                continue;
            }
            let empty = Fields::new();
            let expect = step.get("expect").and_then(Value::as_object);
            let expect = expect.unwrap_or(&empty);
            let within = match step.get("within_ms") {
                Some(ms) => whole(&label, ms)?,
                None => 0,
            };
            let deadline = Instant::now() + Duration::from_millis(within);
            loop {
                let done = self.step(&label, op, step).await?;
                let problem = self
                    .check(expect, &done)
                    .map_err(|e| format!("{label}: {e}"))?;
                match problem {
                    None => {
                        self.keep(name, done);
                        break;
                    }
                    Some(problem) if Instant::now() > deadline => {
                        return Err(format!("{label}: {problem}"));
                    }
                    Some(_) => tokio::time::sleep(RETRY_PAUSE).await,
                }
            }
        }
        Ok(())
    }

    fn keep(&mut self, name: Option<String>, done: Outcome) {
        let Some(name) = name else {
            self.unnamed.extend(done.lease);
            return;
        };
        let fields = match done.result {
            Ok(fields) => fields,
            Err(_) => Fields::new(),
        };
        self.results.insert(name.clone(), fields);
        if let Some(lease) = done.lease {
            self.unnamed.extend(self.leases.insert(name, lease));
        }
    }

    /// Closes the watches and releases what the scenario still holds.
    async fn finish(mut self) -> Result<(), Failure> {
        for watch in self.watches.values() {
            watch.pump.abort();
        }
        for (_, candidate) in self.candidates.drain() {
            match candidate.term {
                Term::Campaigning(task) => task.abort(),
                Term::Won(leadership) => {
                    let _ = leadership.resign().await;
                }
                Term::Failed(_) | Term::Resigned => {}
            }
        }
        let mut late = Vec::new();
        for (name, mut task) in self.pending.drain() {
            match timeout(AWAIT_LIMIT, &mut task).await {
                Ok(Ok(done)) => self.unnamed.extend(done.lease),
                _ => {
                    task.abort();
                    late.push(name);
                }
            }
        }
        for lease in self.leases.values().chain(&self.unnamed) {
            if lease.end().is_none() {
                let _ = lease.release().await;
            }
        }
        for session in self.sessions.values() {
            if session.end().is_none() {
                let _ = session.close().await;
            }
        }
        match late.as_slice() {
            [] => Ok(()),
            _ => Err(format!(
                "the async steps {late:?} did not finish within {} s",
                AWAIT_LIMIT.as_secs()
            )),
        }
    }
}

/// What every step lists: the operation, which this runner must know, and
/// keys that belong to it.
fn validate(i: usize, step: &Fields) -> Result<&'static str, Failure> {
    let n = i + 1;
    let wanted = step.get("do").and_then(Value::as_str);
    let Some((op, args)) = STEP_ARGS.iter().find(|(op, _)| Some(*op) == wanted) else {
        let wanted = step.get("do").map_or("none".into(), Value::to_string);
        return Err(format!(
            "step {n}: this client cannot express the operation {wanted}"
        ));
    };
    let mut unknown: Vec<&str> = (step.keys().map(String::as_str))
        .filter(|key| !COMMON_KEYS.contains(key) && !args.contains(key))
        .collect();
    unknown.sort_unstable();
    if !unknown.is_empty() {
        return Err(format!("step {n} ({op}): unknown keys {unknown:?}"));
    }
    if step.contains_key("within_ms") && !READ_STEPS.contains(op) {
        return Err(format!("step {n} ({op}): within_ms repeats reads only"));
    }
    if step.get("as").is_some_and(|name| !name.is_string()) {
        return Err(format!("step {n} ({op}): as must be a string"));
    }
    let is_async = step.get("async") == Some(&Value::Bool(true));
    if is_async && (!ASYNC_STEPS.contains(op) || !step.contains_key("as")) {
        return Err(format!("step {n} ({op}): async is for grants kept with as"));
    }
    if step.get("expect").is_some_and(|expect| !expect.is_object()) {
        return Err(format!("step {n} ({op}): expect must be an object"));
    }
    Ok(*op)
}

/// The fields of a `json!({..})`.
fn object(value: Value) -> Fields {
    let Value::Object(fields) = value else {
        unreachable!("fields are built as a JSON object")
    };
    fields
}
