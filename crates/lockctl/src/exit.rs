//! Exit codes: the part of `lockctl` that scripts branch on.
//!
//! Codes 64..78 follow `sysexits.h`; 79 and 80 are lockctl's own. `lockctl run`
//! passes the command's own exit code through whenever the lease held for the
//! whole run, so these numbers are chosen away from the usual 1 and 2.

/// Success: the lease was acquired, extended, released or read; or the
/// command ran and exited 0; or `run --if-busy skip` found the lock busy; or
/// `watch` (or `elect --again` while not leading) was interrupted.
pub const OK: u8 = 0;
/// `check`: the fence is not current (no valid lease carries it now). The
/// usual 1, as `test` and `grep -q` answer "no", since a script branches on
/// it and the command has no child whose code it could be confused with.
pub const NOT_CURRENT: u8 = 1;
/// Bad usage: unknown flag, bad duration, missing token, or a request the
/// broker rejected as invalid (`invalid_request`), e.g. a bad lock name; also
/// `limit_conflict`, a `--limit` other than the limit in force while permits
/// are held. That is a 409 like `lease_lost`, but unlike a lost lease it is
/// the caller's to fix and the same command would fail again, as with an
/// invalid request: so it is bad usage, not a conflict over the lease.
pub const USAGE: u8 = 64;
/// The broker could not be reached (a TLS failure included), or answered
/// that it cannot serve now (`backend_unavailable`, `shutting_down`,
/// `too_many_waiters`, `too_many_streams`, other 5xx).
pub const UNAVAILABLE: u8 = 69;
/// An answer that is not the broker's API: wrong URL, a proxy's page, `internal`.
pub const SOFTWARE: u8 = 70;
/// The lock is held by another lease, or every permit of the semaphore is
/// taken (`lock_busy`), also after `--wait`; or, in quorum mode, other
/// acquires in flight split the votes and none won (`contended`).
pub const BUSY: u8 = 75;
/// The API key is missing, wrong (401) or not allowed this (403).
pub const NO_PERMISSION: u8 = 77;
/// The lease (or permit) is gone: it expired or was taken (`lease_lost`); for
/// `run` and `elect`, it was lost or could not be renewed in time, and the
/// command was stopped.
pub const LEASE_LOST: u8 = 79;
/// The lease reached its maximum hold (`max_hold_exceeded`, or `run --max-hold`),
/// and for `run` the command was stopped: at `--max-hold`, or when the lease
/// ran out after the broker's max hold.
pub const MAX_HOLD: u8 = 80;
/// `run`, `elect`: the command exists but could not be started.
pub const CANNOT_EXECUTE: u8 = 126;
/// `run`, `elect`: the command was not found.
pub const COMMAND_NOT_FOUND: u8 = 127;

/// The table printed at the end of `lockctl --help`.
pub const TABLE: &str = "\
Exit codes:
   0  ok: acquired, extended, released, status read; `run`, `elect`: the
      command's own exit code (128+N if a signal N ended it); `run --if-busy
      skip`: skipped; `watch`: interrupted; `check`: the fence is current
   1  `check`: the fence is not current (no valid lease carries it now)
  64  bad usage: bad flag or duration, no token, invalid_request from the broker,
      limit_conflict (permits are held under another --limit; it names the limit)
  69  broker unreachable (TLS failures too) or unavailable (backend_unavailable,
      shutting_down, too_many_waiters, too_many_streams, 5xx); the request
      changed nothing or its outcome is unknown
  70  unexpected answer (not the broker's JSON, wrong URL, internal error)
  75  busy: the lock is held by another lease, or the semaphore has no free
      permit (after --wait, if given); contended (quorum mode: other acquires
      split the votes and none won)
  77  unauthorized or forbidden: check the API key
  79  lease lost: it expired or was taken; `run`, `elect`: lost, or not
      renewable in time, and the command was stopped; treat its work as
      possibly duplicated
  80  max hold exceeded; `run`: the command was stopped at --max-hold, or when
      the lease ran out after the broker's max hold
 126  `run`, `elect`: the command could not be started
 127  `run`, `elect`: the command was not found";
