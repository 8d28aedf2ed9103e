"""The asyncio twin of :mod:`lockbroker.client`: :class:`AsyncClient`, its
:class:`AsyncLease`, and ``async with client.lock(...)``, renewed by a task; and
for semaphores :class:`AsyncPermit` and ``async with client.semaphore(...)``.

The rules (options, retries, renewal, release on exit) live in :mod:`._common`;
this module only awaits them."""

from __future__ import annotations

import asyncio
import logging
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
from ._transport import AsyncTransport
from .errors import BrokerUnavailable, LockBrokerError, LockBusy

log = logging.getLogger("lockbroker")


class AsyncClient(ClientBase):
    """The asyncio client; same arguments and calls as :class:`lockbroker.Client`,
    as coroutines. It holds no connections between calls, so one instance can be
    shared by tasks and needs no closing."""

    _transport_class = AsyncTransport
    _transport: AsyncTransport

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
        shared: bool = False,
    ) -> "AsyncLease":
        """Takes the lock for ``ttl`` seconds, waiting up to ``wait`` seconds; see
        :meth:`lockbroker.Client.acquire`."""
        options = LockOptions.check(
            ttl=ttl, wait=wait, owner=owner, lock_delay=lock_delay, fair=fair, shared=shared
        )
        return await self._acquire(name, options, request_id)

    async def acquire_permit(
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
    ) -> "AsyncPermit":
        """Takes one of the ``limit`` permits of the semaphore ``name``; see
        :meth:`lockbroker.Client.acquire_permit`."""
        options = LockOptions.check(
            ttl=ttl, wait=wait, owner=owner, lock_delay=lock_delay, fair=fair,
            limit=count(limit, "limit"),  # never None here: that would make it a lock
        )
        return cast(AsyncPermit, await self._acquire(name, options, request_id))

    async def _acquire(
        self, name: str, options: LockOptions, request_id: Optional[str] = None
    ) -> "AsyncLease":
        attempts = AcquireAttempts(name, options, request_id, self.timeout)
        granted = AsyncPermit if options.kind == SEMAPHORES else AsyncLease
        while True:
            request, timeout = attempts.next_request()
            try:
                data = await self._transport.request(*request, timeout=timeout)
            except (LockBusy, BrokerUnavailable) as error:
                pause = attempts.pause_after(error)
                if pause is None:
                    raise
                await asyncio.sleep(pause)
                continue
            waited = attempts.answered()
            lease = granted(self, data, attempts.sent_at, options.ttl, attempts.held_from)
            if waited:
                await lease._resync()
            return lease

    async def extend(self, name: str, token: str, ttl: Duration) -> Renewal:
        """Sets the remaining TTL of the lease ``token`` holds to ``ttl`` seconds."""
        return Renewal.from_json(await self._extend(name, token, seconds(ttl, "ttl")))

    async def release(self, name: str, token: str) -> int:
        """Gives the lock back at once; returns the lease's fence."""
        return released_fence(await self._release(name, token))

    async def status(self, name: str) -> LockStatus:
        """The lock's current state."""
        return LockStatus.from_json(await self._transport.request(*status_request(name)))

    async def extend_permit(self, name: str, token: str, ttl: Duration) -> Renewal:
        """Sets the remaining TTL of the semaphore permit ``token`` holds."""
        return Renewal.from_json(
            await self._extend(name, token, seconds(ttl, "ttl"), kind=SEMAPHORES)
        )

    async def release_permit(self, name: str, token: str) -> int:
        """Gives the semaphore permit back at once; returns its fence."""
        return released_fence(await self._release(name, token, kind=SEMAPHORES))

    async def semaphore_status(self, name: str) -> SemaphoreStatus:
        """The semaphore's current state."""
        return SemaphoreStatus.from_json(
            await self._transport.request(*status_request(name, SEMAPHORES))
        )

    async def _extend(
        self,
        name: str,
        token: str,
        ttl: float,
        timeout: Optional[float] = None,
        kind: str = LOCKS,
    ) -> Dict[str, Any]:
        return await self._transport.request(
            *extend_request(name, token, ttl, kind), timeout=timeout
        )

    async def _release(self, name: str, token: str, kind: str = LOCKS) -> Dict[str, Any]:
        return await self._transport.request(*release_request(name, token, kind))

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
    ) -> "AsyncLock":
        """``async with client.lock("job", ttl=30) as lease:`` holds the lock while
        the body runs, renewed by a task; see :meth:`lockbroker.Client.lock`.
        ``lease.lost`` is an :class:`asyncio.Event`."""
        return AsyncLock(self, name, ttl=ttl, wait=wait, owner=owner, max_hold=max_hold,
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
    ) -> "AsyncSemaphore":
        """``async with client.semaphore("exports", limit=3) as permit:`` holds one
        permit while the body runs, renewed by a task; see
        :meth:`lockbroker.Client.semaphore`."""
        return AsyncSemaphore(self, name, limit, ttl=ttl, wait=wait, owner=owner,
                              max_hold=max_hold, lock_delay=lock_delay, fair=fair)


class AsyncLease(LeaseBase):
    """A granted lease; ``lost`` is an :class:`asyncio.Event`."""

    def __init__(
        self,
        client: AsyncClient,
        data: Dict[str, Any],
        sent_at: float,
        ttl: float,
        held_from: Optional[float] = None,
    ) -> None:
        super().__init__(data, sent_at, ttl, held_from)
        self._client = client
        self.lost = asyncio.Event()

    async def extend(self, ttl: Optional[Duration] = None) -> "AsyncLease":
        """Sets the remaining TTL; a lease already lost is never extended."""
        ttl_s = self._extend_ttl(ttl)
        sent = time.monotonic()
        with self._tracking():
            self._renewed(
                await self._client._extend(self.name, self.token, ttl_s, kind=self._kind), sent
            )
        return self

    async def release(self) -> int:
        """Gives the lock back; returns the fence, and sets
        ``release_acknowledged`` (see :meth:`lockbroker.Lease.release`)."""
        self.releasing = True
        with self._tracking():
            answer = await self._client._release(self.name, self.token, kind=self._kind)
        self.release_acknowledged = released_acknowledged(answer)
        self.released = True
        return released_fence(answer)

    async def _resync(self) -> None:
        sent = time.monotonic()
        with self._tracking(ignore=self._RESYNC_IGNORES):
            self._renewed(
                await self._client._extend(self.name, self.token, self.ttl, kind=self._kind),
                sent,
            )


class AsyncPermit(AsyncLease):
    """A granted semaphore permit: an :class:`AsyncLease` on the semaphore's routes,
    with ``mode == "permit"`` and the ``limit`` it was granted under."""

    _kind = SEMAPHORES

    def __init__(
        self,
        client: AsyncClient,
        data: Dict[str, Any],
        sent_at: float,
        ttl: float,
        held_from: Optional[float] = None,
    ) -> None:
        super().__init__(client, data, sent_at, ttl, held_from)
        #: The semaphore's limit this permit was granted under.
        self.limit: int = int(data["limit"])

    async def extend(self, ttl: Optional[Duration] = None) -> "AsyncPermit":
        """Sets the remaining TTL; a permit already lost is never extended."""
        await super().extend(ttl)
        return self


async def _renew(lease: AsyncLease, max_hold: float) -> None:
    """The renewal task: steps through :class:`Renewals` with awaited calls until
    cancelled or the lease is lost."""
    client = lease._client
    renewals = Renewals(lease, max_hold, client.timeout, time.monotonic())
    try:
        while True:
            step = renewals.next_step(time.monotonic())
            if step.action is Action.STOP:
                return
            if step.action is Action.WAIT:
                await asyncio.sleep(step.delay)
                continue
            try:
                data = await client._extend(
                    lease.name, lease.token, step.ttl, timeout=step.timeout, kind=lease._kind
                )
            except LockBrokerError as error:
                renewals.failed(error, time.monotonic())
            else:
                renewals.renewed(data)
    except asyncio.CancelledError:
        raise
    except Exception:
        renewals.crashed()


class AsyncLock(LockBase):
    """What :meth:`AsyncClient.lock` returns; use it once, in ``async with``."""

    _called = "an AsyncLock"
    client: AsyncClient
    lease: Optional[AsyncLease]
    _task: Optional["asyncio.Task[None]"] = None

    async def __aenter__(self) -> AsyncLease:
        self._check_unused()
        lease = await self.client._acquire(self.name, self.options)
        self.lease = lease
        self._task = asyncio.ensure_future(_renew(lease, self.max_hold))
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
        error = None
        if self._wants_release():
            try:
                await self.lease.release()
            except LockBrokerError as caught:
                error = caught
        self._leave(error, exc_type)


class AsyncSemaphore(AsyncLock):
    """What :meth:`AsyncClient.semaphore` returns; use it once, in ``async with``.
    Entering it gives an :class:`AsyncPermit`."""

    _called = "an AsyncSemaphore"
    _made_by = "client.semaphore()"
    lease: Optional[AsyncPermit]

    def __init__(
        self,
        client: AsyncClient,
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

    async def __aenter__(self) -> AsyncPermit:
        return cast(AsyncPermit, await super().__aenter__())
