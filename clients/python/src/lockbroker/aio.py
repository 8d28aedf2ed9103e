"""The asyncio twin of :mod:`lockbroker.client`: :class:`AsyncClient`, its
:class:`AsyncLease`, and ``async with client.lock(...)``, renewed by a task."""

from __future__ import annotations

import asyncio
import logging
import os
import time
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
from ._transport import AsyncTransport
from .client import _RESYNC_SHARE, Renewal, _lost_error, _outcome
from .errors import BrokerUnavailable, LeaseLost, LockBrokerError, LockBusy, MaxHoldExceeded

log = logging.getLogger("lockbroker")


class AsyncClient:
    """The asyncio client; same arguments and calls as :class:`lockbroker.Client`,
    as coroutines. It holds no connections between calls, so one instance can be
    shared by tasks and needs no closing."""

    def __init__(
        self, url: str, api_key: Optional[str] = None, timeout: Duration = DEFAULT_TIMEOUT
    ) -> None:
        self.timeout = seconds(timeout, "timeout")
        self._transport = AsyncTransport(url, api_key, self.timeout)

    @classmethod
    def from_env(cls, timeout: Duration = DEFAULT_TIMEOUT) -> "AsyncClient":
        """A client for ``LOCKBROKER_URL`` with the key in ``LOCKBROKER_API_KEY``."""
        return cls(
            os.environ.get("LOCKBROKER_URL", "http://127.0.0.1:7700"),
            api_key=os.environ.get("LOCKBROKER_API_KEY") or None,
            timeout=timeout,
        )

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None

    async def acquire(
        self,
        name: str,
        ttl: Duration = DEFAULT_TTL,
        *,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        request_id: Optional[str] = None,
        lock_delay: Optional[Duration] = None,
        fair: bool = False,
    ) -> "AsyncLease":
        """Takes the lock for ``ttl`` seconds, waiting up to ``wait`` seconds; see
        :meth:`lockbroker.Client.acquire`."""
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
                data = await self._transport.request(
                    "POST", path, body, timeout=self.timeout + left
                )
            except LockBusy:
                if give_up_at - time.monotonic() <= 0:
                    raise
                if time.monotonic() - sent < 0.05:
                    await asyncio.sleep(min(0.05, max(0.0, give_up_at - time.monotonic())))
                continue
            except BrokerUnavailable as error:
                left = give_up_at - time.monotonic()
                if left <= 0:
                    raise
                await asyncio.sleep(min(left, error.retry_after or 0.5, 1.0))
                continue
            lease = AsyncLease(self, data, sent, ttl_s)
            if time.monotonic() - sent > ttl_s * _RESYNC_SHARE:
                await lease._resync()
            return lease

    async def extend(self, name: str, token: str, ttl: Duration) -> Renewal:
        """Sets the remaining TTL of the lease ``token`` holds to ``ttl`` seconds."""
        data = await self._extend(name, token, seconds(ttl, "ttl"))
        return Renewal(
            name=data["name"],
            fence=data["fence"],
            ttl=data["ttl_ms"] / 1000.0,
            expires_at_ms=data["expires_at_ms"],
            owner=data.get("owner"),
        )

    async def release(self, name: str, token: str) -> int:
        """Gives the lock back at once; returns the lease's fence."""
        path = lock_path(name, "release")
        data = await self._transport.request("POST", path, {"token": token})
        return int(data["fence"])

    async def status(self, name: str) -> LockStatus:
        """The lock's current state."""
        return LockStatus.from_json(await self._transport.request("GET", lock_path(name)))

    async def _extend(
        self, name: str, token: str, ttl: float, timeout: Optional[float] = None
    ) -> Dict[str, Any]:
        body = {"token": token, "ttl_ms": millis(ttl)}
        return await self._transport.request(
            "POST", lock_path(name, "extend"), body, timeout=timeout
        )

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
    ) -> "AsyncLock":
        """``async with client.lock("job", ttl=30) as lease:`` holds the lock while
        the body runs, renewed by a task; see :meth:`lockbroker.Client.lock`.
        ``lease.lost`` is an :class:`asyncio.Event`."""
        return AsyncLock(self, name, ttl=ttl, wait=wait, owner=owner, max_hold=max_hold,
                         lock_delay=lock_delay, fair=fair)


class AsyncLease(LeaseBase):
    """A granted lease; ``lost`` is an :class:`asyncio.Event`."""

    def __init__(
        self, client: AsyncClient, data: Dict[str, Any], sent_at: float, ttl: float
    ) -> None:
        super().__init__(data, sent_at, ttl)
        self._client = client
        self.granted_at = sent_at
        self.lost = asyncio.Event()

    async def extend(self, ttl: Optional[Duration] = None) -> "AsyncLease":
        """Sets the remaining TTL; a lease already lost is never extended."""
        ttl_s = self.ttl if ttl is None else seconds(ttl, "ttl")
        self.raise_if_lost()
        sent = time.monotonic()
        try:
            data = await self._client._extend(self.name, self.token, ttl_s)
        except LeaseLost:
            self._mark_lost("lease_lost")
            raise
        self._renewed(data, sent)
        return self

    async def release(self) -> int:
        """Gives the lock back; returns the fence."""
        try:
            fence = await self._client.release(self.name, self.token)
        except LeaseLost:
            self._mark_lost("lease_lost")
            raise
        self.released = True
        return fence

    async def _resync(self) -> None:
        sent = time.monotonic()
        try:
            data = await self._client._extend(self.name, self.token, self.ttl)
        except LeaseLost:
            self._mark_lost("lease_lost")
            raise
        except (BrokerUnavailable, MaxHoldExceeded):
            return
        self._renewed(data, sent)


async def _renew(lease: AsyncLease, plan: RenewPlan) -> None:
    """The renewal task: same rules as the sync renewer thread."""
    client = lease._client
    renewing = True
    next_at = time.monotonic() + plan.interval
    while True:
        now = time.monotonic()
        if now >= lease.deadline:
            lease._mark_lost("expired")
            return
        if lease.lost.is_set():
            return
        ttl = plan.next_ttl(now) if renewing else None
        if ttl is None:
            await asyncio.sleep(lease.deadline - now)
            lease._mark_lost("expired")
            return
        if now < next_at:
            await asyncio.sleep(min(next_at, lease.deadline) - now)
            continue
        sent = time.monotonic()
        try:
            data = await client._extend(
                lease.name, lease.token, ttl,
                timeout=min(client.timeout, max(0.05, lease.deadline - sent)),
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


class AsyncLock:
    """What :meth:`AsyncClient.lock` returns; use it once, in ``async with``."""

    def __init__(
        self,
        client: AsyncClient,
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
        self.lease: Optional[AsyncLease] = None
        self._task: Optional["asyncio.Task[None]"] = None

    async def __aenter__(self) -> AsyncLease:
        if self.lease is not None:
            raise RuntimeError("an AsyncLock can be entered only once; call client.lock() again")
        lease = await self.client.acquire(
            self.name, self.ttl, wait=self.wait, owner=self.owner, lock_delay=self.lock_delay,
            fair=self.fair,
        )
        self.lease = lease
        plan = RenewPlan(self.ttl, self.max_hold, lease.granted_at)
        self._task = asyncio.ensure_future(_guarded(lease, plan))
        return lease

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        assert self.lease is not None and self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        lease = self.lease
        if lease.lost_reason == "lease_lost":
            problem: Optional[LeaseLost] = _lost_error(lease)  # no point releasing
        else:
            try:
                await lease.release()
                problem = _outcome(lease, None)
            except LockBrokerError as error:
                problem = _outcome(lease, error)
        if problem is not None:
            if exc_type is None:
                raise problem
            log.warning("lease on %r: %s (while handling %s)", self.name, problem, exc_type.__name__)


async def _guarded(lease: AsyncLease, plan: RenewPlan) -> None:
    try:
        await _renew(lease, plan)
    except asyncio.CancelledError:
        raise
    except Exception:  # a bug here must not leave the work believing it holds the lock
        log.exception("lease renewer for %r failed", lease.name)
        lease._mark_lost("renewer_failed")
