"""Sessions without I/O, for both clients: the state of one session a helper
keeps (:class:`SessionBase`: its local deadline, the leases taken under it, and
what its loss and its close make of them) and the keepalive loop's state
machine (:class:`Keepalives`). The blocking client's keepalive thread and the
asyncio client's task run it with their own calls.

A lease under a session has no TTL of its own to renew: each keepalive renews
the session and, with it, every lease under it. So the helper never extends
such a lease; it moves the lease's local deadline along with the session's, and
when the session is lost (the broker says ``session_lost``, or no keepalive
succeeded before the session's TTL ran out by the local clock) every lease
under it is lost with it, with the reason ``session_lost``."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any, ContextManager, Dict, Iterator, List, Optional, Sequence, Tuple, Type

from ._lease import LeaseBase
from ._options import Duration, LockOptions, default_owner, seconds
from ._renewals import RETRY_PAUSE, Action, Step
from ._retry import RESYNC_SHARE
from ._wire import (
    LOCKS,
    FenceCheck,
    SEMAPHORES,
    Request,
    SessionGrant,
    SessionRenewal,
    leases_released,
    open_session_request,
)
from .errors import BrokerUnavailable, LockBrokerError, SessionLost

log = logging.getLogger("lockbroker")

#: The states of a session helper, as :attr:`SessionBase.state` reads them.
NEW, OPEN, LOST, CLOSED = "new", "open", "lost", "closed"

#: A keepalive's ``ended`` names a lease's space; a lease knows its routes.
_SPACES = {"lock": LOCKS, "semaphore": SEMAPHORES}


class SessionBase:
    """What :class:`lockbroker.Session` and :class:`lockbroker.AsyncSession`
    share: the session's terms once opened, its local deadline, the leases
    taken through it, and what losing and closing it mean for them.

    ``deadline`` is a :func:`time.monotonic` instant no later than the broker's
    own expiry of the session (counted from when the opening or the latest
    successful keepalive was *sent*). A lease taken under it keeps the deadline
    of its acquire's answer until a keepalive sent after it joined renews it;
    from then on its deadline is the session's. One helper keeps one session:
    once closed or lost, it is done (make another to go on)."""

    #: Set once the session is lost (and with it every lease under it): a
    #: threading.Event or an asyncio.Event in the subclasses. A close is no loss.
    lost: Any

    def __init__(
        self,
        client: Any,
        *,
        ttl: Duration,
        owner: Optional[str],
        lock_delay: Optional[Duration],
    ) -> None:
        self.client = client
        #: The holder's label, also the default ``owner`` of the leases taken
        #: through this helper.
        self.owner: str = owner if owner is not None else default_owner()
        #: Seconds each keepalive keeps the session (the broker's answer, once open).
        self.ttl: float = seconds(ttl, "ttl")
        #: The lock-delay of every lease under the session, in seconds (``None``
        #: before opening: the broker's default).
        self.lock_delay: Optional[float] = (
            None if lock_delay is None else seconds(lock_delay, "lock_delay", allow_zero=True)
        )
        #: The session's id (not a secret), once open.
        self.id: Optional[str] = None
        #: The broker's expiry, in Unix milliseconds of the broker's clock.
        self.expires_at_ms: int = 0
        self.deadline: float = 0.0
        #: How many leases the close released (``None`` until it did).
        self.leases_released: Optional[int] = None
        self._token: Optional[str] = None
        self._state = NEW
        #: The broker answered ``session_lost``: a close has nothing left to end.
        self._said_lost = False
        #: Set as a close begins: no keepalive is sent, no acquire asked, after it.
        self._close_begun = False
        #: The leases taken through this helper, still held as far as it knows.
        self._leases: List[LeaseBase] = []
        #: Guards the state and the leases: the keepalive thread (or task), the
        #: acquiring threads and ``raise_if_lost`` callers all change them.
        self._guard = threading.Lock()

    # -- reading ---------------------------------------------------------------------

    @property
    def state(self) -> str:
        """``"new"`` until opened, then ``"open"``, and at the end ``"lost"`` or
        ``"closed"``. A session past its local deadline reads ``"lost"``."""
        self._check_deadline()
        return self._state

    @property
    def token(self) -> str:
        """The secret that keeps the session and takes leases under it. Keep it
        out of logs: it is in no ``repr()`` and no error message."""
        if self._token is None:
            raise RuntimeError("the session is not open yet: use it in a with statement")
        return self._token

    def remaining(self) -> float:
        """Seconds until the session's local deadline (0 once past, lost or closed)."""
        if self._state != OPEN:
            return 0.0
        return max(0.0, self.deadline - time.monotonic())

    def raise_if_lost(self) -> None:
        """Raise :class:`SessionLost` if the session is lost or past its local
        deadline (then every lease under it is lost too). A closed session
        raises nothing here."""
        self._check_deadline()
        if self._state == LOST:
            raise self._lost_error()

    def _lost_error(self) -> SessionLost:
        return SessionLost(
            f"session {self.id} is lost, and every lease taken under it; another holder "
            "may already be running, so stop and treat this work as possibly duplicated",
            code="session_lost",
        )

    # -- opening ---------------------------------------------------------------------

    def _open_request(self) -> Request:
        if self._state != NEW:
            raise RuntimeError("a session helper opens once; call client.session() again")
        return open_session_request(self.ttl, self.owner, self.lock_delay)

    def _opened(self, data: Dict[str, Any], sent_at: float) -> SessionGrant:
        grant = SessionGrant.from_json(data)
        self.id, self._token = grant.id, grant.token
        self.ttl, self.lock_delay = grant.ttl, grant.lock_delay
        self.owner = grant.owner or self.owner
        self.expires_at_ms = grant.expires_at_ms
        self.deadline = sent_at + min(grant.ttl, grant.validity)
        self._state = OPEN
        return grant

    # -- leases ----------------------------------------------------------------------

    def _usable_token(self) -> str:
        """The token for an acquire under the session; raises
        :class:`SessionLost` at once when the session is lost or closed."""
        self._check_deadline()
        if self._state == NEW:
            raise RuntimeError("the session is not open yet: use it in a with statement")
        if self._state == LOST:
            raise self._lost_error()
        if self._state == CLOSED or self._close_begun:
            raise SessionLost(f"session {self.id} is closed: open a new session to go on",
                              code="session_lost")
        assert self._token is not None
        return self._token

    @contextlib.contextmanager
    def _asking(self) -> Iterator[None]:
        """Around an acquire under the session: a :class:`SessionLost` answer
        means the token no longer holds it, so the session is lost (unless this
        helper is closing it)."""
        try:
            yield
        except SessionLost:
            if not self._close_begun:
                self._mark_lost(said_by_broker=True)
            raise

    def _join(self, leases: Sequence[LeaseBase]) -> None:
        """Tracks ``leases``, just granted under the session. Each keeps the
        deadline its acquire answer gave until a keepalive sent after it joined
        renews it. One granted as the session ended ends with it."""
        with self._guard:
            state = self._state
            for lease in leases:
                lease._session = self
                lease.ttl = self.ttl
                if state == OPEN:
                    self._leases.append(lease)
                elif state == CLOSED:
                    # The broker's close released it: it had joined the session
                    # before the close ended the session's own lease.
                    lease.releasing = lease.released = True
        if state == LOST:
            for lease in leases:
                lease._mark_lost("session_lost")

    def _check_lease(self, lease: LeaseBase) -> None:
        """Marks ``lease`` (taken through this helper) lost if the session is."""
        self._check_deadline()
        if self._state == LOST and not lease.released:
            lease._mark_lost("session_lost")

    def _snapshot(self) -> List[LeaseBase]:
        """The leases a keepalive sent now renews: those tracked already."""
        with self._guard:
            return list(self._leases)

    # -- keeping ---------------------------------------------------------------------

    def _kept(
        self, data: Dict[str, Any], sent_at: float, covered: Sequence[LeaseBase]
    ) -> List[LeaseBase]:
        """A keepalive sent at ``sent_at`` succeeded: the session, and each lease
        of ``covered`` (those tracked when it was sent), are valid until
        ``sent_at`` plus the session's validity. The leases the broker named as
        ended are lost (unless their own release did it).

        Returns the leases to check on their own: when the broker renewed fewer
        than ``covered`` still held, an earlier answer that named an ended lease
        was lost on its way, and the broker has forgotten that lease since, so
        no answer will name it again: every one of them is checked then."""
        renewal = SessionRenewal.from_json(data)
        until = sent_at + min(renewal.ttl, renewal.validity)
        ended = {(item.name, _SPACES.get(item.space, item.space)) for item in renewal.ended}
        gone: List[LeaseBase] = []
        with self._guard:
            if self._state != OPEN:
                return []
            self.deadline = max(self.deadline, until)
            self.expires_at_ms = max(self.expires_at_ms, renewal.expires_at_ms)
            for lease in covered:
                lease.deadline = max(lease.deadline, until)
                lease.expires_at_ms = max(lease.expires_at_ms, renewal.expires_at_ms)
            for lease in self._leases:
                if (lease.name, lease._kind) in ended and not lease.releasing:
                    gone.append(lease)
            self._leases = [
                lease for lease in self._leases
                if not (lease.released or lease.lost.is_set() or lease in gone)
            ]
            tracked = {id(lease) for lease in self._leases}
            held = [lease for lease in covered if id(lease) in tracked]
        for lease in gone:
            lease._mark_lost("lease_lost")
        return held if renewal.leases < len(held) else []

    @staticmethod
    def _ended_if(lease: LeaseBase, check: FenceCheck) -> None:
        """Marks ``lease`` lost when ``check`` (of its fence) says it is not
        current, unless its own release is under way."""
        if not check.current and not lease.releasing and not lease.released:
            lease._mark_lost("lease_lost")

    def _check_deadline(self, now: Optional[float] = None) -> None:
        """Marks the session lost once its local deadline passed while open."""
        if self._state == OPEN and not self._close_begun:
            if (time.monotonic() if now is None else now) >= self.deadline:
                self._mark_lost(said_by_broker=False)

    def _mark_lost(self, *, said_by_broker: bool) -> None:
        """Sets ``lost`` (once), and marks every lease under the session lost
        with the reason ``session_lost``."""
        with self._guard:
            if said_by_broker:
                self._said_lost = True
            if self._state != OPEN:
                return
            self._state = LOST
            leases, self._leases = self._leases, []
        log.warning("session %s lost (%s), with its %d lease(s)", self.id,
                    "the broker says it is not open" if said_by_broker
                    else "no keepalive succeeded within its TTL", len(leases))
        # The leases first: whoever wakes on the session's loss finds them lost.
        for lease in leases:
            if not lease.released:
                lease._mark_lost("session_lost")
        self.lost.set()

    # -- closing ---------------------------------------------------------------------

    def _closing(self) -> bool:
        """Called as a close begins (after it, no keepalive is sent and no
        acquire asked): whether to send the close. Not for a session never
        opened, one closed already, or one the broker said was not open."""
        with self._guard:
            if self._close_begun:
                return False
            self._close_begun = True
            if self._state == NEW:
                self._state = CLOSED
                return False
            return not self._said_lost

    def _closed(self, data: Dict[str, Any]) -> int:
        """The close succeeded: every lease still tracked was released by it. A
        session lost before (by the local clock) stays lost."""
        count = leases_released(data)
        with self._guard:
            self.leases_released = count
            if self._state == OPEN:
                self._state = CLOSED
            leases, self._leases = self._leases, []
        for lease in leases:
            if not lease.lost.is_set():
                lease.releasing = lease.released = True
        return count

    def _close_failed(self, error: LockBrokerError) -> None:
        """The close was refused or not answered. ``session_lost``: the session
        had already ended, with its leases. Otherwise no keepalive follows, so
        the session and its leases end at its TTL."""
        if isinstance(error, SessionLost):
            self._mark_lost(said_by_broker=True)
            return
        with self._guard:
            if self._state == OPEN:
                self._state = CLOSED

    def _leave(
        self, error: Optional[LockBrokerError], exc_type: Optional[Type[BaseException]]
    ) -> None:
        """Ends a ``with`` block: raises :class:`SessionLost` if the session was
        lost while the body ran, unless the body raised first (then it is only
        logged). ``error`` is what the close raised, if it was sent and failed:
        a close that could not reach the broker is only logged."""
        if self._state == LOST:
            problem = self._lost_error()
            if exc_type is None:
                raise problem
            log.warning("%s (while handling %s)", problem, exc_type.__name__)
        elif error is not None:
            log.warning("could not close session %s, its leases end with it at its TTL: %s",
                        self.id, error)

    def _close_result(self, error: Optional[LockBrokerError]) -> int:
        """What an explicit ``close()`` answers: the leases it released, or the
        error (:class:`SessionLost` when the session was lost)."""
        if self._state == LOST:
            raise self._lost_error()
        if error is not None:
            raise error
        return self.leases_released or 0

    def __repr__(self) -> str:  # the token is deliberately left out
        leases = len(self._leases)
        return (
            f"<{type(self).__name__} id={self.id} owner={self.owner!r} {self._state} "
            f"remaining={self.remaining():.3f}s leases={leases}>"
        )


def opening(ttl: Duration, owner: Optional[str], lock_delay: Optional[Duration]) -> Request:
    """The plain call's opening of a session, with its arguments checked;
    ``owner`` defaults to ``host:pid``."""
    delay = None if lock_delay is None else seconds(lock_delay, "lock_delay", allow_zero=True)
    return open_session_request(
        seconds(ttl, "ttl"), default_owner() if owner is None else owner, delay
    )


def session_parts(
    session: Any, helper_class: Type[SessionBase]
) -> Tuple[Optional[SessionBase], Optional[str]]:
    """The ``session=`` argument of an acquire as (helper, token): a token alone,
    or a helper of ``helper_class`` and its token (:class:`SessionLost` at once
    when it is lost or closed)."""
    if session is None:
        return None, None
    if isinstance(session, helper_class):
        return session, session._usable_token()
    if isinstance(session, SessionBase):
        raise TypeError(f"session must be a {helper_class.__name__} of this kind of client, "
                        f"not a {type(session).__name__}")
    if not isinstance(session, str) or not session:
        raise TypeError("session must be a session's token or a session helper")
    return None, session


def asking(helper: Optional[SessionBase]) -> ContextManager[None]:
    """``helper._asking()``, or nothing for an acquire not under a helper."""
    return contextlib.nullcontext() if helper is None else helper._asking()


def lease_owner(owner: Optional[str], helper: Optional[SessionBase]) -> Optional[str]:
    """The ``owner`` of an acquire: the one given, else the session helper's."""
    return helper.owner if owner is None and helper is not None else owner


def lease_ttl(options: LockOptions, data: Dict[str, Any]) -> float:
    """The ``ttl`` of a lease granted with ``options``: the one asked for, or,
    under a session, what the answer gave (the session's own TTL once a helper
    tracks the lease)."""
    return options.ttl if options.session is None else data["ttl_ms"] / 1000.0


def settle(
    leases: Sequence[LeaseBase],
    options: LockOptions,
    helper: Optional[SessionBase],
    took: float,
) -> bool:
    """Marks leases just granted under a session as such (never extended on
    their own), and hands them to the helper they were taken through. Says
    whether the helper should keep the session alive at once: when the grant
    took ``took`` seconds, long for the session's TTL (it waited), the leases'
    deadlines, counted from the acquire's send time, then start again from the
    keepalive's."""
    if options.session is None:
        return False
    session_id = options.session.split(".", 1)[0]  # the token is ``<id>.<secret>``
    for lease in leases:
        lease.session_id = session_id
    if helper is None:
        return False
    helper._join(leases)
    return took > helper.ttl * RESYNC_SHARE


class Keepalives:
    """The keepalive loop's state machine: the keepalive thread or task asks it
    for the next :class:`Step` and tells it how each keepalive went; it does no
    I/O of its own. ``Action.EXTEND`` means: send a keepalive, with HTTP timeout
    ``Step.timeout``.

    It sends one keepalive every ``ttl / 3``, counted from the send time of the
    latest successful one. An unreachable broker (or a ``503``) is retried
    briefly, never past the session's local deadline; ``session_lost`` marks the
    session lost at once; another refusal (a revoked key, say) ends keeping it,
    and the session then runs out. A session past its deadline is marked lost."""

    def __init__(self, session: SessionBase, timeout: float, opened_at: float) -> None:
        self.session = session
        self.interval = session.ttl / 3.0
        #: The client's HTTP timeout; a keepalive never waits past the deadline.
        self.timeout = timeout
        self.keeping = True
        self.next_at = opened_at + self.interval
        self._sent_at = opened_at
        #: The leases tracked when the keepalive in flight was sent.
        self._covered: List[LeaseBase] = []

    def next_step(self, now: float) -> Step:
        session = self.session
        if session._close_begun or session._state != OPEN:
            return Step(Action.STOP)
        if now >= session.deadline:
            session._check_deadline(now)
            return Step(Action.STOP)
        if not self.keeping:
            # Refused: let the session run out, then report it lost.
            return Step(Action.WAIT, delay=session.deadline - now)
        if now < self.next_at:
            return Step(Action.WAIT, delay=min(self.next_at, session.deadline) - now)
        self._sent_at = now
        self._covered = session._snapshot()
        return Step(Action.EXTEND, timeout=min(self.timeout, max(0.05, session.deadline - now)))

    def kept(self, data: Dict[str, Any]) -> List[LeaseBase]:
        """The keepalive succeeded: the deadlines count from when it was sent.
        Returns the leases to check on their own (see ``SessionBase._kept``)."""
        unaccounted = self.session._kept(data, self._sent_at, self._covered)
        self._covered = []
        self.next_at = self._sent_at + self.interval
        return unaccounted

    def failed(self, error: LockBrokerError, now: float) -> None:
        """The keepalive raised ``error``; decides whether and when to try again."""
        session = self.session
        self._covered = []
        if session._close_begun:
            return  # the close overtook this keepalive
        if isinstance(error, SessionLost):
            session._mark_lost(said_by_broker=True)
        elif isinstance(error, BrokerUnavailable):
            log.warning("keeping session %s alive failed, retrying: %s", session.id, error)
            pause = min(RETRY_PAUSE, self.interval / 2.0, session.deadline - now)
            self.next_at = now + max(0.0, pause)
        else:
            log.error("keeping session %s alive refused, not retrying: %s", session.id, error)
            self.keeping = False

    def crashed(self) -> None:
        """Called from the loop's last-resort handler: a bug in it must not leave
        the work believing it holds its leases."""
        log.exception("the keepalive loop of session %s failed", self.session.id)
        self.session._mark_lost(said_by_broker=False)
