//! The long help texts: what `lockctl --help` and the `--help` of `run`,
//! `watch` and `elect` say beyond the flags. A test runs the example in [`LONG_ABOUT`] as a script.

/// The one-line description.
pub const ABOUT: &str = "Take, renew and give back lockbroker leases from the shell";

/// `lockctl --help`.
pub const LONG_ABOUT: &str = "\
Take, renew and give back lockbroker leases from the shell.

A lease is a lock with a TTL and a fence number that only grows. `lockctl run`
holds a lease exactly as long as a command runs (flock for a fleet), and
`lockctl elect` runs a command only while this host leads (holds the lock),
the fence being its term. `lockctl watch` prints a lock's changes as they
happen. The other subcommands are the API's four calls, for scripts that
manage a lease by hand.

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

With --lock NAME2 (repeatable), lockctl holds several locks for the whole run:
one acquire-all request takes a lease on NAME and on each --lock, on all of them
or on none. The broker takes them in one order (by name) whatever the order
given, so runs over overlapping sets never deadlock, and while it waits
(--wait) it holds none of them. The leases are held under one session (its
TTL --ttl, its id in LOCKBROKER_SESSION): one keepalive every third of the TTL
keeps them all, instead of a renewal per lease. If the session or any lease is
lost, or the session cannot be kept alive in time, CMD is stopped as below
(exit 79, naming that lock). All are released, once CMD's process tree is
gone, by closing the session. A busy answer names the lock that was busy.
--shared makes every lease a shared one; --limit and --fair do not go with
--lock.

LOCKBROKER_LOCK, LOCKBROKER_FENCE and LOCKBROKER_TOKEN describe NAME's lease.
Every lease of the run is also numbered from 1 in the order of the command
line (NAME is 1, the first --lock 2, ...): LOCKBROKER_LOCK_1, LOCKBROKER_FENCE_1,
LOCKBROKER_TOKEN_1, LOCKBROKER_LOCK_2, ...; LOCKBROKER_LOCKS lists the names
and LOCKBROKER_FENCES the fences as NAME=FENCE, each space-separated in that
order, e.g. LOCKBROKER_FENCES=\"ledger:a=41 ledger:b=97\". A run of one lock
sets them too.

If the lock is busy: --if-busy fail (the default) exits 75, skip exits 0 without
running CMD (for cron: \"another instance is running\"), and --wait D waits up to D
for the lock first. When the lock is granted after a wait longer than a third
of the TTL, lockctl renews the lease once before starting CMD, so that its
clock counts from a request sent after the grant.

If a renewal answers lease_lost (the lease expired or was taken, or an operator
force-released it: lockctl then names the key id), lockctl sends SIGTERM to
CMD, SIGKILL after --kill-after, and exits 79. If the broker cannot be
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

CMD runs in its own process group, under a small guard process (lockctl
itself, as `lockctl __guard`), and signals go to the whole group, so
`sh -c 'a; b'` is stopped as a whole. SIGINT, SIGTERM and SIGHUP sent to lockctl
are passed on to CMD; the lease is kept while CMD runs. When CMD exits, what it
left running (background jobs; on Linux also processes that left its group)
gets SIGTERM, and SIGKILL after --kill-after; the lease is renewed until all of
it is gone, and released only then. CMD should not read from a terminal.

On Linux, CMD's whole process tree dies with lockctl: if lockctl is killed,
even with SIGKILL, the guard gets a parent-death signal and SIGKILLs the tree
at once. The lease is not released then: it runs out at its TTL, and only then
can another run start. On other systems there is no parent-death signal: a
lockctl killed with SIGKILL leaves CMD running without a lease, and another run
may start beside it once the TTL runs out. Everywhere, a lockctl that stalls
(SIGSTOP, a suspended VM) leaves CMD running past its lease: hand the fence on.

To give the lease back before CMD ends, run `lockctl release \"$LOCKBROKER_LOCK\"`
inside CMD (LOCKBROKER_TOKEN is read from the environment; add --semaphore when
LOCKBROKER_LIMIT is set): it tells lockctl to stop renewing. Another client must
send SIGUSR1 to $LOCKBROKER_RUN_PID before it releases, or the next renewal
counts as a lost lease. With --lock, releasing any of the run's leases so
(`LOCKBROKER_TOKEN=$LOCKBROKER_TOKEN_2 lockctl release \"$LOCKBROKER_LOCK_2\"`)
stops the renewal of them all, and lockctl releases the rest when CMD ends.

The fence is the number to hand to whatever CMD writes to: a store that refuses
fences lower than the highest it has seen turns a stale holder into a no-op.

Example (crontab): every 5 minutes on every host, one run at a time fleet-wide:
  */5 * * * * lockctl run nightly-sync --ttl 1m --max-hold 2h --if-busy skip -- /usr/local/bin/sync.sh
Example: at most 3 exports at once against a shared database:
  lockctl run db-exports --limit 3 --wait 10m -- /usr/local/bin/export.sh
Example: a job over two tables, which needs both locks or neither:
  lockctl run ledger:a --lock ledger:b --wait 5m -- /usr/local/bin/reconcile.sh";

/// `lockctl watch --help`.
pub const WATCH_ABOUT: &str = "\
Print a lock's changes as they happen, one line per event, until interrupted.

lockctl reads the broker's event stream of the lock NAME (of the semaphore
NAME with --semaphore; of every lock whose name starts with NAME with
--prefix). It starts with the current state, then one event per change:
acquired, extended, released, expired or force_released, one per holder for
shared leases and permits. A line reads

  2026-12-01T17:00:00.123Z acquired billing:42 fence=1795954817685497 owner=worker-1 mode=exclusive expires_in=30s

the time lockctl received the event (UTC), its type, the name, then the
lease's fence, owner (- if none), mode and time left. A state line shows
held= and holders= too, and with --prefix the state of every held lock is
followed by `state PREFIX complete`. `lagged missed=N` means lockctl fell
behind and N events were skipped; a fresh state follows. With --json each
event is printed as the broker's JSON object with its \"type\" and \"id\" added.
No token is ever shown: the stream carries none.

In a leader election (`lockctl elect`), the holder is the leader and the
fence its term: followers learn who leads, and since which term, here.

If the stream drops (a broker restart, a network failure, 45 s without even a
keep-alive), lockctl reconnects, pausing up to 5 s between tries, and resumes
after the last event received (Last-Event-ID) if the broker still has it;
otherwise the stream starts again with a fresh state. SIGINT or SIGTERM ends
the watch with exit code 0.

It exits 69 if the broker cannot be reached at the start, or has no stream to
spare (too_many_streams), 77 if the API key may not watch NAME, 64 for a bad
name. Once watching, it ends only when interrupted, or refused in a way that
asking again cannot mend (77, 64, 70).

Example: follow the leader of a `lockctl elect scheduler` fleet:
  lockctl watch scheduler";

/// `lockctl elect --help`.
pub const ELECT_ABOUT: &str = "\
Run a command only while this host is the leader of NAME.

The leader is the holder of the lock NAME, and the fence of its lease is its
term, which only grows. lockctl campaigns (acquires NAME, waiting as long as
it takes, one broker wait after another), then runs CMD exactly as `lockctl
run` does: LOCKBROKER_LOCK, LOCKBROKER_FENCE (the term), LOCKBROKER_TOKEN and
LOCKBROKER_URL in its environment, the lease renewed every third of --ttl,
signals passed on, and the lease released (resigning) when CMD ends. If the
lease is lost, or cannot be renewed before it would expire, CMD is sent
SIGTERM, SIGKILL after --kill-after (see `lockctl run --help`).

Without --again, lockctl exits after one term with CMD's exit code (128+N if
signal N ended it), or 79 if leadership was lost and CMD stopped. With
--again it campaigns anew after each term, a second after it ended, until
SIGINT, SIGTERM or SIGHUP: while leading, the signal goes to CMD and lockctl
exits with CMD's exit code once it ends; while campaigning, it exits 0. If
CMD cannot be started (126, 127), lockctl exits in either case.

Candidates wait in the broker. When the leader resigns, a waiting candidate
is granted at once; when a leader stops renewing (a crash, a partition), its
lease expires after at most --ttl (plus --lock-delay) by the Redis clock and
a candidate is granted then. Followers see this host's name as the owner
unless --owner says otherwise: `lockctl watch NAME` prints who leads and its
term.

If the broker cannot be reached or is unavailable when lockctl starts, it
exits 69. After that, an unavailable broker is retried for as long as it
takes (pausing up to 5 s); a leader whose renewals fail stops CMD before its
lease could expire, as `run` does.

The term is the guard against a deposed leader: one stalled past its TTL (a
long pause, a suspended VM) keeps running until it notices, while a new
leader already holds a higher term. Hand LOCKBROKER_FENCE to whatever CMD
writes to, and have that refuse terms lower than the highest it has seen.

Example: one scheduler at a time across the fleet, failing over within 10 s:
  lockctl elect scheduler --ttl 10s --again -- /usr/local/bin/scheduler";
