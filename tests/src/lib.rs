//! Test harness: a real `redis-server` per test on a free port, the broker on
//! port 0, and helpers that keep tests reading like the contract.
//!
//! # Layout
//!
//! - [`redis`]: [`RedisServer`], a `redis-server` child process the test owns
//!   (so fault tests may kill, pause or restart it), and [`redis::Conn`], a
//!   tiny RESP client for looking at what the broker wrote.
//! - [`app`]: [`TestApp`], a broker started in-process with settings built in
//!   code, and its HTTP helpers.
//! - [`process`]: [`process::BrokerProcess`], the real binary as a child
//!   process, for its logs and exit.
//! - [`modes`]: the backend mode `LOCKBROKER_TEST_MODE` puts test brokers
//!   in, [`sentinel`]: Sentinels and replicated Redis for sentinel mode,
//!   and [`cluster`]: Redis Cluster for cluster mode.
//! - [`transcript`]: the README's and docs/'s shell transcripts, read from
//!   their Markdown, run in `sh` against a broker and matched with `[..]`.

pub mod app;
pub mod cluster;
pub mod failover;
pub mod modes;
pub mod process;
pub mod proxy;
pub mod redis;
pub mod sentinel;
pub mod sse;
pub mod transcript;

pub use app::{Reply, TestApp};
pub use redis::RedisServer;

/// The `lockbroker` binary built alongside the tests (`cargo nextest run
/// --workspace` builds it).
pub fn broker_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target directory");
    let binary = dir.join("lockbroker");
    assert!(
        binary.exists(),
        "{} is missing: build it with `cargo build --workspace` first",
        binary.display()
    );
    binary
}

/// The `lockctl` binary built alongside the tests (`cargo build --workspace`
/// or `cargo build -p lockctl` builds it).
pub fn lockctl_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target directory");
    let binary = dir.join("lockctl");
    assert!(
        binary.exists(),
        "{} is missing: build it with `cargo build -p lockctl` first",
        binary.display()
    );
    binary
}

/// The `lockbroker_*` metric names `text` (a scrape, a rule, a panel query)
/// mentions, without histogram suffixes.
pub fn metric_names(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("lockbroker_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let base = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        names.insert(base.to_owned());
        rest = &tail[end..];
    }
    names
}
