"""The blocking client: :class:`Client`, its :class:`Lease`, and ``client.lock()``,
a context manager that renews the lease from a background thread; the same for
semaphores (:class:`Permit` and ``client.semaphore()``) and for several locks
at once (``client.lock_all()``, a :class:`LeaseSet`). ``client.watch()``
reads a lock's event stream (:class:`Watch`), ``client.leader()`` campaigns
for leadership (:class:`Leader`), and ``client.session()`` keeps a session
alive from a background thread, with the leases taken under it (:class:`Session`).

The rules (options, retries, renewal, release on exit) live in :mod:`._options`,
:mod:`._retry`, :mod:`._renewals` and :mod:`._lease`, those of watching and
electing in :mod:`._events`, and those of sessions in :mod:`._sessions`; this
module only blocks on them."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from types import TracebackType
from typing import Any, Deque, Dict, Iterator, List, Optional, Sequence, Tuple, Type, Union, cast

from ._lease import LeaseBase, LockBase
from ._multi import (
    AcquireAllAttempts,
    LeaseSetBase,
    LockAllBase,
    LockAsk,
    ReleaseAll,
    ReleaseResult,
    give_back,
    lock_asks,
)
from ._options import (
    ACQUIRE_TTL,
    DEFAULT_MAX_HOLD,
    DEFAULT_TTL,
    ClientBase,
    Duration,
    LockOptions,
    count,
    seconds,
)
from ._renewals import Action, Renewals
from ._retry import AcquireAttempts
from ._sessions import (
    Keepalives,
    SessionBase,
    asking,
    lease_owner,
    lease_ttl,
    opening,
    session_parts,
    settle,
)
from ._wire import (
    LOCKS,
    SEMAPHORES,
    FenceCheck,
    LockStatus,
    Renewal,
    Request,
    SemaphoreStatus,
    SessionGrant,
    SessionRenewal,
    SessionStatus,
    close_session_request,
    extend_request,
    fence_check_request,
    keep_session_request,
    leases_released,
    release_request,
    released_acknowledged,
    released_fence,
    session_status_request,
    status_request,
)
from ._events import (
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_LEADER_MAX_HOLD,
    CAMPAIGN_RETRIES,
    CampaignPauses,
    LeaderBase,
    WatchCursor,
    WatchEvent,
    events_path,
    prefix_events_path,
)
from ._transport import Cancel, SyncStream, SyncTransport
from .errors import BrokerUnavailable, LeaseLost, LockBrokerError, LockBusy

log = logging.getLogger("lockbroker")


class Client(ClientBase):
    """A connection to one broker.

    ``url`` is the broker's base URL (``http://127.0.0.1:7700``), ``api_key`` is sent
    as ``Authorization: Bearer <key>`` when given, and ``timeout`` bounds every HTTP
    exchange in seconds (a waiting acquire gets its wait on top). Thread-safe.

    An ``https://`` broker is checked against the system's roots plus ``ca_cert``, a
    PEM file (for a private CA or a self-signed certificate); or pass an
    :class:`ssl.SSLContext` as ``ssl_context`` to set TLS up entirely yourself. A
    certificate that is not trusted raises :class:`BrokerUnavailable` with code
    ``tls``, at once (waiting would not change it).
    """

    _transport_class = SyncTransport
    _transport: SyncTransport

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes idle connections. The client stays usable."""
        self._transport.close()

    # -- single calls ------------------------------------------------------------------

    def acquire(
        self,
        name: str,
        ttl: Duration = ACQUIRE_TTL,
        *,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        request_id: Optional[str] = None,
        lock_delay: Optional[Duration] = None,
        fair: bool = False,
        shared: bool = False,
        session: Union[str, "Session", None] = None,
    ) -> Lease:
        """Takes the lock for ``ttl`` seconds, waiting up to ``wait`` seconds for it.

        Nothing renews the returned lease: call :meth:`Lease.extend` in time, or use
        :meth:`lock`. Raises :class:`LockBusy` when the lock is still held after
        ``wait``, and :class:`BrokerUnavailable` when the broker could not be reached
        within ``wait`` (transient failures are retried until then). ``lock_delay``
        keeps the lock unavailable that long after this lease *expires* unreleased;
        ``fair=True`` asks the broker to grant waiters in arrival order (brokers
        without fair queueing answer :class:`InvalidRequest`). ``shared=True`` asks
        for a shared lease, which other shared leases may hold at the same time
        and an exclusive one excludes (brokers without shared locks answer
        :class:`InvalidRequest`).

        ``session`` takes the lease under a session: a :class:`Session` helper
        (the same as :meth:`Session.acquire`), or a session's token. The lease
        then has the session's TTL and lock-delay (giving ``ttl`` or
        ``lock_delay`` too raises :class:`ValueError`), the session's keepalives
        renew it and it ends with the session; it is never extended on its own.
        A session that is not open raises :class:`SessionLost`, one holding as
        many leases as it may :class:`SessionFull`. A lease taken with a bare
        token keeps the local deadline of its acquire's answer: nothing here
        knows when that session is kept alive.
        """
        helper, token = session_parts(session, Session)
        options = LockOptions.check(
            ttl=ttl, wait=wait, owner=lease_owner(owner, helper), lock_delay=lock_delay,
            fair=fair, shared=shared, session=token,
        )
        return self._acquire(name, options, request_id, helper=helper)

    def acquire_permit(
        self,
        name: str,
        limit: int,
        ttl: Duration = ACQUIRE_TTL,
        *,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        request_id: Optional[str] = None,
        lock_delay: Optional[Duration] = None,
        fair: bool = False,
        session: Union[str, "Session", None] = None,
    ) -> Permit:
        """Takes one of the ``limit`` permits of the semaphore ``name`` for ``ttl``
        seconds, waiting up to ``wait`` seconds for one; the other arguments are
        :meth:`acquire`'s. Nothing renews the returned permit: call
        :meth:`Permit.extend` in time, or use :meth:`semaphore`.

        Raises :class:`LockBusy` (with ``holders`` and ``limit``) when every permit
        is still taken after ``wait``, and :class:`LimitConflict` when the
        semaphore's permits are held under another limit. ``session`` takes the
        permit under a session, as for :meth:`acquire`.
        """
        helper, token = session_parts(session, Session)
        options = LockOptions.check(
            ttl=ttl, wait=wait, owner=lease_owner(owner, helper), lock_delay=lock_delay,
            fair=fair, session=token,
            limit=count(limit, "limit"),  # never None here: that would make it a lock
        )
        return cast(Permit, self._acquire(name, options, request_id, helper=helper))

    def _acquire(
        self,
        name: str,
        options: LockOptions,
        request_id: Optional[str] = None,
        cancel: Optional[Cancel] = None,
        helper: Optional["Session"] = None,
    ) -> Lease:
        """``cancel``, when given, ends the attempts (and the one in flight) from
        another thread: the acquire then raises :class:`BrokerUnavailable`.
        ``helper`` is the session helper the lease is taken through."""
        with asking(helper):
            return self._attempt(name, options, request_id, cancel, helper)

    def _attempt(
        self,
        name: str,
        options: LockOptions,
        request_id: Optional[str],
        cancel: Optional[Cancel],
        helper: Optional["Session"],
    ) -> Lease:
        attempts = AcquireAttempts(name, options, request_id, self.timeout)
        granted = Permit if options.kind == SEMAPHORES else Lease
        while True:
            request, timeout = attempts.next_request()
            try:
                if cancel is None:
                    data = self._transport.request(*request, timeout=timeout)
                else:
                    data = self._transport.request_cancellable(*request, timeout, cancel)
            except (LockBusy, BrokerUnavailable) as error:
                pause = attempts.pause_after(error)
                if pause is None:
                    raise
                if cancel is None:
                    time.sleep(pause)
                elif cancel.wait(pause):
                    raise
                continue
            waited = attempts.answered()
            lease = granted(self, data, attempts.sent_at, lease_ttl(options, data),
                            attempts.held_from)
            if settle([lease], options, helper, attempts.answered_at - attempts.sent_at):
                assert helper is not None
                helper._resync()
            elif waited and options.session is None:
                lease._resync()
            return lease

    def acquire_all(
        self,
        locks: Sequence[Union[str, LockAsk]],
        ttl: Duration = ACQUIRE_TTL,
        *,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        request_id: Optional[str] = None,
        lock_delay: Optional[Duration] = None,
        session: Union[str, "Session", None] = None,
    ) -> List[Lease]:
        """Takes a lease on every lock of ``locks`` (names, or :class:`LockAsk`
        for a shared lease), or on none, in one request; the leases come back in
        the order asked, each an ordinary :class:`Lease` with its own token and
        fence, extended and released on its own or with :meth:`release_all`.

        The other arguments are :meth:`acquire`'s and apply to every lease, with
        its retry rule: a busy answer is asked again until ``wait`` is over, and
        the broker holds none of the locks while it waits. :class:`LockBusy`
        names the busy lock in ``lock``. A name given twice raises
        :class:`ValueError` without asking; no locks are no leases. An answer
        that names other locks than asked for raises :class:`LockBrokerError`
        (code ``bad_response``) after giving back the leases it granted.
        Nothing renews the leases: see :meth:`lock_all`. ``session`` takes every
        lease under a session, as for :meth:`acquire`."""
        helper, token = session_parts(session, Session)
        options = LockOptions.check(ttl=ttl, wait=wait, owner=lease_owner(owner, helper),
                                    lock_delay=lock_delay, fair=False, session=token)
        asks = lock_asks(locks)
        with asking(helper):
            return self._acquire_all(asks, options, request_id, helper)

    def _acquire_all(
        self,
        asks: Sequence[LockAsk],
        options: LockOptions,
        request_id: Optional[str] = None,
        helper: Optional["Session"] = None,
    ) -> List[Lease]:
        if not asks:
            return []
        attempts = AcquireAllAttempts(tuple(asks), options, request_id, self.timeout)
        while True:
            request, timeout = attempts.next_request()
            try:
                data = self._transport.request(*request, timeout=timeout)
            except (LockBusy, BrokerUnavailable) as error:
                pause = attempts.pause_after(error)
                if pause is None:
                    raise
                time.sleep(pause)
                continue
            waited = attempts.answered()
            try:
                granted = attempts.granted(data)
            except LockBrokerError:
                self._give_back(give_back(data))
                raise
            leases = [
                Lease(self, lease, attempts.sent_at, lease_ttl(options, lease),
                      attempts.held_from)
                for lease in granted
            ]
            if settle(leases, options, helper, attempts.answered_at - attempts.sent_at):
                assert helper is not None
                helper._resync()
            elif waited and options.session is None:
                try:
                    for lease in leases:
                        lease._resync()
                except LockBrokerError:
                    self._give_back(ReleaseAll(leases).request())
                    raise
            return leases

    def _give_back(self, request: Optional[Request]) -> None:
        """Sends ``request``, the release-all of leases an acquire-all cannot
        return, so they are not held until they expire; its failure is logged,
        the caller raises the error that made it necessary."""
        if request is None:
            return
        try:
            self._transport.request(*request)
        except LockBrokerError as error:
            log.warning("could not give back the leases of a failed acquire-all: %s", error)

    def release_all(self, leases: Sequence[Lease]) -> List[ReleaseResult]:
        """Gives back every lease of ``leases`` in one request, and returns what
        became of each, in the order given, as its own :meth:`Lease.release`
        would have it: released with its fence, or the error that release would
        raise (:class:`LeaseLost` for a lease the broker no longer had). Each
        lease ends as after its own release: never renewed again, and
        ``released``, or ``lost`` when the broker says so. A lease the broker
        had already called lost is not asked about again. Raises when the
        request as a whole failed (no answer, or a refusal such as a semaphore
        permit among the leases)."""
        release = ReleaseAll(leases)
        request = release.request()
        data = None if request is None else self._transport.request(*request)
        return release.answered(data)

    def extend(self, name: str, token: str, ttl: Duration) -> Renewal:
        """Sets the remaining TTL of the lease ``token`` holds to ``ttl`` seconds.
        Raises :class:`LeaseLost` or :class:`MaxHoldExceeded`."""
        return Renewal.from_json(self._extend(name, token, seconds(ttl, "ttl")))

    def release(self, name: str, token: str) -> int:
        """Gives the lock back at once; returns the lease's fence. Raises
        :class:`LeaseLost` if ``token`` no longer holds it."""
        return released_fence(self._release(name, token))

    def status(self, name: str) -> LockStatus:
        """The lock's current state (holders, last fence, expiry)."""
        return LockStatus.from_json(self._transport.request(*status_request(name)))

    def extend_permit(self, name: str, token: str, ttl: Duration) -> Renewal:
        """Sets the remaining TTL of the semaphore permit ``token`` holds to ``ttl``
        seconds. Raises :class:`LeaseLost` or :class:`MaxHoldExceeded`."""
        return Renewal.from_json(self._extend(name, token, seconds(ttl, "ttl"), kind=SEMAPHORES))

    def release_permit(self, name: str, token: str) -> int:
        """Gives the semaphore permit back at once; returns its fence. Raises
        :class:`LeaseLost` if ``token`` no longer holds it."""
        return released_fence(self._release(name, token, kind=SEMAPHORES))

    def semaphore_status(self, name: str) -> SemaphoreStatus:
        """The semaphore's current state (limit, permits held and free, holders)."""
        return SemaphoreStatus.from_json(
            self._transport.request(*status_request(name, SEMAPHORES))
        )

    def check_fence(self, name: str, fence: int) -> FenceCheck:
        """Whether a valid lease of the lock ``name`` carries exactly ``fence`` now,
        for a resource that cannot store fences. The answer can be stale by the
        time the resource acts: act at once, and within ``expires_in``. Raises
        :class:`InvalidRequest` (``field`` ``"name"`` or ``"fence"``) for a bad
        name or a fence outside 1 to 2^53 - 1."""
        return FenceCheck.from_json(
            self._transport.request(*fence_check_request(name, fence))
        )

    def check_semaphore_fence(self, name: str, fence: int) -> FenceCheck:
        """Whether a valid permit of the semaphore ``name`` carries exactly
        ``fence`` now; see :meth:`check_fence`."""
        return FenceCheck.from_json(
            self._transport.request(*fence_check_request(name, fence, SEMAPHORES))
        )

    def _extend(
        self,
        name: str,
        token: str,
        ttl: float,
        timeout: Optional[float] = None,
        kind: str = LOCKS,
    ) -> Dict[str, Any]:
        return self._transport.request(*extend_request(name, token, ttl, kind), timeout=timeout)

    def _release(self, name: str, token: str, kind: str = LOCKS) -> Dict[str, Any]:
        return self._transport.request(*release_request(name, token, kind))

    # -- sessions ----------------------------------------------------------------------

    def open_session(
        self,
        ttl: Duration = DEFAULT_TTL,
        *,
        owner: Optional[str] = None,
        lock_delay: Optional[Duration] = None,
    ) -> SessionGrant:
        """Opens a session, valid for ``ttl`` seconds after each keepalive:
        leases taken with its token (``acquire(name, session=grant.token)``)
        are renewed by its keepalives and end with it. ``lock_delay`` is the
        lock-delay of every lease under it (``None``: the broker's default);
        ``owner`` defaults to ``host:pid``. Nothing keeps the session alive:
        call :meth:`keep_session` in time, or use :meth:`session`."""
        return SessionGrant.from_json(
            self._transport.request(*opening(ttl, owner, lock_delay))
        )

    def keep_session(self, session_id: str, token: str) -> SessionRenewal:
        """Renews the session ``session_id`` and every lease under it to its TTL,
        in one request; ``ended`` names the leases that had ended meanwhile.
        Raises :class:`SessionLost` when the session is not open (it expired,
        was closed, or ``token`` is not its)."""
        return SessionRenewal.from_json(
            self._transport.request(*keep_session_request(session_id, token))
        )

    def close_session(self, session_id: str, token: str) -> int:
        """Closes the session and releases every lease under it; returns how
        many it released. Raises :class:`SessionLost` when the session is not
        open."""
        return leases_released(self._transport.request(*close_session_request(session_id, token)))

    def session_status(self, session_id: str) -> SessionStatus:
        """The session's current state (never its token): ``open``,
        ``expires_in``, its terms and how many leases it holds."""
        return SessionStatus.from_json(
            self._transport.request(*session_status_request(session_id))
        )

    def session(
        self,
        ttl: Duration = DEFAULT_TTL,
        *,
        owner: Optional[str] = None,
        lock_delay: Optional[Duration] = None,
    ) -> "Session":
        """A session kept alive from a background thread, with the leases taken
        under it; use it in a ``with`` statement (or call :meth:`Session.open`
        and :meth:`Session.close`)::

            with client.session(ttl=10, owner="batch-7") as session:
                leases = [session.acquire(f"ledger:{n}", wait=5) for n in range(100)]
                for lease in leases:
                    session.raise_if_lost()        # the session is gone: stop
                    post(lease.name, fence=lease.fence)

        Entering it opens the session; a thread sends one keepalive every
        ``ttl / 3`` seconds, which renews the session and every lease under it
        at once (no lease is ever extended on its own). When the broker says
        the session is not open, or no keepalive succeeded before ``ttl`` ran
        out by the local clock, ``session.lost`` is set and every lease taken
        through the helper is lost with it (``lost_reason`` ``"session_lost"``,
        its ``lost`` set). On exit the session is closed, which releases every
        lease under it (each reads ``released``); if it was lost while the body
        ran, :class:`SessionLost` is raised unless the body raised first.
        """
        return Session(self, ttl=ttl, owner=owner, lock_delay=lock_delay)

    # -- watching and leader election --------------------------------------------------

    def watch(
        self,
        name: str,
        *,
        last_event_id: Optional[str] = None,
        idle_timeout: Duration = DEFAULT_IDLE_TIMEOUT,
    ) -> "Watch":
        """The events of the lock ``name`` (``GET /v1/locks/{name}/events``), as an
        iterator::

            with client.watch("scheduler") as events:
                for event in events:
                    if event.type == "state":     # a LockState: held, owner, fence...
                        ...
                    elif event.type == "acquired":  # a LockEvent: owner, fence...
                        ...

        The first item is a :class:`LockState` (the lock's status, as
        :meth:`status` reports it); then come :class:`LockEvent` items, one per
        change (``acquired``, ``extended``, ``released``, ``expired``,
        ``force_released``), and :class:`Lagged` when this reader fell behind (a
        fresh :class:`LockState` follows). No event carries a token.

        A dropped connection, or one silent for ``idle_timeout`` seconds (the
        broker sends a keep-alive every 15 s), is opened again with growing
        pauses, sending the last event's id so the broker resumes after it; events
        a resume repeats are left out. Iterating ends only when the watch is closed
        (:meth:`Watch.close`, from any thread, or leaving the ``with`` block), or
        with an error that retrying cannot fix (:class:`AuthError`,
        :class:`InvalidRequest`). ``last_event_id`` resumes after an event a
        previous watch saw (its :attr:`Watch.last_event_id`).
        """
        return Watch(self, events_path(name), last_event_id=last_event_id,
                     idle_timeout=idle_timeout)

    def watch_prefix(
        self,
        prefix: str,
        *,
        last_event_id: Optional[str] = None,
        idle_timeout: Duration = DEFAULT_IDLE_TIMEOUT,
    ) -> "Watch":
        """The events of every lock whose name starts with ``prefix`` (``GET
        /v1/events?prefix=``; ``""`` watches every lock), as :meth:`watch` yields
        them: first one :class:`LockState` per lock held under the prefix, then a
        :class:`StateComplete`, then the changes."""
        return Watch(self, prefix_events_path(prefix), last_event_id=last_event_id,
                     idle_timeout=idle_timeout)

    def leader(
        self,
        name: str,
        ttl: Duration = 10.0,
        owner: Optional[str] = None,
        *,
        max_hold: Duration = DEFAULT_LEADER_MAX_HOLD,
    ) -> "Leader":
        """A leader election on the lock ``name``; use it in a ``with`` statement,
        or call :meth:`Leader.start` and :meth:`Leader.stop`::

            with client.leader("scheduler", ttl=10, owner="node-a") as leader:
                if leader.elected.wait(60):
                    while not leader.lost.is_set():
                        run_round(fence=leader.term)

        Starting it campaigns in a background thread: a waiting acquire, sent
        again for as long as it takes (pausing after a busy answer that came at
        once and while the broker is unavailable). Once granted, the lease is
        renewed every ``ttl / 3`` as :meth:`lock` renews it, ``elected`` is set,
        :attr:`Leader.is_leader` is true and :attr:`Leader.term` is the lease's
        fence. ``lost`` is set when the lease is lost; the helper then leads no
        more and does not campaign again (make another one). ``resign()``
        releases the lease; ``stop()`` (or leaving the block) resigns and stops
        watching. Meanwhile :attr:`Leader.leader` is the owner of whoever leads,
        from the lock's event stream. The lease is renewed for ``max_hold`` at
        most (default one day): then it runs out, and ``lost`` is set.
        """
        return Leader(self, name, ttl=ttl, owner=owner, max_hold=max_hold)

    # -- the managed lease -------------------------------------------------------------

    def lock(
        self,
        name: str,
        *,
        ttl: Duration = DEFAULT_TTL,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        max_hold: Duration = DEFAULT_MAX_HOLD,
        lock_delay: Optional[Duration] = None,
        fair: bool = False,
        shared: bool = False,
    ) -> "Lock":
        """A context manager that holds ``name`` while its body runs::

            with client.lock("nightly-report", ttl=30, wait=10) as lease:
                write_report(fence=lease.fence)
                if lease.lost.is_set():
                    ...

        A background thread renews the lease every ``ttl / 3`` seconds and stops
        renewing once the lease would outlive ``max_hold`` (default one hour) from
        acquisition, so a hung body cannot hold the lock forever. When the broker says
        the lease is gone, or the lease runs out without a renewal, ``lease.lost`` is
        set and the lease is never renewed again. When the broker refuses an extend
        for its own maximum hold, the renewer extends with shorter TTLs up to that
        cap. On exit the lease is released; if it was lost while the body ran,
        :class:`LeaseLost` is raised (even when the release still reached the
        broker in time) unless the body raised first.

        ``shared=True`` holds a shared lease (``lease.mode == "shared"``), which
        other shared leases may hold at the same time and an exclusive one
        excludes; it is renewed and released the same way.
        """
        return Lock(self, name, ttl=ttl, wait=wait, owner=owner, max_hold=max_hold,
                    lock_delay=lock_delay, fair=fair, shared=shared)

    def lock_all(
        self,
        locks: Sequence[Union[str, LockAsk]],
        *,
        ttl: Duration = DEFAULT_TTL,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        max_hold: Duration = DEFAULT_MAX_HOLD,
        lock_delay: Optional[Duration] = None,
    ) -> "LockAll":
        """A context manager that holds every lock of ``locks`` (names, or
        :class:`LockAsk` for a shared lease) while its body runs::

            with client.lock_all(["account:17", "account:42"], ttl=30, wait=10) as leases:
                debit, credit = leases
                transfer(debit.fence, credit.fence)
                if leases.lost.is_set():
                    ...

        Entering it is :meth:`acquire_all` (every lock or none, a busy answer
        asked again until ``wait`` is over, :class:`LockBusy` naming the busy
        lock); it gives a :class:`LeaseSet` of the leases in the order asked.
        Each lease is renewed by its own thread as :meth:`lock` renews one, up
        to ``max_hold``. ``leases.lost`` is set as soon as any of them is lost:
        the work no longer holds every lock it asked for (``leases.lost_lease``
        says which, and each lease's own ``lost`` is set too). On exit every
        lease still held is given back with one release-all; if any was lost
        while the body ran, :class:`LeaseLost` naming it is raised unless the
        body raised first.
        """
        return LockAll(self, locks, ttl=ttl, wait=wait, owner=owner, max_hold=max_hold,
                       lock_delay=lock_delay)

    def semaphore(
        self,
        name: str,
        limit: int,
        *,
        ttl: Duration = DEFAULT_TTL,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        max_hold: Duration = DEFAULT_MAX_HOLD,
        lock_delay: Optional[Duration] = None,
        fair: bool = False,
    ) -> "Semaphore":
        """A context manager that holds one of the ``limit`` permits of the semaphore
        ``name`` while its body runs::

            with client.semaphore("exports", limit=3, ttl=30, wait=10) as permit:
                run_export(fence=permit.fence)

        Everything :meth:`lock` does, it does for the permit: renewal every
        ``ttl / 3`` up to ``max_hold``, the ``lost`` event, release on exit and
        :class:`LeaseLost` if the permit was lost while the body ran. Every holder
        of the semaphore must ask with the same ``limit``: while permits are held
        under another, the acquire raises :class:`LimitConflict`.
        """
        return Semaphore(self, name, limit, ttl=ttl, wait=wait, owner=owner,
                         max_hold=max_hold, lock_delay=lock_delay, fair=fair)


class Lease(LeaseBase):
    """A granted lease: ``fence`` for the protected resource, ``token`` (secret) to
    extend and release it, and ``lost``, a :class:`threading.Event` set once the lease
    is gone or may be."""

    def __init__(
        self,
        client: Client,
        data: Dict[str, Any],
        sent_at: float,
        ttl: float,
        held_from: Optional[float] = None,
    ) -> None:
        super().__init__(data, sent_at, ttl, held_from)
        self._client = client
        self.lost = threading.Event()

    def extend(self, ttl: Optional[Duration] = None) -> "Lease":
        """Sets the remaining TTL to ``ttl`` (default: the lease's TTL). A lease
        already lost is never extended: that raises :class:`LeaseLost` at once."""
        ttl_s = self._extend_ttl(ttl)
        sent = time.monotonic()
        with self._tracking():
            self._renewed(
                self._client._extend(self.name, self.token, ttl_s, kind=self._kind), sent
            )
        return self

    def release(self) -> int:
        """Gives the lock back; returns the fence. Raises :class:`LeaseLost` when the
        lease had already expired or been taken. Sets ``release_acknowledged``:
        whether the Redis replicas the broker waits for acknowledged the release
        (``None`` when it waits for none)."""
        self.releasing = True
        with self._tracking():
            answer = self._client._release(self.name, self.token, kind=self._kind)
        self.release_acknowledged = released_acknowledged(answer)
        self.released = True
        return released_fence(answer)

    def check_fence(self) -> FenceCheck:
        """Asks the broker whether this lease's fence is still current (a permit's
        on the semaphore). A read: it neither renews the lease nor sets ``lost``,
        which only the lease's own calls and the deadline decide."""
        return FenceCheck.from_json(
            self._client._transport.request(
                *fence_check_request(self.name, self.fence, self._kind)
            )
        )

    def _resync(self) -> None:
        """Restarts the local deadline from a fresh send time after a long wait (the
        deadline counted from the acquire's send time may be long past)."""
        sent = time.monotonic()
        with self._tracking(ignore=self._RESYNC_IGNORES):
            self._renewed(
                self._client._extend(self.name, self.token, self.ttl, kind=self._kind), sent
            )


class Permit(Lease):
    """A granted semaphore permit: a :class:`Lease` (``fence``, ``token``, ``lost``,
    ``extend()``, ``release()``) on the semaphore's routes, with ``mode ==
    "permit"`` and the ``limit`` it was granted under."""

    _kind = SEMAPHORES

    def __init__(
        self,
        client: Client,
        data: Dict[str, Any],
        sent_at: float,
        ttl: float,
        held_from: Optional[float] = None,
    ) -> None:
        super().__init__(client, data, sent_at, ttl, held_from)
        #: The semaphore's limit this permit was granted under.
        self.limit: int = int(data["limit"])

    def extend(self, ttl: Optional[Duration] = None) -> "Permit":
        """Sets the remaining TTL (default: the permit's TTL); see :meth:`Lease.extend`."""
        super().extend(ttl)
        return self


class _Renewer:
    """The background thread that keeps a :class:`Lease` alive, stepping through
    :class:`Renewals` with blocking calls."""

    def __init__(self, lease: Lease, max_hold: float) -> None:
        self.lease = lease
        self.max_hold = max_hold
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"lockbroker-renew:{lease.name}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stops renewing and waits for an extend in flight to finish, so no extend
        reaches the broker after the release that follows."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self.lease._client.timeout + 1.0)

    def _run(self) -> None:
        lease = self.lease
        client = lease._client
        renewals = Renewals(lease, self.max_hold, client.timeout, time.monotonic())
        try:
            while not self._stop.is_set():
                step = renewals.next_step(time.monotonic())
                if step.action is Action.STOP:
                    return
                if step.action is Action.WAIT:
                    self._stop.wait(step.delay)
                    continue
                try:
                    data = client._extend(
                        lease.name, lease.token, step.ttl, timeout=step.timeout, kind=lease._kind
                    )
                except LockBrokerError as error:
                    renewals.failed(error, time.monotonic())
                else:
                    renewals.renewed(data)
        except Exception:
            renewals.crashed()


class Lock(LockBase):
    """What :meth:`Client.lock` returns; use it once, in a ``with`` statement."""

    _called = "a Lock"
    client: Client
    lease: Optional[Lease]
    _renewer: Optional[_Renewer] = None

    def __enter__(self) -> Lease:
        self._check_unused()
        lease = self.client._acquire(self.name, self.options)
        self.lease = lease
        self._renewer = _Renewer(lease, self.max_hold)
        self._renewer.start()
        return lease

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        assert self.lease is not None and self._renewer is not None
        self._renewer.stop()
        error = None
        if self._wants_release():
            try:
                self.lease.release()
            except LockBrokerError as caught:
                error = caught
        self._leave(error, exc_type)


class LeaseSet(LeaseSetBase):
    """What entering :meth:`Client.lock_all` gives: the :class:`Lease` of every
    lock, in the order asked (index it, or unpack it), and ``lost``, a
    :class:`threading.Event` set as soon as any of them is lost.
    ``raise_if_lost()`` raises :class:`LeaseLost` naming the lost lock."""

    leases: Tuple[Lease, ...]

    def __init__(self, leases: Sequence[Lease]) -> None:
        self.lost = threading.Event()
        super().__init__(leases)


class LockAll(LockAllBase):
    """What :meth:`Client.lock_all` returns; use it once, in a ``with`` statement."""

    _called = "a LockAll"
    client: Client
    leases: Optional[LeaseSet]
    _renewers: List[_Renewer]

    def __enter__(self) -> LeaseSet:
        self._check_unused()
        leases = LeaseSet(self.client._acquire_all(self.asks, self.options))
        self.leases = leases
        self._renewers = [_Renewer(lease, self.max_hold) for lease in leases.leases]
        for renewer in self._renewers:
            renewer.start()
        return leases

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        assert self.leases is not None
        for renewer in self._renewers:
            renewer.stop()
        results, error = None, None
        asked = cast(List[Lease], self._to_release())
        if asked:
            try:
                results = self.client.release_all(asked)
            except LockBrokerError as caught:
                error = caught
        self._leave(results, error, exc_type)


class Semaphore(Lock):
    """What :meth:`Client.semaphore` returns; use it once, in a ``with`` statement.
    Entering it gives a :class:`Permit`."""

    _called = "a Semaphore"
    _made_by = "client.semaphore()"
    lease: Optional[Permit]

    def __init__(
        self,
        client: Client,
        name: str,
        limit: int,
        *,
        ttl: Duration,
        wait: Duration,
        owner: Optional[str],
        max_hold: Duration,
        lock_delay: Optional[Duration],
        fair: bool = False,
    ) -> None:
        super().__init__(client, name, ttl=ttl, wait=wait, owner=owner, max_hold=max_hold,
                         lock_delay=lock_delay, fair=fair, limit=count(limit, "limit"))
        self.limit: int = cast(int, self.options.limit)

    def __enter__(self) -> Permit:
        return cast(Permit, super().__enter__())


class Session(SessionBase):
    """What :meth:`Client.session` returns: one session, kept alive by a
    background thread, and the leases taken under it. ``lost`` is a
    :class:`threading.Event`; every call may be made from any thread."""

    client: Client

    def __init__(
        self,
        client: Client,
        *,
        ttl: Duration,
        owner: Optional[str],
        lock_delay: Optional[Duration],
    ) -> None:
        super().__init__(client, ttl=ttl, owner=owner, lock_delay=lock_delay)
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "Session":
        return self.open()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self._leave(self._close(), exc_type)

    def open(self) -> "Session":
        """Opens the session and starts keeping it alive; returns the helper."""
        request = self._open_request()
        sent = time.monotonic()
        self._opened(self.client._transport.request(*request), sent)
        self._thread = threading.Thread(
            target=self._keep, args=(sent,), name=f"lockbroker-session:{self.id}", daemon=True
        )
        self._thread.start()
        return self

    def acquire(
        self,
        name: str,
        *,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        shared: bool = False,
        fair: bool = False,
        request_id: Optional[str] = None,
    ) -> Lease:
        """Takes the lock under the session, waiting up to ``wait`` seconds; see
        :meth:`Client.acquire`. ``owner`` defaults to the session's. The lease
        is tracked by the helper: renewed by its keepalives, lost with it,
        released by its close. Raises :class:`SessionLost` at once when the
        session is lost or closed."""
        return self.client.acquire(name, wait=wait, owner=owner, shared=shared, fair=fair,
                                   request_id=request_id, session=self)

    def acquire_permit(
        self,
        name: str,
        limit: int,
        *,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        fair: bool = False,
        request_id: Optional[str] = None,
    ) -> Permit:
        """Takes one of the ``limit`` permits of the semaphore ``name`` under the
        session; see :meth:`Client.acquire_permit` and :meth:`acquire`."""
        return self.client.acquire_permit(name, limit, wait=wait, owner=owner, fair=fair,
                                          request_id=request_id, session=self)

    def acquire_all(
        self,
        locks: Sequence[Union[str, LockAsk]],
        *,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        request_id: Optional[str] = None,
    ) -> List[Lease]:
        """A lease on every lock of ``locks``, or on none, all under the
        session; see :meth:`Client.acquire_all` and :meth:`acquire`."""
        return self.client.acquire_all(locks, wait=wait, owner=owner, request_id=request_id,
                                       session=self)

    def status(self) -> SessionStatus:
        """The session as the broker reads it now (see :meth:`Client.session_status`)."""
        if self.id is None:
            raise RuntimeError("the session is not open yet: use it in a with statement")
        return self.client.session_status(self.id)

    def close(self) -> int:
        """Stops the keepalives and closes the session, which releases every
        lease under it (each then reads ``released``); returns how many the
        broker released. Raises :class:`SessionLost` if the session was lost,
        and the error of a close that could not be sent (the session and its
        leases then end at its TTL). Closing again does nothing more."""
        return self._close_result(self._close())

    def _close(self) -> Optional[LockBrokerError]:
        """Stops the keepalive thread (waiting for a keepalive in flight, so none
        reaches the broker after the close), then sends the close."""
        send = self._closing()
        self._stop.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(self.client.timeout + 1.0)
        if not send:
            return None
        assert self.id is not None and self._token is not None
        try:
            data = self.client._transport.request(*close_session_request(self.id, self._token))
        except LockBrokerError as error:
            self._close_failed(error)
            return error
        self._closed(data)
        return None

    def _resync(self) -> None:
        """A keepalive at once, after a grant that waited: it renews the new
        lease with the session, so its deadline counts from now rather than from
        the acquire's send time. An unreachable broker is left to the thread."""
        assert self.id is not None and self._token is not None
        covered = self._snapshot()
        sent = time.monotonic()
        try:
            with self._asking():
                data = self.client._transport.request(
                    *keep_session_request(self.id, self._token)
                )
        except BrokerUnavailable:
            return
        self._check_each(self._kept(data, sent, covered))

    def _check_each(self, leases: List[LeaseBase]) -> None:
        """Checks the fence of each of ``leases`` on its own, and marks lost
        those that ended; a check the broker does not answer decides nothing."""
        for lease in leases:
            try:
                check = cast(Lease, lease).check_fence()
            except LockBrokerError:
                continue
            self._ended_if(lease, check)

    def _keep(self, opened_at: float) -> None:
        """The keepalive thread: steps through :class:`Keepalives`."""
        keepalives = Keepalives(self, self.client.timeout, opened_at)
        assert self.id is not None and self._token is not None
        request = keep_session_request(self.id, self._token)
        try:
            while not self._stop.is_set():
                step = keepalives.next_step(time.monotonic())
                if step.action is Action.STOP:
                    return
                if step.action is Action.WAIT:
                    self._stop.wait(step.delay)
                    continue
                try:
                    data = self.client._transport.request(*request, timeout=step.timeout)
                except LockBrokerError as error:
                    keepalives.failed(error, time.monotonic())
                else:
                    self._check_each(keepalives.kept(data))
        except Exception:
            keepalives.crashed()


class Watch:
    """What :meth:`Client.watch` and :meth:`Client.watch_prefix` return: an
    iterator of events that reconnects until closed. Iterate it from one thread;
    :meth:`close` may be called from any."""

    def __init__(
        self,
        client: Client,
        path: str,
        *,
        last_event_id: Optional[str],
        idle_timeout: Duration,
    ) -> None:
        self._client = client
        self._cursor = WatchCursor(path, last_event_id, idle_timeout)
        self._cancel = Cancel()
        self._lock = threading.Lock()
        self._stream: Optional[SyncStream] = None
        self._pending: Deque[WatchEvent] = deque()
        self._reading = False
        self._ended = False

    @property
    def last_event_id(self) -> Optional[str]:
        """The id of the last event received: pass it as ``last_event_id`` to a
        later watch to resume after it."""
        return self._cursor.last_event_id

    @property
    def closed(self) -> bool:
        return self._cancel.cancelled

    def __iter__(self) -> Iterator[WatchEvent]:
        return self

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Ends the watch: iterating stops (at once, also when another thread is
        waiting for the next event) and the connection is closed."""
        self._cancel.cancel()
        with self._lock:
            if not self._reading:
                self._drop_stream()

    def __next__(self) -> WatchEvent:
        with self._lock:
            if self._reading:
                raise RuntimeError("a Watch is iterated from one thread at a time")
            self._reading = True
        try:
            return self._next()
        finally:
            with self._lock:
                self._reading = False
                if self._cancel.cancelled:
                    self._drop_stream()

    def _next(self) -> WatchEvent:
        cursor = self._cursor
        while True:
            if self._pending:
                return self._pending.popleft()
            if self._cancel.cancelled or self._ended:
                raise StopIteration
            try:
                if self._stream is None:
                    pause = cursor.take_pause()
                    if pause > 0 and self._cancel.wait(pause):
                        continue
                    self._stream = self._client._transport.open_stream(
                        cursor.path, cursor.connecting(), self._client.timeout,
                        cursor.idle_timeout, self._cancel,
                    )
                piece = self._stream.read()
            except LockBrokerError as error:
                self._drop_stream()
                if self._cancel.cancelled:
                    continue
                self._dropped(error)
                continue
            if not piece:
                self._drop_stream()
                if not self._cancel.cancelled:
                    self._dropped(None)
                continue
            try:
                self._pending.extend(cursor.feed(piece))
            except ValueError as error:  # a line past the parser's limit
                self._drop_stream()
                self._dropped(BrokerUnavailable(f"unreadable event stream: {error}",
                                                code="bad_response"))

    def _dropped(self, error: Optional[LockBrokerError]) -> None:
        try:
            self._cursor.dropped(error)
        except LockBrokerError:
            self._ended = True
            raise

    def _drop_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Watch {self._cursor.path} {state} last_event_id={self.last_event_id!r}>"


class Leader(LeaderBase):
    """What :meth:`Client.leader` returns: one campaign for leadership of a lock,
    from background threads. ``lost`` and ``elected`` are :class:`threading.Event`
    objects; ``is_leader``, ``term``, ``leader`` and ``leader_term`` may be read
    from any thread."""

    client: Client
    _lease: Optional[Lease]

    def __init__(
        self,
        client: Client,
        name: str,
        *,
        ttl: Duration,
        owner: Optional[str],
        max_hold: Duration,
    ) -> None:
        super().__init__(client, name, ttl=ttl, owner=owner, max_hold=max_hold)
        self.lost = threading.Event()
        self.elected = threading.Event()
        self._cancel = Cancel()
        self._lock = threading.Lock()
        self._renewer: Optional[_Renewer] = None
        self._watch: Optional[Watch] = None
        self._threads: List[threading.Thread] = []

    def __enter__(self) -> "Leader":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> "Leader":
        """Starts following the lock's events and campaigning; returns at once."""
        self._check_unstarted()
        self._watch = self.client.watch(self.name)
        for target, role in ((self._follow, "follow"), (self._campaign, "campaign")):
            thread = threading.Thread(
                target=target, name=f"lockbroker-{role}:{self.name}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        return self

    def resign(self) -> None:
        """Stops campaigning and, while leading, stops renewing and releases the
        lease (a release that fails leaves the lease to expire; one that finds
        the lease already gone sets ``lost``). Following the events goes on
        until :meth:`stop`."""
        self._resigned = True
        self._cancel.cancel()
        with self._lock:
            lease, renewer = self._lease, self._renewer
        if lease is None:
            return
        if renewer is not None:
            renewer.stop()
        if lease.released or lease.lost_reason == "lease_lost":
            return
        try:
            lease.release()
        except LeaseLost:
            pass  # marked lost by the release itself
        except LockBrokerError as error:
            log.warning("could not release the leader lease on %r, it will expire: %s",
                        self.name, error)

    def stop(self) -> None:
        """Resigns, stops following the events, and waits for the threads."""
        self.resign()
        if self._watch is not None:
            self._watch.close()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(self.client.timeout + 1.0)

    def _follow(self) -> None:
        assert self._watch is not None
        try:
            for event in self._watch:
                self._view.apply(event)
        except LockBrokerError as error:
            log.warning("following the leader of %r stopped: %s", self.name, error)
        except Exception:
            log.exception("following the leader of %r failed", self.name)

    def _campaign(self) -> None:
        pauses = CampaignPauses()
        while not self._cancel.cancelled:
            started = time.monotonic()
            try:
                lease = self.client._acquire(self.name, self.options, cancel=self._cancel)
            except CAMPAIGN_RETRIES as error:
                if self._cancel.cancelled:
                    return
                pause = pauses.after(error, time.monotonic() - started)
                if pause is None:
                    self._campaign_failed(error)
                    return
                self._cancel.wait(pause)
                continue
            except Exception as error:  # a refused key or request: retrying cannot help
                self._campaign_failed(error)
                return
            self._won(lease)
            return

    def _won(self, lease: Lease) -> None:
        with self._lock:
            if self._cancel.cancelled:  # resigned while the grant was on its way
                resigned = True
            else:
                resigned = False
                lease.lost = self.lost  # the lease's loss is the term's
                self._lease = lease
                self._renewer = _Renewer(lease, self.max_hold)
                self._renewer.start()
                self.elected.set()
        if resigned:
            try:
                lease.release()
            except LockBrokerError as error:
                log.warning("could not release the leader lease on %r: %s", self.name, error)
            return
        log.info("leading %r as %r, term %d", self.name, self.owner, lease.fence)
