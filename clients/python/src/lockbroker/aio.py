"""The asyncio twin of :mod:`lockbroker.client`: :class:`AsyncClient`, its
:class:`AsyncLease`, and ``async with client.lock(...)``, renewed by a task; for
semaphores :class:`AsyncPermit` and ``async with client.semaphore(...)``; for
several locks ``async with client.lock_all(...)`` (an :class:`AsyncLeaseSet`);
``async for event in client.watch(...)`` (:class:`AsyncWatch`),
``async with client.leader(...)`` (:class:`AsyncLeader`) and ``async with
client.session(...)`` (:class:`AsyncSession`, kept alive by a task).

The rules (options, retries, renewal, release on exit) live in :mod:`._options`,
:mod:`._retry`, :mod:`._renewals` and :mod:`._lease`, those of watching and
electing in :mod:`._events`, and those of sessions in :mod:`._sessions`; this
module only awaits them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from types import TracebackType
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple, Type, Union, cast

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
from ._transport import AsyncStream, AsyncTransport
from .errors import BrokerUnavailable, LeaseLost, LockBrokerError, LockBusy

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
        ttl: Duration = ACQUIRE_TTL,
        *,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        request_id: Optional[str] = None,
        lock_delay: Optional[Duration] = None,
        fair: bool = False,
        shared: bool = False,
        session: Union[str, "AsyncSession", None] = None,
    ) -> "AsyncLease":
        """Takes the lock for ``ttl`` seconds, waiting up to ``wait`` seconds, or
        under a ``session`` (an :class:`AsyncSession` or a session's token); see
        :meth:`lockbroker.Client.acquire`."""
        helper, token = session_parts(session, AsyncSession)
        options = LockOptions.check(
            ttl=ttl, wait=wait, owner=lease_owner(owner, helper), lock_delay=lock_delay,
            fair=fair, shared=shared, session=token,
        )
        return await self._acquire(name, options, request_id, helper)

    async def acquire_permit(
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
        session: Union[str, "AsyncSession", None] = None,
    ) -> "AsyncPermit":
        """Takes one of the ``limit`` permits of the semaphore ``name``; see
        :meth:`lockbroker.Client.acquire_permit`."""
        helper, token = session_parts(session, AsyncSession)
        options = LockOptions.check(
            ttl=ttl, wait=wait, owner=lease_owner(owner, helper), lock_delay=lock_delay,
            fair=fair, session=token,
            limit=count(limit, "limit"),  # never None here: that would make it a lock
        )
        return cast(AsyncPermit, await self._acquire(name, options, request_id, helper))

    async def _acquire(
        self,
        name: str,
        options: LockOptions,
        request_id: Optional[str] = None,
        helper: Optional["AsyncSession"] = None,
    ) -> "AsyncLease":
        with asking(helper):
            return await self._attempt(name, options, request_id, helper)

    async def _attempt(
        self,
        name: str,
        options: LockOptions,
        request_id: Optional[str],
        helper: Optional["AsyncSession"],
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
            lease = granted(self, data, attempts.sent_at, lease_ttl(options, data),
                            attempts.held_from)
            if settle([lease], options, helper, attempts.answered_at - attempts.sent_at):
                assert helper is not None
                await helper._resync()
            elif waited and options.session is None:
                await lease._resync()
            return lease

    async def acquire_all(
        self,
        locks: Sequence[Union[str, LockAsk]],
        ttl: Duration = ACQUIRE_TTL,
        *,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        request_id: Optional[str] = None,
        lock_delay: Optional[Duration] = None,
        session: Union[str, "AsyncSession", None] = None,
    ) -> List["AsyncLease"]:
        """A lease on every lock of ``locks``, or on none; see
        :meth:`lockbroker.Client.acquire_all`."""
        helper, token = session_parts(session, AsyncSession)
        options = LockOptions.check(ttl=ttl, wait=wait, owner=lease_owner(owner, helper),
                                    lock_delay=lock_delay, fair=False, session=token)
        asks = lock_asks(locks)
        with asking(helper):
            return await self._acquire_all(asks, options, request_id, helper)

    async def _acquire_all(
        self,
        asks: Sequence[LockAsk],
        options: LockOptions,
        request_id: Optional[str] = None,
        helper: Optional["AsyncSession"] = None,
    ) -> List["AsyncLease"]:
        if not asks:
            return []
        attempts = AcquireAllAttempts(tuple(asks), options, request_id, self.timeout)
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
            try:
                granted = attempts.granted(data)
            except LockBrokerError:
                await self._give_back(give_back(data))
                raise
            leases = [
                AsyncLease(self, lease, attempts.sent_at, lease_ttl(options, lease),
                           attempts.held_from)
                for lease in granted
            ]
            if settle(leases, options, helper, attempts.answered_at - attempts.sent_at):
                assert helper is not None
                await helper._resync()
            elif waited and options.session is None:
                try:
                    for lease in leases:
                        await lease._resync()
                except LockBrokerError:
                    await self._give_back(ReleaseAll(leases).request())
                    raise
            return leases

    async def _give_back(self, request: Optional[Request]) -> None:
        """Sends the release-all of leases an acquire-all cannot return; see
        :meth:`lockbroker.Client._give_back`."""
        if request is None:
            return
        try:
            await self._transport.request(*request)
        except LockBrokerError as error:
            log.warning("could not give back the leases of a failed acquire-all: %s", error)

    async def release_all(self, leases: Sequence["AsyncLease"]) -> List[ReleaseResult]:
        """Gives back every lease of ``leases`` in one request; see
        :meth:`lockbroker.Client.release_all`."""
        release = ReleaseAll(leases)
        request = release.request()
        data = None if request is None else await self._transport.request(*request)
        return release.answered(data)

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

    async def check_fence(self, name: str, fence: int) -> FenceCheck:
        """Whether a valid lease of the lock ``name`` carries exactly ``fence`` now,
        for a resource that cannot store fences. The answer can be stale by the
        time the resource acts: act at once, and within ``expires_in``. Raises
        :class:`InvalidRequest` (``field`` ``"name"`` or ``"fence"``) for a bad
        name or a fence outside 1 to 2^53 - 1."""
        return FenceCheck.from_json(
            await self._transport.request(*fence_check_request(name, fence))
        )

    async def check_semaphore_fence(self, name: str, fence: int) -> FenceCheck:
        """Whether a valid permit of the semaphore ``name`` carries exactly
        ``fence`` now; see :meth:`check_fence`."""
        return FenceCheck.from_json(
            await self._transport.request(*fence_check_request(name, fence, SEMAPHORES))
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

    async def open_session(
        self,
        ttl: Duration = DEFAULT_TTL,
        *,
        owner: Optional[str] = None,
        lock_delay: Optional[Duration] = None,
    ) -> SessionGrant:
        """Opens a session; see :meth:`lockbroker.Client.open_session`."""
        return SessionGrant.from_json(
            await self._transport.request(*opening(ttl, owner, lock_delay))
        )

    async def keep_session(self, session_id: str, token: str) -> SessionRenewal:
        """Renews the session and every lease under it; see
        :meth:`lockbroker.Client.keep_session`."""
        return SessionRenewal.from_json(
            await self._transport.request(*keep_session_request(session_id, token))
        )

    async def close_session(self, session_id: str, token: str) -> int:
        """Closes the session and releases every lease under it; returns how
        many it released. See :meth:`lockbroker.Client.close_session`."""
        return leases_released(
            await self._transport.request(*close_session_request(session_id, token))
        )

    async def session_status(self, session_id: str) -> SessionStatus:
        """The session's current state (never its token)."""
        return SessionStatus.from_json(
            await self._transport.request(*session_status_request(session_id))
        )

    def session(
        self,
        ttl: Duration = DEFAULT_TTL,
        *,
        owner: Optional[str] = None,
        lock_delay: Optional[Duration] = None,
    ) -> "AsyncSession":
        """``async with client.session(ttl=10) as session:`` opens a session kept
        alive by a task, with the leases taken under it (``await
        session.acquire(name)``); ``session.lost`` is an :class:`asyncio.Event`.
        See :meth:`lockbroker.Client.session`. Make it inside the event loop
        that uses it."""
        return AsyncSession(self, ttl=ttl, owner=owner, lock_delay=lock_delay)

    def watch(
        self,
        name: str,
        *,
        last_event_id: Optional[str] = None,
        idle_timeout: Duration = DEFAULT_IDLE_TIMEOUT,
    ) -> "AsyncWatch":
        """``async with client.watch("job") as events: async for event in events:``
        reads the lock's events, reconnecting until closed; see
        :meth:`lockbroker.Client.watch`."""
        return AsyncWatch(self, events_path(name), last_event_id=last_event_id,
                          idle_timeout=idle_timeout)

    def watch_prefix(
        self,
        prefix: str,
        *,
        last_event_id: Optional[str] = None,
        idle_timeout: Duration = DEFAULT_IDLE_TIMEOUT,
    ) -> "AsyncWatch":
        """The events of every lock under ``prefix``; see
        :meth:`lockbroker.Client.watch_prefix`."""
        return AsyncWatch(self, prefix_events_path(prefix), last_event_id=last_event_id,
                          idle_timeout=idle_timeout)

    def leader(
        self,
        name: str,
        ttl: Duration = 10.0,
        owner: Optional[str] = None,
        *,
        max_hold: Duration = DEFAULT_LEADER_MAX_HOLD,
    ) -> "AsyncLeader":
        """``async with client.leader("scheduler") as leader:`` campaigns for the
        lock in a task; ``leader.elected`` and ``leader.lost`` are
        :class:`asyncio.Event` objects. See :meth:`lockbroker.Client.leader`.
        Make it inside the event loop that uses it."""
        return AsyncLeader(self, name, ttl=ttl, owner=owner, max_hold=max_hold)

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

    def lock_all(
        self,
        locks: Sequence[Union[str, LockAsk]],
        *,
        ttl: Duration = DEFAULT_TTL,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        max_hold: Duration = DEFAULT_MAX_HOLD,
        lock_delay: Optional[Duration] = None,
    ) -> "AsyncLockAll":
        """``async with client.lock_all(["a", "b"], ttl=30) as leases:`` holds
        every lock while the body runs, each lease renewed by a task;
        ``leases.lost`` is an :class:`asyncio.Event` set when any of them is
        lost. See :meth:`lockbroker.Client.lock_all`."""
        return AsyncLockAll(self, locks, ttl=ttl, wait=wait, owner=owner, max_hold=max_hold,
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

    async def check_fence(self) -> FenceCheck:
        """Asks the broker whether this lease's fence is still current (a permit's
        on the semaphore). A read: it neither renews the lease nor sets ``lost``,
        which only the lease's own calls and the deadline decide."""
        return FenceCheck.from_json(
            await self._client._transport.request(
                *fence_check_request(self.name, self.fence, self._kind)
            )
        )

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


class AsyncLeaseSet(LeaseSetBase):
    """What entering :meth:`AsyncClient.lock_all` gives: the :class:`AsyncLease`
    of every lock, in the order asked, and ``lost``, an :class:`asyncio.Event`
    set as soon as any of them is lost. See :class:`lockbroker.LeaseSet`."""

    leases: Tuple[AsyncLease, ...]

    def __init__(self, leases: Sequence[AsyncLease]) -> None:
        self.lost = asyncio.Event()
        super().__init__(leases)


class AsyncLockAll(LockAllBase):
    """What :meth:`AsyncClient.lock_all` returns; use it once, in ``async with``."""

    _called = "an AsyncLockAll"
    client: AsyncClient
    leases: Optional[AsyncLeaseSet]
    _tasks: "List[asyncio.Task[None]]"

    async def __aenter__(self) -> AsyncLeaseSet:
        self._check_unused()
        leases = AsyncLeaseSet(await self.client._acquire_all(self.asks, self.options))
        self.leases = leases
        self._tasks = [
            asyncio.ensure_future(_renew(lease, self.max_hold)) for lease in leases.leases
        ]
        return leases

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        assert self.leases is not None
        for task in self._tasks:
            await _cancelled(task)
        results, error = None, None
        asked = cast(List[AsyncLease], self._to_release())
        if asked:
            try:
                results = await self.client.release_all(asked)
            except LockBrokerError as caught:
                error = caught
        self._leave(results, error, exc_type)


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


class AsyncSession(SessionBase):
    """What :meth:`AsyncClient.session` returns: one session, kept alive by a
    task, and the leases taken under it; ``lost`` is an :class:`asyncio.Event`.
    See :class:`lockbroker.Session`."""

    client: AsyncClient

    def __init__(
        self,
        client: AsyncClient,
        *,
        ttl: Duration,
        owner: Optional[str],
        lock_delay: Optional[Duration],
    ) -> None:
        super().__init__(client, ttl=ttl, owner=owner, lock_delay=lock_delay)
        self.lost = asyncio.Event()
        self._task: Optional["asyncio.Task[None]"] = None

    async def __aenter__(self) -> "AsyncSession":
        return await self.open()

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self._leave(await self._close(), exc_type)

    async def open(self) -> "AsyncSession":
        """Opens the session and starts keeping it alive; returns the helper."""
        request = self._open_request()
        sent = time.monotonic()
        self._opened(await self.client._transport.request(*request), sent)
        self._task = asyncio.ensure_future(self._keep(sent))
        return self

    async def acquire(
        self,
        name: str,
        *,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        shared: bool = False,
        fair: bool = False,
        request_id: Optional[str] = None,
    ) -> AsyncLease:
        """Takes the lock under the session; see :meth:`lockbroker.Session.acquire`."""
        return await self.client.acquire(name, wait=wait, owner=owner, shared=shared,
                                         fair=fair, request_id=request_id, session=self)

    async def acquire_permit(
        self,
        name: str,
        limit: int,
        *,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        fair: bool = False,
        request_id: Optional[str] = None,
    ) -> AsyncPermit:
        """Takes a permit of the semaphore ``name`` under the session; see
        :meth:`lockbroker.Session.acquire_permit`."""
        return await self.client.acquire_permit(name, limit, wait=wait, owner=owner, fair=fair,
                                                request_id=request_id, session=self)

    async def acquire_all(
        self,
        locks: Sequence[Union[str, LockAsk]],
        *,
        wait: Duration = 0.0,
        owner: Optional[str] = None,
        request_id: Optional[str] = None,
    ) -> List[AsyncLease]:
        """A lease on every lock of ``locks``, or on none, under the session; see
        :meth:`lockbroker.Session.acquire_all`."""
        return await self.client.acquire_all(locks, wait=wait, owner=owner,
                                             request_id=request_id, session=self)

    async def status(self) -> SessionStatus:
        """The session as the broker reads it now."""
        if self.id is None:
            raise RuntimeError("the session is not open yet: use it in async with")
        return await self.client.session_status(self.id)

    async def close(self) -> int:
        """Stops the keepalives and closes the session; see
        :meth:`lockbroker.Session.close`."""
        return self._close_result(await self._close())

    async def _close(self) -> Optional[LockBrokerError]:
        """Stops the keepalive task (a keepalive in flight is abandoned), then
        sends the close."""
        send = self._closing()
        await _cancelled(self._task)
        if not send:
            return None
        assert self.id is not None and self._token is not None
        try:
            data = await self.client._transport.request(
                *close_session_request(self.id, self._token)
            )
        except LockBrokerError as error:
            self._close_failed(error)
            return error
        self._closed(data)
        return None

    async def _resync(self) -> None:
        """A keepalive at once, after a grant that waited; see
        :meth:`lockbroker.Session._resync`."""
        assert self.id is not None and self._token is not None
        covered = self._snapshot()
        sent = time.monotonic()
        try:
            with self._asking():
                data = await self.client._transport.request(
                    *keep_session_request(self.id, self._token)
                )
        except BrokerUnavailable:
            return
        await self._check_each(self._kept(data, sent, covered))

    async def _check_each(self, leases: List[LeaseBase]) -> None:
        """Checks the fence of each of ``leases`` on its own; see
        :meth:`lockbroker.Session._check_each`."""
        for lease in leases:
            try:
                check = await cast(AsyncLease, lease).check_fence()
            except LockBrokerError:
                continue
            self._ended_if(lease, check)

    async def _keep(self, opened_at: float) -> None:
        """The keepalive task: steps through :class:`Keepalives`."""
        keepalives = Keepalives(self, self.client.timeout, opened_at)
        assert self.id is not None and self._token is not None
        request = keep_session_request(self.id, self._token)
        try:
            while True:
                step = keepalives.next_step(time.monotonic())
                if step.action is Action.STOP:
                    return
                if step.action is Action.WAIT:
                    await asyncio.sleep(step.delay)
                    continue
                try:
                    data = await self.client._transport.request(*request, timeout=step.timeout)
                except LockBrokerError as error:
                    keepalives.failed(error, time.monotonic())
                else:
                    await self._check_each(keepalives.kept(data))
        except asyncio.CancelledError:
            raise
        except Exception:
            keepalives.crashed()


class AsyncWatch:
    """What :meth:`AsyncClient.watch` and :meth:`AsyncClient.watch_prefix` return:
    an async iterator of events that reconnects until closed. ``close()`` (or
    ``await aclose()``, or leaving ``async with``) ends it, also while another
    task waits for the next event."""

    def __init__(
        self,
        client: AsyncClient,
        path: str,
        *,
        last_event_id: Optional[str],
        idle_timeout: Duration,
    ) -> None:
        self._client = client
        self._cursor = WatchCursor(path, last_event_id, idle_timeout)
        self._stream: Optional[AsyncStream] = None
        self._pending: Deque[WatchEvent] = deque()
        self._closed = False
        self._ended = False
        self._wake: Optional[asyncio.Event] = None

    @property
    def last_event_id(self) -> Optional[str]:
        """The id of the last event received; see :attr:`lockbroker.Watch.last_event_id`."""
        return self._cursor.last_event_id

    @property
    def closed(self) -> bool:
        return self._closed

    def __aiter__(self) -> "AsyncWatch":
        return self

    async def __aenter__(self) -> "AsyncWatch":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def close(self) -> None:
        """Ends the watch: iterating stops and the connection is closed."""
        self._closed = True
        if self._wake is not None:
            self._wake.set()
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    async def aclose(self) -> None:
        """:meth:`close`, waiting for the connection to be closed."""
        stream = self._stream
        self.close()
        if stream is not None:
            await stream.aclose()

    async def __anext__(self) -> WatchEvent:
        cursor = self._cursor
        while True:
            if self._pending:
                return self._pending.popleft()
            if self._closed or self._ended:
                raise StopAsyncIteration
            try:
                if self._stream is None:
                    pause = cursor.take_pause()
                    if pause > 0:
                        await self._sleep(pause)
                        continue
                    stream = await self._client._transport.open_stream(
                        cursor.path, cursor.connecting(), self._client.timeout
                    )
                    if self._closed:  # closed while connecting
                        stream.close()
                        continue
                    self._stream = stream
                piece = await self._stream.read(cursor.idle_timeout)
            except LockBrokerError as error:
                self._drop_stream()
                if not self._closed:
                    self._dropped(error)
                continue
            if not piece:
                self._drop_stream()
                if not self._closed:
                    self._dropped(None)
                continue
            try:
                self._pending.extend(cursor.feed(piece))
            except ValueError as error:  # a line past the parser's limit
                self._drop_stream()
                self._dropped(BrokerUnavailable(f"unreadable event stream: {error}",
                                                code="bad_response"))

    async def _sleep(self, pause: float) -> None:
        """Pauses, ending early when the watch is closed."""
        if self._wake is None:
            self._wake = asyncio.Event()
        try:
            await asyncio.wait_for(self._wake.wait(), pause)
        except asyncio.TimeoutError:
            pass

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
        return f"<AsyncWatch {self._cursor.path} {state} last_event_id={self.last_event_id!r}>"


class AsyncLeader(LeaderBase):
    """What :meth:`AsyncClient.leader` returns: one campaign for leadership of a
    lock, from tasks; ``lost`` and ``elected`` are :class:`asyncio.Event` objects.
    See :class:`lockbroker.Leader`."""

    client: AsyncClient
    _lease: Optional[AsyncLease]

    def __init__(
        self,
        client: AsyncClient,
        name: str,
        *,
        ttl: Duration,
        owner: Optional[str],
        max_hold: Duration,
    ) -> None:
        super().__init__(client, name, ttl=ttl, owner=owner, max_hold=max_hold)
        self.lost = asyncio.Event()
        self.elected = asyncio.Event()
        self._watch: Optional[AsyncWatch] = None
        self._campaign_task: Optional["asyncio.Task[None]"] = None
        self._follow_task: Optional["asyncio.Task[None]"] = None
        self._renew_task: Optional["asyncio.Task[None]"] = None

    async def __aenter__(self) -> "AsyncLeader":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    async def start(self) -> "AsyncLeader":
        """Starts following the lock's events and campaigning; returns at once."""
        self._check_unstarted()
        self._watch = self.client.watch(self.name)
        self._follow_task = asyncio.ensure_future(self._follow())
        self._campaign_task = asyncio.ensure_future(self._campaign())
        return self

    async def resign(self) -> None:
        """Stops campaigning and, while leading, stops renewing and releases the
        lease; see :meth:`lockbroker.Leader.resign`."""
        self._resigned = True
        await _cancelled(self._campaign_task)
        lease = self._lease
        if lease is None:
            return
        await _cancelled(self._renew_task)
        if lease.released or lease.lost_reason == "lease_lost":
            return
        try:
            await lease.release()
        except LeaseLost:
            pass  # marked lost by the release itself
        except LockBrokerError as error:
            log.warning("could not release the leader lease on %r, it will expire: %s",
                        self.name, error)

    async def stop(self) -> None:
        """Resigns and stops following the events."""
        await self.resign()
        if self._watch is not None:
            await self._watch.aclose()
        await _cancelled(self._follow_task)

    async def _follow(self) -> None:
        assert self._watch is not None
        try:
            async for event in self._watch:
                self._view.apply(event)
        except LockBrokerError as error:
            log.warning("following the leader of %r stopped: %s", self.name, error)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("following the leader of %r failed", self.name)

    async def _campaign(self) -> None:
        pauses = CampaignPauses()
        while not self._resigned:
            started = time.monotonic()
            try:
                lease = await self.client._acquire(self.name, self.options)
            except CAMPAIGN_RETRIES as error:
                pause = pauses.after(error, time.monotonic() - started)
                if pause is None:
                    self._campaign_failed(error)
                    return
                await asyncio.sleep(pause)
                continue
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a refused key or request: retrying cannot help
                self._campaign_failed(error)
                return
            lease.lost = self.lost  # the lease's loss is the term's
            self._lease = lease
            self._renew_task = asyncio.ensure_future(_renew(lease, self.max_hold))
            self.elected.set()
            log.info("leading %r as %r, term %d", self.name, self.owner, lease.fence)
            return


async def _cancelled(task: "Optional[asyncio.Task[None]]") -> None:
    """Cancels ``task`` (unless it is the current one) and waits for it to end."""
    if task is None or task is asyncio.current_task() or task.done():
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
