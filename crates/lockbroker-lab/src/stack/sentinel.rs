//! Sentinel mode's extra processes: Sentinels on free loopback ports, and
//! the few Redis questions a failover needs answered (who is primary, are
//! the replicas in sync), over a plain RESP connection. The lab's stacks and
//! the test harness both start their Sentinels here.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

/// The name the Sentinels monitor the primary under.
pub const SERVICE_NAME: &str = "lockbroker-lab";

/// One `redis-server --sentinel`. Killed on drop.
pub struct Sentinel {
    port: u16,
    dir: PathBuf,
    child: Child,
}

impl Sentinel {
    /// A Sentinel monitoring the primary at `primary_port`, agreeing it is
    /// down with `quorum` Sentinels, after 1 s without an answer; its log in
    /// `logs` as `sentinel-<port>.log` if given, else nowhere.
    pub fn start(primary_port: u16, quorum: usize, logs: Option<&Path>) -> Result<Self, String> {
        let port = free_port()?;
        let dir = std::env::temp_dir().join(format!(
            "lockbroker-lab-sentinel-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        // Sentinel rewrites its configuration file, so each has its own.
        let config = dir.join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {SERVICE_NAME} 127.0.0.1 {primary_port} {quorum}\n\
                 sentinel down-after-milliseconds {SERVICE_NAME} 1000\n\
                 sentinel failover-timeout {SERVICE_NAME} 5000\n{logfile}",
                dir = dir.display(),
                logfile = logs.map_or(String::new(), |logs| format!(
                    "logfile {}\n",
                    logs.join(format!("sentinel-{port}.log")).display()
                )),
            ),
        )
        .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
        let child = Command::new("redis-server")
            .arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start a Sentinel (apt-get install redis-server): {e}"))?;
        Ok(Self { port, dir, child })
    }

    /// The port the Sentinel listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`, as `LOCKBROKER_REDIS_SENTINELS` takes it.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The port of the primary this Sentinel names now, if it answers.
    pub fn primary_port(&self) -> Option<u16> {
        let reply = command(
            self.port,
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE_NAME],
        )?;
        match reply {
            Reply::Array(items) => match items.get(1) {
                Some(Reply::Text(port)) => port.parse().ok(),
                _ => None,
            },
            _ => None,
        }
    }

    /// A field of `SENTINEL MASTER <service>`, as a number
    /// (`num-slaves`, `num-other-sentinels`, ...).
    pub fn master_field(&self, name: &str) -> Option<usize> {
        let Some(Reply::Array(fields)) = command(self.port, &["SENTINEL", "MASTER", SERVICE_NAME])
        else {
            return None;
        };
        fields.chunks(2).find_map(|pair| match pair {
            [Reply::Text(key), Reply::Text(value)] if key == name => value.parse().ok(),
            _ => None,
        })
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The primary the first answering Sentinel names.
pub fn primary_port(sentinels: &[Sentinel]) -> Option<u16> {
    sentinels.iter().find_map(Sentinel::primary_port)
}

/// Whether every Sentinel knows `replicas` replicas and the other
/// Sentinels: before that, a failover could not pick a replica.
pub fn watching(sentinels: &[Sentinel], replicas: usize) -> bool {
    let others = sentinels.len() - 1;
    sentinels.iter().all(|sentinel| {
        sentinel.master_field("num-slaves") == Some(replicas)
            && sentinel.master_field("num-other-sentinels") == Some(others)
    })
}

/// Waits until [`watching`].
pub async fn wait_until_watching(sentinels: &[Sentinel], replicas: usize) -> Result<(), String> {
    let what = "the Sentinels to know every replica";
    wait_for(Duration::from_secs(30), what, || {
        watching(sentinels, replicas)
    })
    .await
}

/// Waits until every Sentinel names a primary other than `old`. Until they
/// all do, a broker that asks one that has not heard yet is sent to `old`:
/// restarted before then, an empty `old` would be taken for the primary.
pub async fn wait_for_promotion(sentinels: &[Sentinel], old: u16) -> Result<(), String> {
    wait_for(Duration::from_secs(30), "a replica to be promoted", || {
        sentinels
            .iter()
            .all(|sentinel| sentinel.primary_port().is_some_and(|port| port != old))
    })
    .await
}

/// Waits until at least `replicas` of the servers on `ports` replicate in
/// sync.
pub async fn wait_until_replicas_in_sync(ports: &[u16], replicas: usize) -> Result<(), String> {
    wait_for(
        Duration::from_secs(60),
        "the replicas to be in sync",
        || {
            ports
                .iter()
                .filter(|port| {
                    matches!(command(**port, &["INFO", "replication"]),
                    Some(Reply::Text(info)) if info.contains("master_link_status:up"))
                })
                .count()
                >= replicas
        },
    )
    .await
}

async fn wait_for(limit: Duration, what: &str, done: impl Fn() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() > deadline {
            return Err(format!("waited {limit:?} for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// A RESP reply, as far as these questions need it.
pub(super) enum Reply {
    Text(String),
    Array(Vec<Reply>),
    Other,
}

/// Sends one command to the server on `port`; its reply, or `None` if it
/// does not answer within a second.
pub(super) fn command(port: u16, args: &[&str]) -> Option<Reply> {
    let stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    let mut reader = BufReader::new(stream);
    reader.get_mut().write_all(request.as_bytes()).ok()?;
    read_reply(&mut reader)
}

fn read_reply(reader: &mut BufReader<TcpStream>) -> Option<Reply> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let line = line.trim_end();
    let (kind, rest) = line.split_at_checked(1)?;
    match kind {
        "+" | ":" => Some(Reply::Text(rest.to_owned())),
        "$" => {
            let len: i64 = rest.parse().ok()?;
            if len < 0 {
                return Some(Reply::Other);
            }
            let mut body = vec![0; usize::try_from(len).ok()? + 2];
            reader.read_exact(&mut body).ok()?;
            body.truncate(body.len() - 2);
            Some(Reply::Text(String::from_utf8_lossy(&body).into_owned()))
        }
        "*" => {
            let len: i64 = rest.parse().ok()?;
            let items = (0..len.max(0))
                .map(|_| read_reply(reader))
                .collect::<Option<Vec<_>>>()?;
            Some(Reply::Array(items))
        }
        _ => Some(Reply::Other),
    }
}
