//! The lost-update lab: workers share one counter row in PostgreSQL and one
//! lock; each critical section reads the row, works, and writes +1. Some
//! sections stall past the lease's TTL after reading. Whatever the database
//! accepted beyond the final value was lost.
//!
//! Three ways to use the fence ([`Mode`]): not at all; on the write only
//! (`... WHERE fence < $f`), which still loses an update when a stalled
//! holder writes before its successor; and claim-first (stamp the fence
//! before reading, write only `WHERE fence = $f`), which loses none.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio_postgres::{Client, NoTls};

use crate::client::{now_us, BrokerClient, Outcome};

/// The counter table of one lab process: one row, `id = 1`. Named after the
/// process, so two labs sharing a database (a CI run beside a full run) never
/// write into each other's counter.
pub fn counter_table(lab_pid: u32) -> String {
    format!("lockbroker_lab_counter_{lab_pid}")
}

/// How a critical section uses its fence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Read, work, write `value + 1`: the fence is ignored.
    NoFencing,
    /// Read, work, write `value + 1` only `WHERE fence < $f`, stamping `$f`.
    WriteOnly,
    /// Stamp `$f` first (`WHERE fence < $f RETURNING value`), work, write only
    /// `WHERE fence = $f`.
    ClaimFirst,
}

impl Mode {
    /// All modes, in table order.
    pub const ALL: [Mode; 3] = [Mode::NoFencing, Mode::WriteOnly, Mode::ClaimFirst];

    /// The name used on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Self::NoFencing => "none",
            Self::WriteOnly => "write-only",
            Self::ClaimFirst => "claim-first",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("unknown mode {s:?} (none, write-only, claim-first)"))
    }
}

/// What one worker does.
#[derive(Clone, Debug)]
pub struct WorkerPlan {
    /// Broker base URL.
    pub url: String,
    /// PostgreSQL connection string.
    pub pg: String,
    /// The lock all workers share.
    pub lock: String,
    /// The counter table all workers share (see [`counter_table`]).
    pub table: String,
    /// How the fence is used.
    pub mode: Mode,
    /// Critical sections to complete (each ends in one accepted write).
    pub sections: u64,
    /// Share of section attempts that stall after reading.
    pub stall_rate: f64,
    /// Lease TTL.
    pub ttl_ms: u64,
    /// The stall's length.
    pub stall_ms: u64,
    /// The work between read and write.
    pub work_ms: u64,
    /// Seed for the stall rolls.
    pub seed: u64,
}

/// What one worker did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerTally {
    /// Writes the database accepted (each one meant +1).
    pub accepted: u64,
    /// Writes (or claims) the fence rejected; the section was redone.
    pub rejected: u64,
    /// Section attempts that stalled.
    pub stalls: u64,
    /// Acquires that came back without a lease (busy after waiting, or an error).
    pub retries: u64,
    /// Writes sent after the lease's `expires_at_ms` (by this machine's
    /// clock): the stalled sections, plus any the machine itself held up.
    pub late: u64,
}

impl WorkerTally {
    /// One line of JSON, as a worker process reports it.
    pub fn to_json(self) -> String {
        json!({
            "accepted": self.accepted,
            "rejected": self.rejected,
            "stalls": self.stalls,
            "retries": self.retries,
            "late": self.late,
        })
        .to_string()
    }

    /// Reads a worker's report line.
    pub fn from_json(line: &str) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        Some(Self {
            accepted: v["accepted"].as_u64()?,
            rejected: v["rejected"].as_u64()?,
            stalls: v["stalls"].as_u64()?,
            retries: v["retries"].as_u64()?,
            late: v["late"].as_u64()?,
        })
    }

    /// Adds another worker's tally.
    pub fn add(&mut self, other: Self) {
        self.accepted += other.accepted;
        self.rejected += other.rejected;
        self.stalls += other.stalls;
        self.retries += other.retries;
        self.late += other.late;
    }
}

/// Opens a connection and drives it on its own task.
pub async fn connect(pg: &str) -> Result<Client, String> {
    let (client, connection) = tokio_postgres::connect(pg, NoTls)
        .await
        .map_err(|e| format!("cannot connect to PostgreSQL ({pg}): {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Creates the counter table if needed and sets the row to value 0, fence 0.
pub async fn reset(db: &Client, table: &str) -> Result<(), String> {
    db.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {table} (id int PRIMARY KEY, value bigint NOT NULL, fence bigint NOT NULL);
         INSERT INTO {table} (id, value, fence) VALUES (1, 0, 0)
           ON CONFLICT (id) DO UPDATE SET value = 0, fence = 0;"
    ))
    .await
    .map_err(|e| format!("cannot reset {table}: {e}"))
}

/// Drops the counter table once the lab is done with it.
pub async fn drop_table(db: &Client, table: &str) -> Result<(), String> {
    db.batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
        .await
        .map_err(|e| format!("cannot drop {table}: {e}"))
}

/// The counter's value now.
pub async fn final_value(db: &Client, table: &str) -> Result<u64, String> {
    let row = db
        .query_one(&format!("SELECT value FROM {table} WHERE id = 1"), &[])
        .await
        .map_err(|e| format!("cannot read {table}: {e}"))?;
    Ok(row.get::<_, i64>(0).unsigned_abs())
}

/// Runs one worker's sections to the end.
pub async fn run_worker(plan: &WorkerPlan) -> Result<WorkerTally, String> {
    let db = connect(&plan.pg).await?;
    let broker = BrokerClient::new(&plan.url, Duration::from_secs(30))?;
    let mut rng = StdRng::seed_from_u64(plan.seed);
    let mut tally = WorkerTally::default();
    let sql = Statements::prepare(&db, &plan.table).await?;
    let mut done = 0;
    while done < plan.sections {
        let (timed, token) = broker.acquire(&plan.lock, plan.ttl_ms, 10_000).await;
        let (
            Outcome::Granted {
                fence,
                expires_at_ms,
                ..
            },
            Some(token),
        ) = (timed.outcome, token)
        else {
            tally.retries += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        let fence = i64::try_from(fence).map_err(|_| "fence exceeds i64".to_owned())?;
        let stall = rng.gen_bool(plan.stall_rate.clamp(0.0, 1.0));
        let lease = Held {
            fence,
            expires_at_ms,
        };
        let (accepted, late) = section(&db, &sql, plan, &lease, stall).await?;
        tally.late += u64::from(late);
        // A stalled holder's release is refused (lease_lost); that is the point.
        let _ = broker.release(&plan.lock, &token).await;
        tally.stalls += u64::from(stall);
        if accepted {
            tally.accepted += 1;
            done += 1;
        } else {
            tally.rejected += 1;
        }
    }
    Ok(tally)
}

struct Statements {
    read: tokio_postgres::Statement,
    write: tokio_postgres::Statement,
    write_fenced: tokio_postgres::Statement,
    claim: tokio_postgres::Statement,
    write_claimed: tokio_postgres::Statement,
}

impl Statements {
    async fn prepare(db: &Client, table: &str) -> Result<Self, String> {
        let p = |sql: String| async move {
            db.prepare(&sql)
                .await
                .map_err(|e| format!("cannot prepare {sql:?}: {e}"))
        };
        Ok(Self {
            read: p(format!("SELECT value FROM {table} WHERE id = 1")).await?,
            write: p(format!("UPDATE {table} SET value = $1 WHERE id = 1")).await?,
            write_fenced: p(format!(
                "UPDATE {table} SET value = $1, fence = $2 WHERE id = 1 AND fence < $2"
            ))
            .await?,
            claim: p(format!(
                "UPDATE {table} SET fence = $1 WHERE id = 1 AND fence < $1 RETURNING value"
            ))
            .await?,
            write_claimed: p(format!(
                "UPDATE {table} SET value = $1 WHERE id = 1 AND fence = $2"
            ))
            .await?,
        })
    }
}

/// The lease a section runs under.
struct Held {
    fence: i64,
    /// Unix ms, Redis clock (the lab runs Redis on this machine).
    expires_at_ms: u64,
}

/// One critical section under `lease`: whether its write was accepted, and
/// whether it was sent after the lease expired.
async fn section(
    db: &Client,
    sql: &Statements,
    plan: &WorkerPlan,
    lease: &Held,
    stall: bool,
) -> Result<(bool, bool), String> {
    let fence = lease.fence;
    let e = |e: tokio_postgres::Error| format!("database error: {e}");
    let value: i64 = match plan.mode {
        Mode::NoFencing | Mode::WriteOnly => db.query_one(&sql.read, &[]).await.map_err(e)?.get(0),
        Mode::ClaimFirst => match db.query_opt(&sql.claim, &[&fence]).await.map_err(e)? {
            Some(row) => row.get(0),
            None => return Ok((false, false)),
        },
    };
    if stall {
        tokio::time::sleep(Duration::from_millis(plan.stall_ms)).await;
    }
    tokio::time::sleep(Duration::from_millis(plan.work_ms)).await;
    let next = value + 1;
    let late = u64::try_from(now_us() / 1000).unwrap_or(0) >= lease.expires_at_ms;
    let rows = match plan.mode {
        Mode::NoFencing => db.execute(&sql.write, &[&next]).await.map_err(e)?,
        Mode::WriteOnly => db
            .execute(&sql.write_fenced, &[&next, &fence])
            .await
            .map_err(e)?,
        Mode::ClaimFirst => db
            .execute(&sql.write_claimed, &[&next, &fence])
            .await
            .map_err(e)?,
    };
    Ok((rows == 1, late))
}
