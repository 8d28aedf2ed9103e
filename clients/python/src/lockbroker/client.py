"""The blocking client: :class:`Client`, its :class:`Lease`, and ``client.lock()``,
a context manager that renews the lease from a background thread; and the same
for semaphores: :class:`Permit` and ``client.semaphore()``.

The rules (options, retries, renewal, release on exit) live in :mod:`._common`;
this module only blocks on them."""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import Any, Dict, Optional, Type, cast

from ._common import (
    DEFAULT_MAX_HOLD,
    DEFAULT_TTL,
    LOCKS,
    SEMAPHORES,
    Action,
    AcquireAttempts,
    ClientBase,
    Duration,
    LeaseBase,
    LockBase,
    LockOptions,
    LockStatus,
    Renewal,
    Renewals,
    SemaphoreStatus,
    count,
    extend_request,
    release_request,
    released_acknowledged,
    released_fence,
    seconds,
    status_request,
)
from ._transport import SyncTransport
from .errors import BrokerUnavailable, LockBrokerError, LockBusy

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
        ttl: Duration = DEFAULT_TTL,
        *,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        request_id: Optional[str] = None,
        lock_delay: Optional[Duration] = None,
        fair: bool = False,
        shared: bool = False,
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
        """
        options = LockOptions.check(
            ttl=ttl, wait=wait, owner=owner, lock_delay=lock_delay, fair=fair, shared=shared
        )
        return self._acquire(name, options, request_id)

    def acquire_permit(
        self,
        name: str,
        limit: int,
        ttl: Duration = DEFAULT_TTL,
        *,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        request_id: Optional[str] = None,
        lock_delay: Optional[Duration] = None,
        fair: bool = False,
    ) -> Permit:
        """Takes one of the ``limit`` permits of the semaphore ``name`` for ``ttl``
        seconds, waiting up to ``wait`` seconds for one; the other arguments are
        :meth:`acquire`'s. Nothing renews the returned permit: call
        :meth:`Permit.extend` in time, or use :meth:`semaphore`.

        Raises :class:`LockBusy` (with ``holders`` and ``limit``) when every permit
        is still taken after ``wait``, and :class:`LimitConflict` when the
        semaphore's permits are held under another limit.
        """
        options = LockOptions.check(
            ttl=ttl, wait=wait, owner=owner, lock_delay=lock_delay, fair=fair,
            limit=count(limit, "limit"),  # never None here: that would make it a lock
        )
        return cast(Permit, self._acquire(name, options, request_id))

    def _acquire(
        self, name: str, options: LockOptions, request_id: Optional[str] = None
    ) -> Lease:
        attempts = AcquireAttempts(name, options, request_id, self.timeout)
        granted = Permit if options.kind == SEMAPHORES else Lease
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
            lease = granted(self, data, attempts.sent_at, options.ttl, attempts.held_from)
            if waited:
                lease._resync()
            return lease

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
