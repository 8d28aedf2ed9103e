//! `lockctl`: the lockbroker client for ops scripts and cron.
//!
//! `main` parses the command line, builds the [`client::Broker`] and hands
//! off to one subcommand; every path ends in an exit code from [`exit`].
//! `run` and `elect` hold a lease while a command runs ([`run`]); `watch`
//! follows a lock's event stream ([`watch`]). The hidden `__guard` is the
//! process `run` puts between itself and the command ([`run::guard`]).

mod cli;
mod client;
mod commands;
mod duration;
mod exit;
mod output;
mod run;
mod tls;
mod watch;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::Parser;

use cli::{Cli, Command};
use client::Broker;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            let code = match error.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => exit::OK,
                _ => exit::USAGE,
            };
            return ExitCode::from(code);
        }
    };
    if let Command::Guard(args) = &cli.command {
        return ExitCode::from(run::guard::guard(args));
    }
    ExitCode::from(dispatch(cli))
}

fn dispatch(cli: Cli) -> u8 {
    let api_key = match (&cli.api_key_file, &cli.api_key) {
        (Some(path), _) => match cli::read_secret(path) {
            Ok(key) => Some(key),
            Err(message) => return commands::usage(&message),
        },
        (None, key) => key.as_deref().map(str::trim).map(str::to_owned),
    }
    .filter(|key| !key.is_empty());
    let ca_cert = match cli.ca_cert.as_deref().map(std::fs::read).transpose() {
        Ok(pem) => pem,
        Err(error) => return commands::usage(&format!("--ca-cert: {error}")),
    };
    let broker = match Broker::new(&cli.url, api_key.as_deref(), ca_cert.as_deref()) {
        Ok(broker) => broker,
        Err(message) => return commands::usage(&message),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("lockctl: cannot start: {error}");
            return exit::SOFTWARE;
        }
    };
    runtime.block_on(async move {
        match cli.command {
            Command::Acquire(args) => commands::acquire(&broker, args).await,
            Command::Extend(args) => commands::extend(&broker, args).await,
            Command::Release(args) => commands::release(&broker, args).await,
            Command::Status(args) => commands::status(&broker, args).await,
            Command::Check(args) => commands::check(&broker, args).await,
            Command::Run(args) => run::run(&broker, args).await,
            Command::Watch(args) => watch::watch(&broker, args).await,
            Command::Elect(args) => run::elect::elect(&broker, args).await,
            Command::Guard(args) => run::guard::guard(&args),
        }
    })
}
