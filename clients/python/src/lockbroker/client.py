"""The blocking client: :class:`Client`, its :class:`Lease`, and ``client.lock()``,
a context manager that renews the lease from a background thread."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Dict, Optional, Type

from ._common import (
    DEFAULT_MAX_HOLD,
    DEFAULT_TIMEOUT,
    DEFAULT_TTL,
    Duration,
    LeaseBase,
    LockStatus,
    RenewPlan,
    acquire_body,
    default_owner,
    lock_path,
    millis,
    new_request_id,
    seconds,
)
from ._transport import SyncTransport
from .errors import BrokerUnavailable, LeaseLost, LockBrokerError, LockBusy, MaxHoldExceeded

log = logging.getLogger("lockbroker")

#: A waiting acquire whose answer took longer than this share of the TTL is
#: followed by an extend, so the local deadline starts from a recent send time.
_RESYNC_SHARE = 0.1


@dataclass(frozen=True)
class Renewal:
    """The broker's answer to an extend: same fence, new expiry."""

    name: str
    fence: int
    ttl: float
    expires_at_ms: int
    owner: Optional[str]


class Client:
    """A connection to one broker.

    ``url`` is the broker's base URL (``http://127.0.0.1:7700``), ``api_key`` is sent
    as ``Authorization: Bearer <key>`` when given, and ``timeout`` bounds every HTTP
    exchange in seconds (a waiting acquire gets its wait on top). Thread-safe.
    """

    def __init__(
        self, url: str, api_key: Optional[str] = None, timeout: Duration = DEFAULT_TIMEOUT
    ) -> None:
        self.timeout = seconds(timeout, "timeout")
        self._transport = SyncTransport(url, api_key, self.timeout)

    @classmethod
    def from_env(cls, timeout: Duration = DEFAULT_TIMEOUT) -> "Client":
        """A client for ``LOCKBROKER_URL`` (default ``http://127.0.0.1:7700``) with
        the key in ``LOCKBROKER_API_KEY``, if set."""
        return cls(
            os.environ.get("LOCKBROKER_URL", "http://127.0.0.1:7700"),
            api_key=os.environ.get("LOCKBROKER_API_KEY") or None,
            timeout=timeout,
        )

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
        ttl_s = seconds(ttl, "ttl")
        wait_s = seconds(wait, "wait", allow_zero=True)
        delay_s = None if lock_delay is None else seconds(lock_delay, "lock_delay", allow_zero=True)
        owner = default_owner() if owner is None else owner
        request_id = request_id or new_request_id()
        path = lock_path(name, "acquire")
        give_up_at = time.monotonic() + wait_s
        while True:
            left = max(0.0, give_up_at - time.monotonic())
            body = acquire_body(ttl_s, left, owner, request_id, delay_s, fair)
            sent = time.monotonic()
            try:
                data = self._transport.request("POST", path, body, timeout=self.timeout + left)
            except LockBusy:
                # The broker caps one wait; keep waiting until the caller's deadline.
                if give_up_at - time.monotonic() <= 0:
                    raise
                if time.monotonic() - sent < 0.05:
                    time.sleep(min(0.05, max(0.0, give_up_at - time.monotonic())))
                continue
            except BrokerUnavailable as error:
                left = give_up_at - time.monotonic()
                if left <= 0:
                    raise
                time.sleep(min(left, error.retry_after or 0.5, 1.0))
                continue
            lease = Lease(self, data, sent, ttl_s)
            if time.monotonic() - sent > ttl_s * _RESYNC_SHARE:
                lease._resync()
            return lease

    def extend(self, name: str, token: str, ttl: Duration) -> Renewal:
        """Sets the remaining TTL of the lease ``token`` holds to ``ttl`` seconds.
        Raises :class:`LeaseLost` or :class:`MaxHoldExceeded`."""
        data = self._extend(name, token, seconds(ttl, "ttl"))
        return Renewal(
            name=data["name"],
            fence=data["fence"],
            ttl=data["ttl_ms"] / 1000.0,
            expires_at_ms=data["expires_at_ms"],
            owner=data.get("owner"),
        )

    def release(self, name: str, token: str) -> int:
        """Gives the lock back at once; returns the lease's fence. Raises
        :class:`LeaseLost` if ``token`` no longer holds it."""
        data = self._transport.request("POST", lock_path(name, "release"), {"token": token})
        return int(data["fence"])

    def status(self, name: str) -> LockStatus:
        """The lock's current state (holder, last fence, expiry)."""
        return LockStatus.from_json(self._transport.request("GET", lock_path(name)))

    def _extend(
        self, name: str, token: str, ttl: float, timeout: Optional[float] = None
    ) -> Dict[str, Any]:
        body = {"token": token, "ttl_ms": millis(ttl)}
        return self._transport.request("POST", lock_path(name, "extend"), body, timeout=timeout)

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
        set and the lease is never renewed again. On exit the lease is released; if it
        was lost, :class:`LeaseLost` is raised unless the body raised first.
        """
        return Lock(self, name, ttl=ttl, wait=wait, owner=owner, max_hold=max_hold,
                    lock_delay=lock_delay, fair=fair)


class Lease(LeaseBase):
    """A granted lease: ``fence`` for the protected resource, ``token`` (secret) to
    extend and release it, and ``lost``, a :class:`threading.Event` set once the lease
    is gone or may be."""

    def __init__(self, client: Client, data: Dict[str, Any], sent_at: float, ttl: float) -> None:
        super().__init__(data, sent_at, ttl)
        self._client = client
        self.granted_at = sent_at
        self.lost = threading.Event()

    def extend(self, ttl: Optional[Duration] = None) -> "Lease":
        """Sets the remaining TTL to ``ttl`` (default: the lease's TTL). A lease
        already lost is never extended: that raises :class:`LeaseLost` at once."""
        ttl_s = self.ttl if ttl is None else seconds(ttl, "ttl")
        self.raise_if_lost()
        sent = time.monotonic()
        try:
            data = self._client._extend(self.name, self.token, ttl_s)
        except LeaseLost:
            self._mark_lost("lease_lost")
            raise
        self._renewed(data, sent)
        return self

    def release(self) -> int:
        """Gives the lock back; returns the fence. Raises :class:`LeaseLost` when the
        lease had already expired or been taken."""
        try:
            fence = self._client.release(self.name, self.token)
        except LeaseLost:
            self._mark_lost("lease_lost")
            raise
        self.released = True
        return fence

    def _resync(self) -> None:
        """Restarts the local deadline from a fresh send time after a long wait (the
        deadline counted from the acquire's send time may be long past)."""
        sent = time.monotonic()
        try:
            data = self._client._extend(self.name, self.token, self.ttl)
        except LeaseLost:
            self._mark_lost("lease_lost")
            raise
        except (BrokerUnavailable, MaxHoldExceeded):
            return  # keep the conservative deadline from the acquire
        self._renewed(data, sent)


class _Renewer:
    """The background thread that keeps a :class:`Lease` alive."""

    def __init__(self, lease: Lease, plan: RenewPlan) -> None:
        self.lease = lease
        self.plan = plan
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
        try:
            self._renew_until_stopped()
        except Exception:  # a bug here must not leave the work believing it holds the lock
            log.exception("lease renewer for %r failed", self.lease.name)
            self.lease._mark_lost("renewer_failed")

    def _renew_until_stopped(self) -> None:
        lease, plan = self.lease, self.plan
        renewing = True
        next_at = time.monotonic() + plan.interval
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= lease.deadline:
                lease._mark_lost("expired")
                return
            if lease.lost.is_set():
                return
            ttl = plan.next_ttl(now) if renewing else None
            if ttl is None:
                # Max hold reached: let the lease run out, then report it gone.
                if not self._stop.wait(lease.deadline - now):
                    lease._mark_lost("expired")
                return
            if now < next_at:
                self._stop.wait(min(next_at, lease.deadline) - now)
                continue
            sent = time.monotonic()
            try:
                data = lease._client._extend(
                    lease.name, lease.token, ttl,
                    timeout=min(lease._client.timeout, max(0.05, lease.deadline - sent)),
                )
            except LeaseLost:
                lease._mark_lost("lease_lost")
                return
            except MaxHoldExceeded:
                log.info("lease on %r reached the broker's max hold", lease.name)
                renewing = False
                continue
            except BrokerUnavailable as error:
                log.warning("renewing lease on %r failed, retrying: %s", lease.name, error)
                next_at = time.monotonic() + plan.retry_pause(lease.deadline, time.monotonic())
                continue
            except LockBrokerError as error:
                log.error("renewing lease on %r refused, not retrying: %s", lease.name, error)
                renewing = False
                continue
            lease._renewed(data, sent)
            next_at = sent + plan.interval


class Lock:
    """What :meth:`Client.lock` returns; use it once, in a ``with`` statement."""

    def __init__(
        self,
        client: Client,
        name: str,
        *,
        ttl: Duration,
        wait: Duration,
        owner: Optional[str],
        max_hold: Duration,
        lock_delay: Optional[Duration],
        fair: bool = False,
    ) -> None:
        self.client = client
        self.name = name
        self.ttl = seconds(ttl, "ttl")
        self.wait = seconds(wait, "wait", allow_zero=True)
        self.max_hold = seconds(max_hold, "max_hold")
        if self.max_hold < self.ttl:
            raise ValueError(f"max_hold ({self.max_hold}s) must be at least ttl ({self.ttl}s)")
        self.owner = owner
        self.lock_delay = lock_delay
        self.fair = fair
        self.lease: Optional[Lease] = None
        self._renewer: Optional[_Renewer] = None

    def __enter__(self) -> Lease:
        if self.lease is not None:
            raise RuntimeError("a Lock can be entered only once; call client.lock() again")
        lease = self.client.acquire(
            self.name, self.ttl, wait=self.wait, owner=self.owner, lock_delay=self.lock_delay,
            fair=self.fair,
        )
        self.lease = lease
        self._renewer = _Renewer(lease, RenewPlan(self.ttl, self.max_hold, lease.granted_at))
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
        lease = self.lease
        if lease.lost_reason == "lease_lost":
            problem: Optional[LeaseLost] = _lost_error(lease)  # no point releasing
        else:
            try:
                lease.release()
                problem = _outcome(lease, None)
            except LockBrokerError as error:
                problem = _outcome(lease, error)
        if problem is not None:
            if exc_type is None:
                raise problem
            log.warning("lease on %r: %s (while handling %s)", self.name, problem, exc_type.__name__)


def _outcome(lease: LeaseBase, error: Optional[LockBrokerError]) -> Optional[LeaseLost]:
    """The :class:`LeaseLost` to raise on leaving a ``lock()`` block, given what the
    release raised (``None`` if it succeeded).

    A release that fails for another reason (the broker is down) is only logged
    when the lease was still ours: it expires on its own.
    """
    if isinstance(error, LeaseLost):
        return error
    if error is not None:
        if lease.lost.is_set():
            return _lost_error(lease)
        log.warning("could not release lease on %r, it will expire: %s", lease.name, error)
    return None


def _lost_error(lease: LeaseBase) -> LeaseLost:
    return LeaseLost(
        f"the lease on {lease.name!r} (fence {lease.fence}) was lost while the work ran "
        f"({lease.lost_reason}); another holder may already have run, so treat the work "
        "as possibly duplicated",
        code="lease_lost",
    )
