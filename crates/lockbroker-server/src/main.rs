//! The `lockbroker` binary: reads settings, then runs [`Application`] until
//! SIGINT or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;

use lockbroker_server::startup::shutdown_signal;
use lockbroker_server::{telemetry, Application, Settings};

/// jemalloc rather than the system allocator: with the settings built in
/// (`.cargo/config.toml`: a background thread that hands pages freed for a
/// second back to the operating system), the memory of a burst of waiters
/// comes back once they leave, where glibc keeps it in per-thread arenas.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const USAGE: &str = "\
lockbroker: a lock broker with fenced leases, over Redis

Usage: lockbroker [--config FILE]

Settings come from built-in defaults, then FILE (TOML, see config/lockbroker.toml),
then LOCKBROKER_* environment variables, e.g.
  LOCKBROKER_LISTEN=127.0.0.1:7700
  LOCKBROKER_REDIS_URL=redis://127.0.0.1:6379/0";

fn main() -> ExitCode {
    let config = match parse_args(std::env::args().skip(1)) {
        Ok(Some(config)) => config,
        Ok(None) => return ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("lockbroker: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let settings = match Settings::load(config.as_deref(), std::env::vars()) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("lockbroker: {error}");
            return ExitCode::from(2);
        }
    };
    telemetry::init(&settings.log);

    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("lockbroker: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let app = match Application::build(settings).await {
            Ok(app) => app,
            Err(error) => {
                eprintln!("lockbroker: {error}");
                return ExitCode::FAILURE;
            }
        };
        match app.run_until(shutdown_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("lockbroker: server error: {error}");
                ExitCode::FAILURE
            }
        }
    })
}

/// `Ok(None)` when the arguments asked for help or the version only.
fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Option<Option<PathBuf>>, String> {
    let mut config = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            "-V" | "--version" => {
                println!("lockbroker {}", env!("CARGO_PKG_VERSION"));
                return Ok(None);
            }
            "-c" | "--config" => {
                let path = args.next().ok_or("--config needs a file path")?;
                config = Some(PathBuf::from(path));
            }
            other => match other.strip_prefix("--config=") {
                Some(path) => config = Some(PathBuf::from(path)),
                None => return Err(format!("unknown argument {other:?}")),
            },
        }
    }
    Ok(Some(config))
}
