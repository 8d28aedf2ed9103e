//! The long help texts: what `lockctl --help` and `lockctl run --help` say
//! beyond the flags. A test runs the example in [`LONG_ABOUT`] as a script.

/// The one-line description.
pub const ABOUT: &str = "Take, renew and give back lockbroker leases from the shell";

/// `lockctl --help`.
pub const LONG_ABOUT: &str = "\
Take, renew and give back lockbroker leases from the shell.

A lease is a lock with a TTL and a fence number that only grows. `lockctl run`
holds a lease exactly as long as a command runs (flock for a fleet); the other
subcommands are the API's four calls, for scripts that manage a lease by hand.

A lease is exclusive unless asked otherwise. --shared takes a shared lease,
which coexists with the lock's other shared leases while an exclusive lease
excludes every other (many readers or one writer). --limit N takes a permit of
the semaphore NAME instead, which lets at most N holders in at once; while
permits are held, every holder must ask with the same N (else exit 64, naming
the limit in force). A permit is renewed, released and shown with --semaphore:
`lockctl release NAME --semaphore`, `lockctl status NAME --semaphore`.

Durations are written 500ms, 1.5s, 30s, 1m30s, 10m or 2h.

Answers print as shell assignments for eval, each named LOCK_<FIELD>
(LOCK_TOKEN, LOCK_FENCE, ...; --prefix JOB_ names them JOB_TOKEN, ...), as the
broker's JSON with --json, or as one bare value with --field NAME.

A script that takes a lease by hand must keep its token, or it cannot release
it and the lock stays held until the TTL runs out (so never keep only
--field fence). Stop if the acquire fails, and release on the way out:
  lease=$(lockctl acquire nightly-report --ttl 5m) || exit
  eval \"$lease\"   # LOCK_TOKEN, LOCK_FENCE, LOCK_NAME, ...
  trap 'LOCKBROKER_TOKEN=$LOCK_TOKEN lockctl release nightly-report' EXIT
  ... work, handing \"$LOCK_FENCE\" to what it writes to ...
`lockctl run` does all of this for a command, and renews the lease too.";

/// `lockctl run --help`.
pub const RUN_ABOUT: &str = "\
Run a command while holding a lease: flock for a fleet.

lockctl acquires NAME, starts CMD with LOCKBROKER_LOCK, LOCKBROKER_FENCE and
LOCKBROKER_TOKEN (and LOCKBROKER_URL) in its environment, renews the lease every
third of its TTL, and releases it when CMD ends. It exits with CMD's exit code,
or 128+N if signal N ended CMD.

With --shared the lease is a shared one: any number of `run --shared` of NAME
run at once, and none while an exclusive lease holds NAME. With --limit N,
lockctl takes a permit of the semaphore NAME instead, so that at most N
commands run at once fleet-wide; LOCKBROKER_LOCK then names the semaphore and
LOCKBROKER_LIMIT is N (it is unset for a lock). Everything below holds for
all three: busy means no permit is free, lost means the permit is gone.

If the lock is busy: --if-busy fail (the default) exits 75, skip exits 0 without
running CMD (for cron: \"another instance is running\"), and --wait D waits up to D
for the lock first. When the lock is granted after a wait longer than a third
of the TTL, lockctl renews the lease once before starting CMD, so that its
clock counts from a request sent after the grant.

If a renewal answers lease_lost (the lease expired or was taken), lockctl sends
SIGTERM to CMD, SIGKILL after --kill-after, and exits 79. If the broker cannot be
reached, lockctl keeps retrying the renewal until the lease would expire by its
own monotonic clock less a safety margin of a tenth of the TTL (counted from
when the last successful request was sent), then stops CMD the same way and
exits 79.

With --max-hold D, lockctl renews as long as a renewal fits within D of
acquiring; the last one is shortened to end just past D (by the margin), and
when D is reached CMD, if still running, is stopped the same way and lockctl
exits 80. When the broker answers max_hold_exceeded, lockctl stops renewing; if
CMD is still running when the lease runs out (less the margin), it is stopped
the same way and lockctl exits 80.

CMD runs in its own process group and signals go to the whole group, so
`sh -c 'a; b'` is stopped as a whole. SIGINT, SIGTERM and SIGHUP sent to lockctl
are passed on to CMD; the lease is kept while CMD runs and released after. CMD
should not read from a terminal. If lockctl itself is killed with SIGKILL, CMD
keeps running without a lease.

To give the lease back before CMD ends, run `lockctl release \"$LOCKBROKER_LOCK\"`
inside CMD (LOCKBROKER_TOKEN is read from the environment; add --semaphore when
LOCKBROKER_LIMIT is set): it tells lockctl to stop renewing. Another client must
send SIGUSR1 to $LOCKBROKER_RUN_PID before it releases, or the next renewal
counts as a lost lease.

The fence is the number to hand to whatever CMD writes to: a store that refuses
fences lower than the highest it has seen turns a stale holder into a no-op.

Example (crontab): every 5 minutes on every host, one run at a time fleet-wide:
  */5 * * * * lockctl run nightly-sync --ttl 1m --max-hold 2h --if-busy skip -- /usr/local/bin/sync.sh
Example: at most 3 exports at once against a shared database:
  lockctl run db-exports --limit 3 --wait 10m -- /usr/local/bin/export.sh";
