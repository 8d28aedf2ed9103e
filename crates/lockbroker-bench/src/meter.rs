//! What a slice of load cost the servers: CPU time of named processes (from
//! `/proc/<pid>/stat`), and Redis's own account of itself (`INFO cpu`, to the
//! microsecond, and `INFO commandstats`), read before and after each slice
//! and charged to the target that ran in it.

use std::collections::BTreeMap;

use crate::procs;
use crate::resp;

/// Reads the costs of the processes a comparison runs against.
pub struct Meter {
    pids: Vec<(&'static str, u32)>,
    redis: Option<resp::Connection>,
}

/// Calls and time of one Redis command.
#[derive(Clone, Copy, Default)]
pub struct CommandUse {
    /// Calls.
    pub calls: u64,
    /// Microseconds Redis spent in them.
    pub usec: u64,
}

/// Costs over some span, or totals at one moment.
#[derive(Clone, Default)]
pub struct Usage {
    /// CPU seconds per named process, in the order the meter was given.
    pub cpu_s: Vec<(&'static str, f64)>,
    /// Redis's `used_cpu_sys + used_cpu_user`, seconds.
    pub redis_cpu_s: f64,
    /// Redis's command statistics by command name (`INFO` itself left out).
    pub commands: BTreeMap<String, CommandUse>,
}

impl Usage {
    /// CPU seconds of the process named `name`.
    pub fn cpu_of(&self, name: &str) -> f64 {
        self.cpu_s
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0.0, |(_, s)| *s)
    }

    /// Adds what happened between `before` and `after`.
    pub fn add_span(&mut self, before: &Usage, after: &Usage) {
        for (i, &(name, end)) in after.cpu_s.iter().enumerate() {
            let start = before.cpu_s.get(i).map_or(0.0, |c| c.1);
            match self.cpu_s.get_mut(i) {
                Some(slot) => slot.1 += end - start,
                None => self.cpu_s.push((name, end - start)),
            }
        }
        self.redis_cpu_s += after.redis_cpu_s - before.redis_cpu_s;
        for (command, end) in &after.commands {
            let start = before.commands.get(command).copied().unwrap_or_default();
            let calls = end.calls.saturating_sub(start.calls);
            if calls == 0 {
                continue;
            }
            let slot = self.commands.entry(command.clone()).or_default();
            slot.calls += calls;
            slot.usec += end.usec.saturating_sub(start.usec);
        }
    }
}

impl Meter {
    /// Meters the processes in `pids`, and the Redis on `redis_port` if any.
    pub async fn new(
        pids: Vec<(&'static str, u32)>,
        redis_port: Option<u16>,
    ) -> Result<Self, String> {
        let redis = match redis_port {
            Some(port) => Some(resp::Connection::connect(port).await?),
            None => None,
        };
        Ok(Self { pids, redis })
    }

    /// The totals now.
    pub async fn read(&mut self) -> Result<Usage, String> {
        let mut usage = Usage {
            cpu_s: self
                .pids
                .iter()
                .map(|&(name, pid)| (name, procs::cpu_seconds(pid)))
                .collect(),
            ..Usage::default()
        };
        if let Some(redis) = &mut self.redis {
            let cpu = info(redis, "cpu").await?;
            let field = |name: &str| -> Result<f64, String> {
                find(&cpu, name)
                    .and_then(|v| v.parse::<f64>().ok())
                    .ok_or_else(|| format!("no {name} in INFO cpu"))
            };
            usage.redis_cpu_s = field("used_cpu_sys")? + field("used_cpu_user")?;
            let stats = info(redis, "commandstats").await?;
            for line in stats.lines() {
                let Some((command, rest)) = line
                    .strip_prefix("cmdstat_")
                    .and_then(|l| l.split_once(':'))
                else {
                    continue;
                };
                if command == "info" {
                    continue;
                }
                let number = |key: &str| {
                    rest.split(',')
                        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .unwrap_or(0)
                };
                usage.commands.insert(
                    command.to_owned(),
                    CommandUse {
                        calls: number("calls"),
                        usec: number("usec"),
                    },
                );
            }
        }
        Ok(usage)
    }
}

async fn info(redis: &mut resp::Connection, section: &str) -> Result<String, String> {
    let reply = redis.call(&[b"INFO", section.as_bytes()]).await?;
    reply
        .text()
        .map(str::to_owned)
        .ok_or_else(|| format!("INFO {section} gave no text"))
}

/// The value of `name:` in an `INFO` text.
fn find<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}
