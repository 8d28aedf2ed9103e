"""The state of a granted lease that both clients share, and what leaving a
``lock()`` (or ``semaphore()``) block means: when to release, and when the work
must hear that its lease was lost. A semaphore permit is a lease on other
routes: the same rules hold it."""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import Any, Callable, ClassVar, Dict, Iterator, List, Optional, Tuple, Type, cast

from ._options import Duration, LockOptions, seconds
from ._wire import EXCLUSIVE, LOCKS, PERMIT
from .errors import (
    BrokerUnavailable,
    LeaseLost,
    LockBrokerError,
    MaxHoldExceeded,
    SessionLost,
)

log = logging.getLogger("lockbroker")


class LeaseBase:
    """The state of one granted lease; :class:`lockbroker.Lease` and
    :class:`lockbroker.AsyncLease` add the calls (and :class:`lockbroker.Permit`
    and :class:`lockbroker.AsyncPermit` send them to a semaphore's routes).

    ``deadline`` is a :func:`time.monotonic` instant no later than the broker's own
    expiry (it is measured from when the request was *sent*), so a lease this
    process believes it holds is held.
    """

    #: Set once the lease is (or may be) gone: replaced by a threading.Event or
    #: an asyncio.Event in the subclasses.
    lost: Any
    #: The routes that extend and release this lease: :data:`LOCKS` or
    #: :data:`SEMAPHORES`.
    _kind: ClassVar[str] = LOCKS

    def __init__(
        self,
        data: Dict[str, Any],
        sent_at: float,
        ttl: float,
        held_from: Optional[float] = None,
    ) -> None:
        self.name: str = data["name"]
        self.fence: int = data["fence"]
        self.owner: Optional[str] = data.get("owner")
        #: ``"exclusive"`` or ``"shared"`` for a lock's lease, ``"permit"`` for a
        #: semaphore's permit.
        self.mode: str = data.get("mode", EXCLUSIVE) if self._kind == LOCKS else PERMIT
        self.ttl: float = ttl
        #: The broker's expiry, in Unix milliseconds of the broker's clock.
        self.expires_at_ms: int = data["expires_at_ms"]
        self.deadline: float = sent_at + data["ttl_ms"] / 1000.0
        #: When the lock was taken, as near as this process knows (the acquire's
        #: send time, or the grant's arrival after a wait): ``max_hold`` counts
        #: from here.
        self.granted_at: float = sent_at if held_from is None else held_from
        #: Set when a release was sent: from then on the lease is never renewed,
        #: and a ``lease_lost`` answer to an extend in flight is no loss.
        self.releasing = False
        self.released = False
        #: After a successful release, whether as many Redis replicas as the broker
        #: requires acknowledged it: ``False`` means a failover could bring the
        #: lease back until its TTL. ``None`` before the release, and after it when
        #: the broker does not wait for replicas (``redis.min_replicas_acked`` 0).
        self.release_acknowledged: Optional[bool] = None
        #: Why ``lost`` was set: ``"lease_lost"`` when the broker said so,
        #: ``"expired"`` when the deadline passed without a renewal,
        #: ``"renewer_failed"`` when the renewer itself broke down,
        #: ``"session_lost"`` when the session it was taken under was lost.
        self.lost_reason: Optional[str] = None
        #: Told of this lease once it is marked lost, after ``lost`` is set: how
        #: the leases of one ``lock_all()`` share a loss.
        self._on_lost: List[Callable[["LeaseBase"], None]] = []
        self._token: str = data["token"]
        #: The id of the session this lease was taken under (``None`` for a lease
        #: of its own): the session's keepalives renew it, never an extend.
        self.session_id: Optional[str] = None
        #: The session helper this lease was taken through, which keeps it (a
        #: :class:`lockbroker._sessions.SessionBase`), or ``None``.
        self._session: Any = None

    @property
    def token(self) -> str:
        """The secret that proves this lease. Keep it out of logs."""
        return self._token

    def remaining(self) -> float:
        """Seconds until the lease expires unless renewed (0 once past)."""
        return max(0.0, self.deadline - time.monotonic())

    def raise_if_lost(self) -> None:
        """Raise :class:`LeaseLost` if the lease is lost or past its deadline
        (:class:`SessionLost` when the session it was taken under was lost)."""
        if not self.lost.is_set() and self._session is not None:
            self._session._check_lease(self)  # lost with its session
        if not self.lost.is_set() and self.remaining() <= 0:
            self._mark_lost("expired")
        if self.lost.is_set():
            raise _lost_error(self, "is lost; another holder may already be running, so "
                              "stop and treat this work as possibly duplicated")

    def _extend_ttl(self, ttl: Optional[Duration]) -> float:
        """The TTL an explicit extend asks for; raises :class:`LeaseLost` first if
        the lease is already lost, since a lost lease is never extended, and
        :class:`RuntimeError` for a lease under a session, which ends with its
        session and is renewed only by the session's keepalives."""
        if self.session_id is not None:
            raise RuntimeError(
                f"the lease on {self.name!r} is under session {self.session_id}: its "
                "keepalives renew it, and it is never extended on its own"
            )
        ttl_s = self.ttl if ttl is None else seconds(ttl, "ttl")
        self.raise_if_lost()
        return ttl_s

    @contextmanager
    def _tracking(
        self, ignore: Tuple[Type[LockBrokerError], ...] = ()
    ) -> Iterator[None]:
        """Around a call with this lease's token: a :class:`LeaseLost` marks the lease
        lost before it propagates; errors in ``ignore`` are swallowed."""
        try:
            yield
        except LeaseLost:
            self._mark_lost("lease_lost")
            raise
        except ignore:
            pass

    #: What a resync after a slow grant may meet and shrug off: the deadline from the
    #: acquire stays, and it is conservative.
    _RESYNC_IGNORES = (BrokerUnavailable, MaxHoldExceeded)

    def _mark_lost(self, reason: str) -> None:
        """Sets ``lost`` (once) and records why."""
        if not self.lost.is_set():
            self.lost_reason = reason
            log.warning("lease on %r (fence %d) lost: %s", self.name, self.fence, reason)
            self.lost.set()
            for notify in self._on_lost:
                notify(self)

    def _renewed(self, data: Dict[str, Any], sent_at: float) -> None:
        self.expires_at_ms = data["expires_at_ms"]
        self.deadline = sent_at + data["ttl_ms"] / 1000.0

    def _valid_for(self, sent_at: float, seconds_left: float) -> None:
        """The broker said, answering a request sent at ``sent_at``, that the lease
        stays valid ``seconds_left`` more: a bound no later than its real expiry."""
        self.deadline = max(self.deadline, sent_at + seconds_left)

    def __repr__(self) -> str:  # the token is deliberately left out
        state = "lost" if self.lost.is_set() else ("released" if self.released else "held")
        return (
            f"<{type(self).__name__} name={self.name!r} fence={self.fence} "
            f"owner={self.owner!r} mode={self.mode} {state} remaining={self.remaining():.3f}s>"
        )


# -- lock() ------------------------------------------------------------------------


class LockBase:
    """What :class:`lockbroker.Lock` and :class:`lockbroker.AsyncLock` (and their
    semaphore subclasses) share: the checked options, single use, and what
    leaving the block means."""

    #: How the class is named in the error for a second entry.
    _called: ClassVar[str]
    #: The call that makes a fresh one, for the same error.
    _made_by: ClassVar[str] = "client.lock()"
    lease: Optional[LeaseBase]

    def __init__(
        self,
        client: Any,
        name: str,
        *,
        ttl: Duration,
        wait: Duration,
        owner: Optional[str],
        max_hold: Duration,
        lock_delay: Optional[Duration],
        fair: bool = False,
        shared: bool = False,
        limit: Optional[int] = None,
    ) -> None:
        self.client = client
        self.name = name
        self.options = LockOptions.check(
            ttl=ttl, wait=wait, owner=owner, lock_delay=lock_delay, fair=fair, max_hold=max_hold,
            shared=shared, limit=limit,
        )
        self.ttl = self.options.ttl
        self.wait = self.options.wait
        self.max_hold = cast(float, self.options.max_hold)  # lock() always has one
        self.owner = owner
        self.lock_delay = lock_delay
        self.fair = fair
        self.shared = self.options.shared
        self.lease = None

    def _check_unused(self) -> None:
        if self.lease is not None:
            raise RuntimeError(
                f"{self._called} can be entered only once; call {self._made_by} again"
            )

    def _wants_release(self) -> bool:
        """Called once the body ended and the renewer stopped, before the release:
        see :func:`wants_release`."""
        assert self.lease is not None
        return wants_release(self.lease)

    def _leave(
        self, error: Optional[LockBrokerError], exc_type: Optional[Type[BaseException]]
    ) -> None:
        """Ends the block: raises :class:`LeaseLost` if the lease was lost while the
        body ran, unless the body raised first (then it is only logged, so the
        body's own exception is the one the caller sees). ``error`` is what the
        release raised, if it was sent and failed."""
        assert self.lease is not None
        problem = exit_error(self.lease, error)
        if problem is not None:
            if exc_type is None:
                raise problem
            log.warning("lease on %r: %s (while handling %s)", self.name, problem, exc_type.__name__)


def wants_release(lease: LeaseBase) -> bool:
    """Called once a block's body ended and the renewer stopped, before the release.

    Marks the lease lost if its deadline passed while the body ran (whatever the
    release then meets, the work ran part of the time without a lease it could
    count on). Says whether to release: not when the broker has already said the
    lease is gone, nor when the body released it."""
    if lease.remaining() <= 0 and not lease.released:
        lease._mark_lost("expired")
    return lease.lost_reason != "lease_lost" and not lease.released


def exit_error(lease: LeaseBase, error: Optional[LockBrokerError]) -> Optional[LeaseLost]:
    """The :class:`LeaseLost` to raise on leaving a ``lock()`` (or ``lock_all()``)
    block for ``lease``, given what its release raised (``None`` if it succeeded
    or was not sent).

    A lease this process knew was lost stays lost even when the release then got
    ``200`` (the broker's expiry comes a little after the local deadline, or the
    renewer failed while the lease still had time): the work ran without a lease
    it could count on. A release that fails for another reason (the broker is
    down) is only logged when the lease was still ours: it expires on its own.
    """
    if isinstance(error, LeaseLost):
        return error
    if lease.lost.is_set():
        return _lost_error(lease)
    if error is not None:
        log.warning("could not release lease on %r, it will expire: %s", lease.name, error)
    return None


def _lost_error(lease: LeaseBase, what: Optional[str] = None) -> LeaseLost:
    """The error for ``lease``, known lost: :class:`SessionLost` when its
    session was lost, else :class:`LeaseLost`."""
    if what is None:
        what = (f"was lost while the work ran ({lease.lost_reason}); another holder may "
                "already have run, so treat the work as possibly duplicated")
    message = f"the lease on {lease.name!r} (fence {lease.fence}) {what}"
    if lease.lost_reason == "session_lost":
        return SessionLost(f"{message} (its session was lost)", code="session_lost")
    return LeaseLost(message, code="lease_lost")
