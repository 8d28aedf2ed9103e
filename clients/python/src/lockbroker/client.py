"""The blocking client: :class:`Client`, its :class:`Lease`, and ``client.lock()``,
a context manager that renews the lease from a background thread.

The rules (options, retries, renewal, release on exit) live in :mod:`._common`;
this module only blocks on them."""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import Any, Dict, Optional, Type

from ._common import (
    DEFAULT_MAX_HOLD,
    DEFAULT_TTL,
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
    ) -> Lease:
        """Takes the lock for ``ttl`` seconds, waiting up to ``wait`` seconds for it.

        Nothing renews the returned lease: call :meth:`Lease.extend` in time, or use
        :meth:`lock`. Raises :class:`LockBusy` when the lock is still held after
        ``wait``, and :class:`BrokerUnavailable` when the broker could not be reached
        within ``wait`` (transient failures are retried until then). ``lock_delay``
        keeps the lock unavailable that long after this lease *expires* unreleased;
        ``fair=True`` asks the broker to grant waiters in arrival order (brokers
        without fair queueing answer :class:`InvalidRequest`).
        """
        options = LockOptions.check(
            ttl=ttl, wait=wait, owner=owner, lock_delay=lock_delay, fair=fair
        )
        return self._acquire(name, options, request_id)

    def _acquire(
        self, name: str, options: LockOptions, request_id: Optional[str] = None
    ) -> Lease:
        attempts = AcquireAttempts(name, options, request_id, self.timeout)
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
            lease = Lease(self, data, attempts.sent_at, options.ttl, attempts.held_from)
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
        """The lock's current state (holder, last fence, expiry)."""
        return LockStatus.from_json(self._transport.request(*status_request(name)))

    def _extend(
        self, name: str, token: str, ttl: float, timeout: Optional[float] = None
    ) -> Dict[str, Any]:
        return self._transport.request(*extend_request(name, token, ttl), timeout=timeout)

    def _release(self, name: str, token: str) -> Dict[str, Any]:
        return self._transport.request(*release_request(name, token))

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
        """
        return Lock(self, name, ttl=ttl, wait=wait, owner=owner, max_hold=max_hold,
                    lock_delay=lock_delay, fair=fair)


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
            self._renewed(self._client._extend(self.name, self.token, ttl_s), sent)
        return self

    def release(self) -> int:
        """Gives the lock back; returns the fence. Raises :class:`LeaseLost` when the
        lease had already expired or been taken. Sets ``release_acknowledged``:
        whether the Redis replicas the broker waits for acknowledged the release
        (``None`` when it waits for none)."""
        self.releasing = True
        with self._tracking():
            answer = self._client._release(self.name, self.token)
        self.release_acknowledged = released_acknowledged(answer)
        self.released = True
        return released_fence(answer)

    def _resync(self) -> None:
        """Restarts the local deadline from a fresh send time after a long wait (the
        deadline counted from the acquire's send time may be long past)."""
        sent = time.monotonic()
        with self._tracking(ignore=self._RESYNC_IGNORES):
            self._renewed(self._client._extend(self.name, self.token, self.ttl), sent)


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
                    data = client._extend(lease.name, lease.token, step.ttl, timeout=step.timeout)
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
