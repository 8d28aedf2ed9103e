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
    Lease, LeaseEnd, LeaseKind, LockMode, DEFAULT_TTL,
};
use lockbroker_tests::{RedisServer, TestApp};
use serde_json::{json, Map, Number, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};

use crate::client;
use candidates::{leader_state, Candidate, Term};

mod candidates;

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
        match late.as_slice() {
            [] => Ok(()),
            _ => Err(format!(
                "the async steps {late:?} did not finish within {} s",
                AWAIT_LIMIT.as_secs()
            )),
        }
    }

    // -- the operations ------------------------------------------------------

    /// Runs one operation through the client's public API; the client's
    /// errors become the outcome.
    async fn step(&mut self, label: &str, op: &str, step: &Fields) -> Result<Outcome, Failure> {
        let client = self.client.clone();
        let outcome = match op {
            "acquire" | "acquire_permit" | "lock" => {
                let grant = self.grant(label, op, step)?;
                grant.send(client, self.prefix.clone()).await
            }
            "await" => {
                let name = self.text(label, step, "step")?;
                match self.candidates.get_mut(&name) {
                    Some(candidate) if !self.pending.contains_key(&name) => {
                        candidate.settle(true, label).await?;
                        let done = candidate.elected(label)?;
                        let fields = done
                            .result
                            .as_ref()
                            .map_or_else(|_| Fields::new(), Clone::clone);
                        self.results.insert(name, fields);
                        done
                    }
                    _ => self.finish_async(label, &name).await?,
                }
            }
            "extend" => {
                let lease = self.lease(label, step)?;
                let ttl = self.duration(label, step, "ttl_ms", None)?;
                Outcome::of(lease.extend(ttl).await, |_| Fields::new())
            }
            "extend_token" => {
                let lease = self.lease(label, step)?;
                let ttl = self.duration(label, step, "ttl_ms", None)?;
                let (name, token) = (lease.name(), lease.token());
                let renewal = match lease.kind() {
                    LeaseKind::Permit { .. } => client.extend_permit(name, token, ttl).await,
                    LeaseKind::Exclusive | LeaseKind::Shared => {
                        client.extend(name, token, ttl).await
                    }
                };
                Outcome::of(renewal, |renewal| {
                    object(json!({"fence": renewal.fence, "ttl_ms": renewal.ttl_ms}))
                })
            }
            "release" => {
                let lease = self.lease(label, step)?;
                Outcome::of(lease.release().await, |_| Fields::new())
            }
            "lease_state" => {
                let lease = self.lease(label, step)?;
                Outcome::fields(lease_state(label, &lease)?)
            }
            "status" => {
                let status = client.status(&self.name(label, step, "lock")?).await;
                Outcome::of(status, |s| {
                    object(json!({
                        "held": s.held, "owner": s.owner, "fence": s.fence, "mode": s.mode,
                        "holder_count": s.holder_count, "waiting": s.waiting,
                    }))
                })
            }
            "semaphore_status" => {
                let name = self.name(label, step, "semaphore")?;
                Outcome::of(client.semaphore_status(&name).await, |s| {
                    object(json!({
                        "limit": s.limit, "held": s.held, "available": s.available,
                        "fence": s.fence,
                    }))
                })
            }
            "check_fence" => {
                let (name, fence) = (self.name(label, step, "lock")?, self.fence(label, step)?);
                self.fence_check(client.check_fence(&name, fence).await)
            }
            "check_semaphore_fence" => {
                let name = self.name(label, step, "semaphore")?;
                let fence = self.fence(label, step)?;
                self.fence_check(client.check_semaphore_fence(&name, fence).await)
            }
            "lease_check_fence" => {
                let lease = self.lease(label, step)?;
                self.fence_check(lease.check_fence().await)
            }
            "watch" => {
                self.open_watch(label, step)?;
                Outcome::fields(Fields::new())
            }
            "next_event" => {
                let name = self.text(label, step, "watch")?;
                self.next_event(label, &name).await?
            }
            "sleep" => {
                tokio::time::sleep(self.duration(label, step, "ms", Some(Duration::ZERO))?).await;
                Outcome::fields(Fields::new())
            }
            "campaign" => {
                let Some(name) = step.get("as").and_then(Value::as_str) else {
                    return Err(format!("{label}: a candidate needs as"));
                };
                let election = self.election(label, step)?;
                let term = match timeout(AWAIT_LIMIT, election.campaign()).await {
                    Ok(Ok(leadership)) => Term::Won(leadership),
                    Ok(Err(error)) => Term::Failed(Some(error)),
                    Err(_) => {
                        let limit = AWAIT_LIMIT.as_secs();
                        return Err(format!("{label}: not elected within {limit} s"));
                    }
                };
                let mut candidate = Candidate { election, term };
                let outcome = candidate.elected(label)?;
                self.candidates.insert(name.to_owned(), candidate);
                outcome
            }
            "leader_state" => {
                let candidate = self.candidate(label, step)?;
                candidate.settle(false, label).await?;
                leader_state(candidate).await
            }
            "resign" => {
                let candidate = self.candidate(label, step)?;
                match std::mem::replace(&mut candidate.term, Term::Resigned) {
                    Term::Won(leadership) => {
                        Outcome::of(leadership.resign().await, |_| Fields::new())
                    }
                    // Dropping a campaign ends it.
                    Term::Campaigning(task) => {
                        task.abort();
                        Outcome::fields(Fields::new())
                    }
                    Term::Failed(_) | Term::Resigned => Outcome::fields(Fields::new()),
                }
            }
            _ => return Err(format!("{label}: this client cannot express the operation")),
        };
        Ok(outcome)
    }

    /// A grant step's arguments, resolved now, to send now or in a task.
    fn grant(&self, label: &str, op: &str, step: &Fields) -> Result<Grant, Failure> {
        let mut options = AcquireOptions {
            ttl: self.duration(label, step, "ttl_ms", Some(DEFAULT_TTL))?,
            owner: self.optional_text(label, step, "owner")?,
            ..AcquireOptions::default()
        };
        if op != "lock" {
            options.wait = self.duration(label, step, "wait_ms", Some(Duration::ZERO))?;
        }
        if op == "acquire_permit" {
            let limit = self.whole_arg(label, step, "limit")?;
            let limit = u32::try_from(limit)
                .map_err(|_| format!("{label}: limit {limit} is past what a semaphore takes"))?;
            let name = self.name(label, step, "semaphore")?;
            return Ok(Grant::Permit {
                name,
                limit,
                options,
            });
        }
        if self.arg(label, step, "shared")? == Value::Bool(true) {
            options.mode = LockMode::Shared;
        }
        let name = self.name(label, step, "lock")?;
        if op == "lock" {
            return Ok(Grant::Renewed { name, options });
        }
        options.request_id = self.optional_text(label, step, "request_id")?;
        Ok(Grant::Single { name, options })
    }

    /// A `campaign` step's election: its lock, TTL, longest term and owner.
    fn election(&self, label: &str, step: &Fields) -> Result<Election, Failure> {
        let options = AcquireOptions {
            ttl: self.duration(label, step, "ttl_ms", Some(ELECTION_TTL))?,
            max_hold: self.duration(label, step, "max_hold_ms", Some(ELECTION_MAX_HOLD))?,
            owner: self.optional_text(label, step, "owner")?,
            ..AcquireOptions::default()
        };
        let name = self.name(label, step, "lock")?;
        Ok(self.client.election(name).with_options(options))
    }

    fn candidate(&mut self, label: &str, step: &Fields) -> Result<&mut Candidate, Failure> {
        let name = self.text(label, step, "candidate")?;
        self.candidates
            .get_mut(&name)
            .ok_or_else(|| format!("{label}: no candidate {name:?}"))
    }

    /// `await`: the async step `name`'s outcome, kept under its name.
    async fn finish_async(&mut self, label: &str, name: &str) -> Result<Outcome, Failure> {
        let mut task = self
            .pending
            .remove(name)
            .ok_or_else(|| format!("{label}: no async step {name:?} to await"))?;
        let done = match timeout(AWAIT_LIMIT, &mut task).await {
            Ok(Ok(done)) => done,
            Ok(Err(error)) => return Err(format!("{label}: the async step failed: {error}")),
            Err(_) => {
                task.abort();
                let limit = AWAIT_LIMIT.as_secs();
                return Err(format!(
                    "{label}: the async step did not finish within {limit} s"
                ));
            }
        };
        if let Some(lease) = &done.lease {
            let replaced = self.leases.insert(name.to_owned(), Arc::clone(lease));
            self.unnamed.extend(replaced);
        }
        let fields = done
            .result
            .as_ref()
            .map_or_else(|_| Fields::new(), Clone::clone);
        self.results.insert(name.to_owned(), fields);
        Ok(done)
    }

    fn fence_check(&self, answer: Result<FenceCheckResponse, Error>) -> Outcome {
        Outcome::of(answer, |check| {
            object(json!({
                "name": unprefixed(&self.prefix, &check.name), "fence": check.fence,
                "current": check.current, "held": check.held,
                "expires_in_ms": check.expires_in_ms,
            }))
        })
    }

    /// Opens the watch; a task reads its events from now on.
    fn open_watch(&mut self, label: &str, step: &Fields) -> Result<(), Failure> {
        let Some(as_name) = step.get("as").and_then(Value::as_str) else {
            return Err(format!("{label}: a watch needs as"));
        };
        let mut watch = self.client.watch(&self.name(label, step, "lock")?);
        let (sender, events) = mpsc::unbounded_channel();
        let pump = tokio::spawn(async move {
            while let Some(event) = watch.next().await {
                if sender.send(event).is_err() {
                    return;
                }
            }
        });
        let open = OpenWatch { events, pump };
        if let Some(replaced) = self.watches.insert(as_name.to_owned(), open) {
            replaced.pump.abort();
        }
        Ok(())
    }

    async fn next_event(&mut self, label: &str, name: &str) -> Result<Outcome, Failure> {
        let watch =
            (self.watches.get_mut(name)).ok_or_else(|| format!("{label}: no watch {name:?}"))?;
        let event = match timeout(EVENT_WAIT, watch.events.recv()).await {
            Ok(Some(Ok(event))) => event,
            Ok(Some(Err(error))) => return Ok(Outcome::of(Err(error), |()| Fields::new())),
            Ok(None) => return Err(format!("{label}: the watch ended")),
            Err(_) => {
                let wait = EVENT_WAIT.as_secs();
                return Err(format!("{label}: no event within {wait} s"));
            }
        };
        let fields = match event.kind {
            EventKind::State(s) => json!({
                "type": "state", "held": s.held, "owner": s.owner, "fence": s.fence, "mode": s.mode,
            }),
            EventKind::Change(change) => json!({
                "type": change_type(change.kind), "fence": change.fence, "owner": change.owner,
                "mode": change.mode,
            }),
            EventKind::Lagged { .. } => json!({"type": "lagged"}),
            EventKind::StateComplete { .. } => json!({"type": "state_complete"}),
            EventKind::SemaphoreState(_) => {
                return Err(format!("{label}: a semaphore's state on a lock's watch"));
            }
        };
        Ok(Outcome::fields(object(fields)))
    }

    // -- arguments -----------------------------------------------------------

    /// The argument `key`, with a `$name.field` resolved; null when absent.
    fn arg(&self, label: &str, step: &Fields, key: &str) -> Result<Value, Failure> {
        self.resolve(label, step.get(key).unwrap_or(&Value::Null))
    }

    /// A name within the scenario, with the run's prefix before it.
    fn name(&self, label: &str, step: &Fields, key: &str) -> Result<String, Failure> {
        match self.arg(label, step, key)? {
            Value::String(name) if !name.is_empty() => Ok(format!("{}{name}", self.prefix)),
            _ => Err(format!("{label}: {key} must name a {key}")),
        }
    }

    /// A string argument that must be there.
    fn text(&self, label: &str, step: &Fields, key: &str) -> Result<String, Failure> {
        self.optional_text(label, step, key)?
            .ok_or_else(|| format!("{label}: {key} is missing"))
    }

    /// A string argument, or `None` when absent or null.
    fn optional_text(
        &self,
        label: &str,
        step: &Fields,
        key: &str,
    ) -> Result<Option<String>, Failure> {
        match self.arg(label, step, key)? {
            Value::Null => Ok(None),
            Value::String(text) => Ok(Some(text)),
            other => Err(format!("{label}: {key} {other} is not a string")),
        }
    }

    fn whole_arg(&self, label: &str, step: &Fields, key: &str) -> Result<u64, Failure> {
        whole(label, &self.arg(label, step, key)?)
    }

    fn fence(&self, label: &str, step: &Fields) -> Result<u64, Failure> {
        self.whole_arg(label, step, "fence")
    }

    /// Whole milliseconds as a duration; `default` when absent, which
    /// without one this client cannot express.
    fn duration(
        &self,
        label: &str,
        step: &Fields,
        key: &str,
        default: Option<Duration>,
    ) -> Result<Duration, Failure> {
        if !step.contains_key(key) {
            return default.ok_or_else(|| format!("{label}: this client needs {key}"));
        }
        Ok(Duration::from_millis(self.whole_arg(label, step, key)?))
    }

    fn lease(&self, label: &str, step: &Fields) -> Result<Arc<Lease>, Failure> {
        let name = self.text(label, step, "lease")?;
        let lease = self.leases.get(&name);
        lease
            .cloned()
            .ok_or_else(|| format!("{label}: no lease {name:?}"))
    }

    /// `"$name.field"` is that field of a kept result; any other value is itself.
    fn resolve(&self, label: &str, value: &Value) -> Result<Value, Failure> {
        let Some(reference) = value.as_str().and_then(|text| text.strip_prefix('$')) else {
            return Ok(value.clone());
        };
        let (name, field) = reference.split_once('.').unwrap_or((reference, ""));
        let kept = self.results.get(name).and_then(|result| result.get(field));
        kept.cloned()
            .ok_or_else(|| format!("{label}: {value} names no kept result's field"))
    }

    // -- expectations --------------------------------------------------------

    /// What is wrong with an outcome given the step's `expect`; `None` if
    /// nothing. An expectation that cannot be read is a failure of its own.
    fn check(&self, expect: &Fields, done: &Outcome) -> Result<Option<String>, Failure> {
        let Some(want) = expect.get("error") else {
            return match &done.result {
                Err(error) => Ok(Some(format!("failed: {error} ({error:?})"))),
                Ok(fields) => self.fields(expect, fields),
            };
        };
        let error = match &done.result {
            Err(error) => error,
            Ok(fields) => {
                let got = Value::Object(fields.clone());
                return Ok(Some(format!(
                    "succeeded ({got}), but the scenario expects the error {want}"
                )));
            }
        };
        let kinds: Vec<&str> = match want {
            Value::String(kind) => vec![kind.as_str()],
            Value::Array(kinds) => kinds.iter().filter_map(Value::as_str).collect(),
            _ => {
                return Err(format!(
                    "expect: error {want} is not a kind or list of kinds"
                ))
            }
        };
        let (kind, fields) = error_of(error);
        if !kinds.contains(&kind) {
            return Ok(Some(format!(
                "failed with {kind} ({error}), but the scenario expects {want}"
            )));
        }
        let mut rest = expect.clone();
        rest.remove("error");
        self.fields(&rest, &fields)
    }

    fn fields(&self, expect: &Fields, got: &Fields) -> Result<Option<String>, Failure> {
        let mut keys: Vec<&String> = expect.keys().collect();
        keys.sort();
        for key in keys {
            let Some(value) = got.get(key) else {
                let got = Value::Object(got.clone());
                return Ok(Some(format!(
                    "the result has no field {key:?} (this client cannot express it): {got}"
                )));
            };
            if let Some(problem) = self.matches(&expect[key], value)? {
                let got = Value::Object(got.clone());
                return Ok(Some(format!("{key}: {problem} (result {got})")));
            }
        }
        Ok(None)
    }

    /// One field: equal to a value or a `$` reference, or every comparison
    /// of an object holds.
    fn matches(&self, want: &Value, got: &Value) -> Result<Option<String>, Failure> {
        let Value::Object(comparisons) = want else {
            let value = self.resolve("expect", want)?;
            return Ok((!same(&value, got)).then(|| format!("{got}, want {value}")));
        };
        for (op, raw) in comparisons {
            let operand = self.resolve("expect", raw)?;
            if op == "!=" {
                if same(&operand, got) {
                    return Ok(Some(format!("{got}, want != {operand}")));
                }
                continue;
            }
            let holds: fn(Ordering) -> bool = match op.as_str() {
                ">" => Ordering::is_gt,
                ">=" => Ordering::is_ge,
                "<" => Ordering::is_lt,
                "<=" => Ordering::is_le,
                _ => return Err(format!("expect: unknown comparison {op:?}")),
            };
            let order = match (got, &operand) {
                (Value::Number(a), Value::Number(b)) => compare(a, b),
                _ => None,
            };
            match order {
                None => return Ok(Some(format!("{got} {op} {operand} compares numbers only"))),
                Some(order) if !holds(order) => {
                    return Ok(Some(format!("{got}, want {op} {operand}")));
                }
                Some(_) => {}
            }
        }
        Ok(None)
    }
}

/// A grant, resolved from its step: sent at once, or from a task of its own
/// for an `async` step.
enum Grant {
    /// `acquire`: one lease, not renewed.
    Single {
        name: String,
        options: AcquireOptions,
    },
    /// `lock`: a lease renewed in the background.
    Renewed {
        name: String,
        options: AcquireOptions,
    },
    /// `acquire_permit`: one permit, not renewed.
    Permit {
        name: String,
        limit: u32,
        options: AcquireOptions,
    },
}

impl Grant {
    async fn send(self, client: Client, prefix: String) -> Outcome {
        let answer = match self {
            Self::Single { name, options } => client.lock(name).acquire(options).await,
            Self::Renewed { name, options } => client.lock(name).lock(options).await,
            Self::Permit {
                name,
                limit,
                options,
            } => client.semaphore(name, limit).acquire(options).await,
        };
        match answer {
            Ok(lease) => Outcome {
                result: Ok(granted(&prefix, &lease)),
                lease: Some(Arc::new(lease)),
            },
            Err(error) => Outcome {
                result: Err(error),
                lease: None,
            },
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

/// A granted lease's fields.
fn granted(prefix: &str, lease: &Lease) -> Fields {
    let mode = match lease.kind() {
        LeaseKind::Exclusive => "exclusive",
        LeaseKind::Shared => "shared",
        LeaseKind::Permit { .. } => "permit",
    };
    let mut fields = object(json!({
        "name": unprefixed(prefix, lease.name()), "fence": lease.fence(),
        "owner": lease.owner(), "mode": mode,
    }));
    if let LeaseKind::Permit { limit } = lease.kind() {
        fields.insert("limit".into(), json!(limit));
    }
    fields
}

/// The lease object's own account, with its loss signal (`lost()` and its
/// cancellation tokens) required to agree: done once lost or released, not
/// while held.
fn lease_state(label: &str, lease: &Lease) -> Result<Fields, Failure> {
    let (state, reason) = match lease.end() {
        None => ("held", None),
        Some(LeaseEnd::Released) => ("released", None),
        Some(LeaseEnd::Lost(reason)) => ("lost", Some(reason.as_str())),
    };
    let ended = lease.lost().now_or_never().is_some();
    let cancelled = lease.cancellation().is_cancelled();
    if (ended, cancelled) != (state != "held", state != "held") {
        return Err(format!(
            "{label}: the lease is {state} but lost() is {} and its cancellation {}",
            if ended { "done" } else { "pending" },
            if cancelled {
                "cancelled"
            } else {
                "not cancelled"
            }
        ));
    }
    Ok(object(json!({"state": state, "lost_reason": reason})))
}

/// An error's kind in the scenarios' words, and its fields.
fn error_of(error: &Error) -> (&'static str, Fields) {
    let fields = match error {
        Error::Busy {
            holders,
            owner,
            fence,
            limit,
            ..
        } => {
            let holder = (holders.iter().find(|h| Some(h.fence) == *fence)).or(holders.first());
            json!({
                "owner": owner, "fence": fence, "mode": holder.map(|h| &h.mode),
                "holder_count": holders.len(), "limit": limit,
            })
        }
        Error::LimitConflict { limit } => json!({"limit": limit}),
        Error::Validation { field, .. } => json!({"field": field}),
        _ => json!({}),
    };
    let kind = match error {
        Error::Busy { .. } => "busy",
        Error::LeaseLost { .. } => "lease_lost",
        Error::Released => "released",
        Error::LimitConflict { .. } => "limit_conflict",
        Error::MaxHoldExceeded { .. } => "max_hold_exceeded",
        Error::Validation { .. } => "invalid_request",
        Error::Unavailable { .. }
        | Error::Contended { .. }
        | Error::TooManyStreams { .. }
        | Error::Transport { .. } => "unavailable",
        Error::Unauthorized { .. } | Error::Forbidden { .. } => "auth",
        _ => "other",
    };
    (kind, object(fields))
}

fn change_type(kind: ChangeKind) -> &'static str {
    match kind {
        ChangeKind::Acquired => "acquired",
        ChangeKind::Extended => "extended",
        ChangeKind::Released => "released",
        ChangeKind::Expired => "expired",
        ChangeKind::ForceReleased => "force_released",
    }
}

/// A name as the scenario wrote it.
fn unprefixed(prefix: &str, name: &str) -> String {
    name.strip_prefix(prefix).unwrap_or(name).to_owned()
}

/// A whole number of at least 0, as durations, limits and fences are.
fn whole(label: &str, value: &Value) -> Result<u64, Failure> {
    let exact = value.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0);
    let number = value.as_u64().or(exact.map(|f| f as u64));
    number.ok_or_else(|| format!("{label}: {value} is not a whole number of at least 0"))
}

/// Two JSON numbers in order: exactly when both are whole.
fn compare(a: &Number, b: &Number) -> Option<Ordering> {
    let exact = |n: &Number| (n.as_i64().map(i128::from)).or(n.as_u64().map(i128::from));
    match (exact(a), exact(b)) {
        (Some(a), Some(b)) => Some(a.cmp(&b)),
        _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

/// Equal as JSON values: numbers by value, but `true` is not `1`.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(a), Value::Number(b)) => compare(a, b) == Some(Ordering::Equal),
        _ => a == b,
    }
}

/// The fields of a `json!({..})`.
fn object(value: Value) -> Fields {
    let Value::Object(fields) = value else {
        unreachable!("fields are built as a JSON object")
    };
    fields
}
