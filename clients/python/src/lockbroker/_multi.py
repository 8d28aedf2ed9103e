"""Several locks at once, without I/O, for both clients: the locks an
acquire-all asks for (:class:`LockAsk`), its retry rule (a single acquire's,
on another route), the leases of its answer (and the give-back of an answer
that cannot be used), what a release-all answer makes of each lease
(:class:`ReleaseResult`), and what holding several leases in one
``lock_all()`` block means (:class:`LeaseSetBase`, :class:`LockAllBase`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass
from typing import (
    Any, ClassVar, Dict, Iterator, List, Optional, Sequence, Tuple, Type, Union, cast,
)

from ._lease import LeaseBase, exit_error, wants_release
from ._options import Duration, LockOptions
from ._retry import AcquireAttempts
from ._wire import LOCKS, SHARED, Request, lock_path
from .errors import LeaseLost, LockBrokerError, error_from_detail

log = logging.getLogger("lockbroker")

ACQUIRE_ALL_PATH = "/v1/locks/acquire-all"
RELEASE_ALL_PATH = "/v1/locks/release-all"


@dataclass(frozen=True)
class LockAsk:
    """One lock of ``acquire_all``: its name, and whether its lease is shared
    (a plain name asks for an exclusive lease)."""

    name: str
    shared: bool = False


def lock_asks(locks: Sequence[Union[str, LockAsk]]) -> Tuple[LockAsk, ...]:
    """``locks`` as :class:`LockAsk` records. A name given twice raises
    :class:`ValueError` without asking: the broker would answer one lease at
    both places, which two lease objects cannot both own."""
    if isinstance(locks, (str, LockAsk)):
        raise TypeError("acquire_all takes a list of locks, not one")
    asks = tuple(LockAsk(lock) if isinstance(lock, str) else lock for lock in locks)
    seen = set()
    for index, ask in enumerate(asks):
        if not isinstance(ask, LockAsk):
            raise TypeError(f"locks[{index}] must be a name or a LockAsk, not {ask!r}")
        lock_path(ask.name)  # the same check of the name as a single acquire's
        if ask.name in seen:
            raise ValueError(f"lock {ask.name!r} is named twice (locks[{index}])")
        seen.add(ask.name)
    return asks


class AcquireAllAttempts(AcquireAttempts):
    """The retry rule of one acquire-all: a single acquire's (the same
    ``request_id`` on every attempt, a busy answer asked again until ``wait`` is
    over), with every lock in one body on the acquire-all route."""

    def __init__(
        self,
        asks: Tuple[LockAsk, ...],
        options: LockOptions,
        request_id: Optional[str],
        timeout: float,
    ) -> None:
        super().__init__(asks[0].name, options, request_id, timeout)
        self.path = ACQUIRE_ALL_PATH
        self.asks = asks
        self.locks = [
            # An exclusive lease is the broker's default: no mode.
            {"name": ask.name, "mode": SHARED} if ask.shared else {"name": ask.name}
            for ask in asks
        ]

    def next_request(self) -> Tuple[Request, float]:
        (method, path, body), timeout = super().next_request()
        assert body is not None
        body["locks"] = self.locks
        return (method, path, body), timeout

    def granted(self, data: Dict[str, Any]) -> List[Dict[str, Any]]:
        """The leases of a grant, checked to be the locks asked for, in order."""
        leases = data.get("leases")
        if not isinstance(leases, list) or [
            lease.get("name") if isinstance(lease, dict) else None for lease in leases
        ] != [ask.name for ask in self.asks]:
            raise LockBrokerError(
                "acquire-all answered other locks than asked for", code="bad_response"
            )
        return leases


def give_back(data: Dict[str, Any]) -> Optional[Request]:
    """The release-all that gives back the grants of an acquire-all answer that
    cannot be returned (it named other locks than asked for), rather than leave
    them held until they expire: every entry with a name and a token. ``None``
    when there is none."""
    granted = data.get("leases")
    refs = [
        {"name": lease["name"], "token": lease["token"]}
        for lease in (granted if isinstance(granted, list) else [])
        if isinstance(lease, dict)
        and isinstance(lease.get("name"), str)
        and isinstance(lease.get("token"), str)
    ]
    return ("POST", RELEASE_ALL_PATH, {"leases": refs}) if refs else None


@dataclass(frozen=True)
class ReleaseResult:
    """What ``release_all`` made of one lease: ``released`` with its ``fence``,
    or not, with the ``error`` its own ``release()`` would have raised
    (:class:`LeaseLost` for a lease that expired or was taken)."""

    name: str
    released: bool
    fence: Optional[int] = None
    error: Optional[LockBrokerError] = None


class ReleaseAll:
    """One release-all without the I/O: which leases to ask about, the request,
    and each lease left as its own release would leave it."""

    def __init__(self, leases: Sequence[LeaseBase]) -> None:
        self.leases = list(leases)
        for lease in self.leases:
            if lease._kind != LOCKS:
                raise TypeError(f"release_all gives back lock leases, not {lease!r}")
        for lease in self.leases:
            # As in release(): from now on the lease is never renewed.
            lease.releasing = True
        # A lease the broker already called lost is not asked about again.
        self.asking = [lease.lost_reason != "lease_lost" for lease in self.leases]
        self.asked = [lease for lease, ask in zip(self.leases, self.asking) if ask]

    def request(self) -> Optional[Request]:
        """The request, or ``None`` when there is nothing to ask."""
        if not self.asked:
            return None
        body = {"leases": [{"name": lease.name, "token": lease.token} for lease in self.asked]}
        return "POST", RELEASE_ALL_PATH, body

    def answered(self, data: Optional[Dict[str, Any]]) -> List[ReleaseResult]:
        """Each lease's result, in the order given, from the answer (``None``
        when nothing was asked); a released lease reads released, one the
        broker no longer had reads lost."""
        answers = iter(self._answers(data))
        results = []
        for lease, asked in zip(self.leases, self.asking):
            if asked:
                results.append(_settle(lease, next(answers)))
            else:
                results.append(ReleaseResult(lease.name, False, error=_lost(lease)))
        return results

    def _answers(self, data: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
        if data is None:
            return []
        answers = data.get("results")
        if not isinstance(answers, list) or [
            answer.get("name") if isinstance(answer, dict) else None for answer in answers
        ] != [lease.name for lease in self.asked]:
            raise LockBrokerError(
                "release-all answered other leases than asked for", code="bad_response"
            )
        return answers


def _settle(lease: LeaseBase, answer: Dict[str, Any]) -> ReleaseResult:
    """One lease's answer, and the lease's state after it."""
    if answer.get("released") is True:
        lease.release_acknowledged = None  # the route does not say
        lease.released = True
        return ReleaseResult(lease.name, True, fence=int(answer.get("fence", lease.fence)))
    detail = answer.get("error")
    if not isinstance(detail, dict):
        error = LockBrokerError(
            f"release-all said lock {lease.name!r} was not released, without why",
            code="bad_response",
        )
    else:
        error = error_from_detail(detail)
    if isinstance(error, LeaseLost):
        lease._mark_lost("lease_lost")
    return ReleaseResult(lease.name, False, error=error)


def _lost(lease: LeaseBase) -> LeaseLost:
    return LeaseLost(
        f"the lease on {lease.name!r} (fence {lease.fence}) is lost", code="lease_lost"
    )


# -- lock_all() ----------------------------------------------------------------------


class LeaseSetBase(SequenceABC):
    """The leases of one ``lock_all()``, in the order asked, and their one loss:
    ``lost`` (a :class:`threading.Event` or an :class:`asyncio.Event` in the
    subclasses) is set as soon as any of them is lost, since the work then no
    longer holds every lock it asked for. Each lease keeps its own ``lost``."""

    #: Set once any lease of the set is lost.
    lost: Any
    leases: Tuple[LeaseBase, ...]

    def __init__(self, leases: Sequence[LeaseBase]) -> None:
        self.leases = tuple(leases)
        #: The first lease of the set that was lost, ``None`` while all are held.
        self.lost_lease: Optional[LeaseBase] = None
        for lease in self.leases:
            lease._on_lost.append(self._lease_lost)
            if lease.lost.is_set():
                self._lease_lost(lease)

    @property
    def lost_reason(self) -> Optional[str]:
        """Why the first lost lease was lost (see :attr:`LeaseBase.lost_reason`)."""
        return None if self.lost_lease is None else self.lost_lease.lost_reason

    def raise_if_lost(self) -> None:
        """Raise :class:`LeaseLost`, naming the lock, if any lease of the set is
        lost or past its deadline."""
        if self.lost_lease is not None:
            self.lost_lease.raise_if_lost()
        for lease in self.leases:
            lease.raise_if_lost()

    def remaining(self) -> float:
        """Seconds until the first lease of the set expires unless renewed."""
        return min((lease.remaining() for lease in self.leases), default=0.0)

    def _lease_lost(self, lease: LeaseBase) -> None:
        if self.lost_lease is None:
            self.lost_lease = lease
        self.lost.set()

    def __getitem__(self, index: Any) -> Any:
        return self.leases[index]

    def __len__(self) -> int:
        return len(self.leases)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.leases)

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "held"
        return f"<{type(self).__name__} {list(self.leases)!r} {state}>"


class LockAllBase:
    """What :class:`lockbroker.LockAll` and :class:`lockbroker.AsyncLockAll`
    share: the checked locks and options, single use, and what leaving the
    block means."""

    #: How the class is named in the error for a second entry.
    _called: ClassVar[str]
    leases: Optional[LeaseSetBase]

    def __init__(
        self,
        client: Any,
        locks: Sequence[Union[str, LockAsk]],
        *,
        ttl: Duration,
        wait: Duration,
        owner: Optional[str],
        max_hold: Duration,
        lock_delay: Optional[Duration],
    ) -> None:
        self.client = client
        self.asks = lock_asks(locks)
        self.options = LockOptions.check(
            ttl=ttl, wait=wait, owner=owner, lock_delay=lock_delay, fair=False, max_hold=max_hold
        )
        self.max_hold = cast(float, self.options.max_hold)  # lock_all() always has one
        self.leases = None

    def _check_unused(self) -> None:
        if self.leases is not None:
            raise RuntimeError(
                f"{self._called} can be entered only once; call client.lock_all() again"
            )

    def _to_release(self) -> List[LeaseBase]:
        """Called once the body ended and every renewer stopped: the leases the
        one release-all asks about (see :func:`wants_release`)."""
        assert self.leases is not None
        return [lease for lease in self.leases if wants_release(lease)]

    def _leave(
        self,
        results: Optional[List[ReleaseResult]],
        error: Optional[LockBrokerError],
        exc_type: Optional[Type[BaseException]],
    ) -> None:
        """Ends the block: raises :class:`LeaseLost` for the first lease lost while
        the body ran (the first lost, else the first in the order asked), unless
        the body raised first (then it is only logged). ``results`` are the
        release-all's, ``error`` what it raised as a whole."""
        assert self.leases is not None
        if error is not None:
            log.warning("could not release the leases on %r, they will expire: %s",
                        [ask.name for ask in self.asks], error)
        released = {result.name: result.error for result in results or ()}
        first = self.leases.lost_lease
        problems = [
            exit_error(lease, released.get(lease.name))
            for lease in sorted(self.leases, key=lambda lease: lease is not first)
        ]
        problem = next((problem for problem in problems if problem is not None), None)
        if problem is not None:
            if exc_type is None:
                raise problem
            log.warning("leases on %r: %s (while handling %s)",
                        [ask.name for ask in self.asks], problem, exc_type.__name__)
