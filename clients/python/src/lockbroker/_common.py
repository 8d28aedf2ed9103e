"""Everything the blocking and the asyncio client share that does no I/O: checked
options, the requests and the parsing of their answers, the acquire retry rule, the
lease record, the renewal state machine, and what leaving a ``lock()`` (or
``semaphore()``) block means. A semaphore permit is a lease on other routes: the
same rules hold it.

:mod:`lockbroker.client` and :mod:`lockbroker.aio` keep only what differs: blocking
calls, threads and :class:`threading.Event` there; awaited calls, tasks and
:class:`asyncio.Event` here. A rule changed in this module changes for both."""

from __future__ import annotations

import enum
import logging
import os
import socket
import ssl
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import (
    Any,
    ClassVar,
    Dict,
    Iterator,
    NamedTuple,
    Optional,
    Tuple,
    Type,
    TypeVar,
    Union,
    cast,
)
from urllib.parse import quote

from .errors import BrokerUnavailable, LeaseLost, LockBrokerError, LockBusy, MaxHoldExceeded

log = logging.getLogger("lockbroker")

#: A duration in seconds (``int`` or ``float``) or a :class:`datetime.timedelta`.
Duration = Union[int, float, timedelta]

#: TTL of a lease when none is given: finite, like everything here.
DEFAULT_TTL = 30.0
#: How long ``lock()`` keeps renewing a lease at most, unless told otherwise.
DEFAULT_MAX_HOLD = 3600.0
#: Seconds one HTTP exchange may take (plus the wait, for a waiting acquire).
DEFAULT_TIMEOUT = 10.0
#: The route families: ``/v1/locks/...`` for lock leases (exclusive and shared),
#: ``/v1/semaphores/...`` for semaphore permits.
LOCKS = "locks"
SEMAPHORES = "semaphores"
#: The ``mode`` of a lock lease; a semaphore permit's is ``PERMIT``.
EXCLUSIVE = "exclusive"
SHARED = "shared"
PERMIT = "permit"
#: Longest pause between renewal retries while the broker cannot be reached.
RETRY_PAUSE = 1.0
#: A waiting acquire whose answer took longer than this share of the TTL is
#: followed by an extend, so the local deadline starts from a recent send time.
RESYNC_SHARE = 0.1
#: How close (as a share of the TTL, and at least ``MIN_CAP_GAP`` seconds) the
#: renewer tries to bring a lease to a hold limit before letting it run out.
CAP_GAP_SHARE = 0.01
MIN_CAP_GAP = 0.01


def seconds(value: Duration, field: str, *, allow_zero: bool = False) -> float:
    """``value`` as seconds, refusing negatives, NaN, infinity and ``None``."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{field} must be a number of seconds or a timedelta, not {value!r}")
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{field} must be finite")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{field} must be {'>= 0' if allow_zero else '> 0'}, not {value!r}")
    return float(value)


def count(value: int, field: str) -> int:
    """``value`` as a whole number of at least 1 (a semaphore's ``limit``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field} must be a whole number, not {value!r}")
    if value < 1:
        raise ValueError(f"{field} must be >= 1, not {value!r}")
    return value


def millis(value: float) -> int:
    """Seconds as whole milliseconds, at least 1."""
    return max(1, int(round(value * 1000)))


def default_owner() -> str:
    """``host:pid``, so a ``lock_busy`` answer says who holds the lock."""
    return f"{socket.gethostname()}:{os.getpid()}"[:256]


def new_request_id() -> str:
    """A fresh id that makes a re-sent acquire return the same lease, not busy."""
    return uuid.uuid4().hex


def resource_path(kind: str, name: str, action: Optional[str] = None) -> str:
    """``/v1/{kind}/{name}[/action]`` with the name percent-encoded; ``kind`` is
    :data:`LOCKS` or :data:`SEMAPHORES`."""
    if not isinstance(name, str) or not name:
        noun = "semaphore" if kind == SEMAPHORES else "lock"
        raise ValueError(f"{noun} name must be a non-empty string")
    path = f"/v1/{kind}/" + quote(name, safe="")
    return f"{path}/{action}" if action else path


def lock_path(name: str, action: Optional[str] = None) -> str:
    """``/v1/locks/{name}[/action]`` with the name percent-encoded."""
    return resource_path(LOCKS, name, action)


def semaphore_path(name: str, action: Optional[str] = None) -> str:
    """``/v1/semaphores/{name}[/action]`` with the name percent-encoded."""
    return resource_path(SEMAPHORES, name, action)


def acquire_body(
    ttl: float,
    wait: float,
    owner: Optional[str],
    request_id: str,
    lock_delay: Optional[float],
    fair: bool = False,
    shared: bool = False,
    limit: Optional[int] = None,
) -> Dict[str, Any]:
    """The JSON body of an acquire. ``fair`` and ``"mode": "shared"`` are sent only
    when set, so brokers without fair queueing or shared locks keep accepting the
    default; ``limit`` goes only to a semaphore's acquire, which requires it."""
    body: Dict[str, Any] = {
        "ttl_ms": millis(ttl),
        "wait_ms": int(wait * 1000),
        "request_id": request_id,
    }
    if owner is not None:
        body["owner"] = owner
    if lock_delay is not None:
        body["lock_delay_ms"] = int(lock_delay * 1000)
    if fair:
        body["fair"] = True
    if shared:
        body["mode"] = SHARED
    if limit is not None:
        body["limit"] = limit
    return body


@dataclass(frozen=True)
class Holder:
    """One valid lease of a lock or permit of a semaphore, as a status or a
    ``lock_busy`` answer lists it. Never a token."""

    owner: Optional[str]
    fence: int
    #: ``"exclusive"`` or ``"shared"`` for a lock's lease, ``"permit"`` for a
    #: semaphore's permit.
    mode: str
    #: Seconds until this lease expires unless renewed.
    expires_in: float
    #: Seconds until its place is free (expiry plus lock-delay).
    available_in: float

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Holder":
        return cls(
            owner=data.get("owner"),
            fence=data["fence"],
            mode=data.get("mode", EXCLUSIVE),
            expires_in=data.get("expires_in_ms", 0) / 1000.0,
            available_in=data.get("available_in_ms", 0) / 1000.0,
        )


def holders_from_json(data: Any) -> Tuple[Holder, ...]:
    """The ``holders`` list of an answer; empty when absent (older brokers)."""
    if not isinstance(data, list):
        return ()
    return tuple(Holder.from_json(item) for item in data if isinstance(item, dict))


@dataclass(frozen=True)
class LockStatus:
    """A lock's state as ``GET /v1/locks/{name}`` reports it. Never a token.

    While shared leases hold the lock, ``owner`` is ``None``, ``expires_in`` is
    the latest of their expiries, and ``available_in`` is when an exclusive
    acquire could succeed at the earliest; ``holders`` lists every lease."""

    name: str
    held: bool
    #: The exclusive holder's label (``None`` while shared leases hold the lock).
    owner: Optional[str]
    #: The last fence issued for this lock (``None`` when it has none).
    fence: Optional[int]
    #: Seconds until the current lease expires (0 when not held).
    expires_in: float
    #: Seconds until the lock can next be granted (expiry plus lock-delay).
    available_in: float
    #: ``"exclusive"`` or ``"shared"`` while held, ``None`` when not.
    mode: Optional[str] = None
    #: The valid leases (at most 100 of them; ``holder_count`` says how many).
    holders: Tuple[Holder, ...] = ()
    #: How many valid leases hold the lock.
    holder_count: int = 0
    #: Requests waiting for the lock: those in its queue in Redis, plus those
    #: waiting in the answering broker's own line (see openapi.yaml); 0 from a
    #: broker that does not say.
    waiting: int = 0

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "LockStatus":
        held = bool(data["held"])
        holders = holders_from_json(data.get("holders"))
        return cls(
            name=data["name"],
            held=held,
            owner=data.get("owner"),
            fence=data.get("fence"),
            expires_in=data.get("expires_in_ms", 0) / 1000.0,
            available_in=data.get("available_in_ms", 0) / 1000.0,
            # A broker without shared locks says neither: its one lease is exclusive.
            mode=data.get("mode", EXCLUSIVE if held else None),
            holders=holders,
            holder_count=data.get("holder_count", len(holders) or int(held)),
            waiting=int(data.get("waiting", 0)),
        )


@dataclass(frozen=True)
class SemaphoreStatus:
    """A semaphore's state as ``GET /v1/semaphores/{name}`` reports it. Never a
    token."""

    name: str
    #: The limit the held permits were granted under (``None`` when none is held).
    limit: Optional[int]
    #: How many valid permits there are.
    held: int
    #: How many more permits could be granted now (``None`` without a limit;
    #: expired permits in their lock-delay still count).
    available: Optional[int]
    #: The last fence issued for this semaphore (``None`` when it has none).
    fence: Optional[int]
    #: The valid permits (at most 100 of them).
    holders: Tuple[Holder, ...]
    #: Seconds until a permit can next be granted (0 when one is free now).
    available_in: float

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "SemaphoreStatus":
        return cls(
            name=data["name"],
            limit=data.get("limit"),
            held=int(data.get("held", 0)),
            available=data.get("available"),
            fence=data.get("fence"),
            holders=holders_from_json(data.get("holders")),
            available_in=data.get("available_in_ms", 0) / 1000.0,
        )



@dataclass(frozen=True)
class Renewal:
    """The broker's answer to an extend: same fence, new expiry."""

    name: str
    fence: int
    ttl: float
    expires_at_ms: int
    owner: Optional[str]

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Renewal":
        return cls(
            name=data["name"],
            fence=data["fence"],
            ttl=data["ttl_ms"] / 1000.0,
            expires_at_ms=data["expires_at_ms"],
            owner=data.get("owner"),
        )


@dataclass(frozen=True)
class FenceCheck:
    """The broker's answer to a fence check: whether a valid lease (exclusive,
    shared or permit) carries exactly ``fence`` now. Never a token.

    It can be stale by the time a resource acts on it: check, act at once, and
    keep the action shorter than ``expires_in``."""

    name: str
    fence: int
    #: Whether a valid lease carries this fence now; ``False`` once it expired
    #: (its lock-delay included), was released, force-released or replaced.
    current: bool
    #: ``True`` when current; otherwise whether another lease holds the name.
    held: bool
    #: Seconds the lease with this fence stays valid when current; otherwise
    #: how long the name's current lease does (0 when free).
    expires_in: float

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "FenceCheck":
        return cls(
            name=data["name"],
            fence=data["fence"],
            current=bool(data["current"]),
            held=bool(data["held"]),
            expires_in=data["expires_in_ms"] / 1000.0,
        )


#: One HTTP exchange as the transports take it: method, path and JSON body.
Request = Tuple[str, str, Optional[Dict[str, Any]]]


def extend_request(name: str, token: str, ttl: float, kind: str = LOCKS) -> Request:
    return "POST", resource_path(kind, name, "extend"), {"token": token, "ttl_ms": millis(ttl)}


def release_request(name: str, token: str, kind: str = LOCKS) -> Request:
    return "POST", resource_path(kind, name, "release"), {"token": token}


def status_request(name: str, kind: str = LOCKS) -> Request:
    return "GET", resource_path(kind, name), None


def fence_check_request(name: str, fence: int, kind: str = LOCKS) -> Request:
    """``GET /v1/{kind}/{name}/fence/{fence}``. Only a whole number goes into the
    path; whether it is a valid fence (1 to 2^53 - 1) is the broker's to say, with
    :class:`InvalidRequest` naming the field ``fence``."""
    if isinstance(fence, bool) or not isinstance(fence, int):
        raise TypeError(f"fence must be a whole number, not {fence!r}")
    return "GET", resource_path(kind, name, f"fence/{fence}"), None


def released_fence(data: Dict[str, Any]) -> int:
    """The fence in a release's answer."""
    return int(data["fence"])


def released_acknowledged(data: Dict[str, Any]) -> Optional[bool]:
    """Whether enough Redis replicas acknowledged a release: ``None`` when the
    answer has no ``acknowledged`` (the broker does not wait for replicas)."""
    acknowledged = data.get("acknowledged")
    return None if acknowledged is None else bool(acknowledged)


# -- options -----------------------------------------------------------------------


@dataclass(frozen=True)
class LockOptions:
    """The arguments of an acquire (and, with ``max_hold``, of a ``lock()`` or
    ``semaphore()``), checked once where the caller passed them, so a bad value
    fails at the call that carries it and nothing later has to check again."""

    ttl: float
    wait: float
    #: ``None`` until sent: then it becomes :func:`default_owner`.
    owner: Optional[str]
    lock_delay: Optional[float]
    fair: bool
    #: How long ``lock()`` renews at most; ``None`` for a single acquire.
    max_hold: Optional[float] = None
    #: A shared lease of a lock rather than an exclusive one.
    shared: bool = False
    #: The semaphore's limit: set for a permit, ``None`` for a lock's lease.
    limit: Optional[int] = None

    @property
    def kind(self) -> str:
        """The routes this acquire goes to: :data:`SEMAPHORES` or :data:`LOCKS`."""
        return LOCKS if self.limit is None else SEMAPHORES

    @classmethod
    def check(
        cls,
        *,
        ttl: Duration,
        wait: Duration,
        owner: Optional[str],
        lock_delay: Optional[Duration],
        fair: bool,
        max_hold: Optional[Duration] = None,
        shared: bool = False,
        limit: Optional[int] = None,
    ) -> "LockOptions":
        """Durations as seconds; raises :class:`TypeError` or :class:`ValueError`
        for ``None``, negatives, NaN and infinity, for a ``max_hold`` shorter
        than the TTL (the first renewal could then not happen at all), and for a
        ``limit`` that is not a whole number of at least 1."""
        ttl_s = seconds(ttl, "ttl")
        wait_s = seconds(wait, "wait", allow_zero=True)
        hold_s = None
        if max_hold is not None:
            hold_s = seconds(max_hold, "max_hold")
            if hold_s < ttl_s:
                raise ValueError(f"max_hold ({hold_s}s) must be at least ttl ({ttl_s}s)")
        delay_s = None if lock_delay is None else seconds(lock_delay, "lock_delay", allow_zero=True)
        limit_n = None if limit is None else count(limit, "limit")
        if shared and limit_n is not None:
            raise ValueError("a semaphore's permits have no shared mode")
        return cls(ttl_s, wait_s, owner, delay_s, fair, hold_s, bool(shared), limit_n)


# -- acquiring ---------------------------------------------------------------------


class AcquireAttempts:
    """The retry rule of one acquire, without the I/O.

    Every attempt carries the same ``request_id``, so one re-sent after a lost answer
    gets the same lease back instead of ``lock_busy``. A busy answer is retried until
    the caller's ``wait`` is over (the broker caps how long it holds one request), and
    so is an unreachable broker, pausing as it asks.
    """

    def __init__(
        self, name: str, options: LockOptions, request_id: Optional[str], timeout: float
    ) -> None:
        self.options = options
        self.owner = default_owner() if options.owner is None else options.owner
        self.request_id = request_id or new_request_id()
        self.path = resource_path(options.kind, name, "acquire")
        self.timeout = timeout
        self.give_up_at = time.monotonic() + options.wait
        #: When the latest attempt was sent: the lease's deadline counts from here.
        self.sent_at = 0.0
        #: When the grant arrived, and whether it had waited (see :meth:`answered`).
        self.answered_at = 0.0
        self.waited = False

    def next_request(self) -> Tuple[Request, float]:
        """The next attempt and its HTTP timeout: the client's own plus what is left
        of the wait, which the broker may spend holding the request."""
        left = max(0.0, self.give_up_at - time.monotonic())
        o = self.options
        body = acquire_body(
            o.ttl, left, self.owner, self.request_id, o.lock_delay, o.fair, o.shared, o.limit
        )
        self.sent_at = time.monotonic()
        return ("POST", self.path, body), self.timeout + left

    def pause_after(self, error: LockBrokerError) -> Optional[float]:
        """Seconds to pause before the next attempt after ``error`` (a
        :class:`LockBusy` or :class:`BrokerUnavailable`), or ``None`` when the wait
        is over and the caller should get ``error``."""
        now = time.monotonic()
        left = self.give_up_at - now
        if left <= 0:
            return None
        if isinstance(error, LockBusy):
            # A busy answer that came back at once would make this a busy loop.
            return min(0.05, left) if now - self.sent_at < 0.05 else 0.0
        if error.code == "tls":
            return None  # a certificate that was not trusted stays so
        return min(left, error.retry_after or 0.5, 1.0)

    def answered(self) -> bool:
        """Notes that the grant arrived now, and says whether it took so long (it
        waited in the broker) that an extend should restart the lease's local
        deadline, counted conservatively from the send time."""
        self.answered_at = time.monotonic()
        self.waited = self.answered_at - self.sent_at > self.options.ttl * RESYNC_SHARE
        return self.waited

    @property
    def held_from(self) -> float:
        """When ``max_hold`` starts: the send time, unless the grant waited; then the
        send time says nothing of when the lock was granted, and the arrival does."""
        return self.answered_at if self.waited else self.sent_at


# -- the client --------------------------------------------------------------------

C = TypeVar("C", bound="ClientBase")


class ClientBase:
    """Construction shared by :class:`lockbroker.Client` and
    :class:`lockbroker.AsyncClient`; each names its transport."""

    _transport_class: ClassVar[Type[Any]]

    def __init__(
        self,
        url: str,
        api_key: Optional[str] = None,
        timeout: Duration = DEFAULT_TIMEOUT,
        *,
        ca_cert: Optional[Union[str, "os.PathLike[str]"]] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        self.timeout = seconds(timeout, "timeout")
        self._transport = self._transport_class(
            url, api_key, self.timeout, tls_context(url, ca_cert, ssl_context)
        )

    @classmethod
    def from_env(cls: Type[C], timeout: Duration = DEFAULT_TIMEOUT) -> C:
        """A client for ``LOCKBROKER_URL`` (default ``http://127.0.0.1:7700``) with
        the key in ``LOCKBROKER_API_KEY`` and, for an ``https://`` URL, the extra CA
        certificate in ``LOCKBROKER_CA_CERT``, when set."""
        url = os.environ.get("LOCKBROKER_URL", "http://127.0.0.1:7700")
        https = url.lower().startswith("https://")
        return cls(
            url,
            api_key=os.environ.get("LOCKBROKER_API_KEY") or None,
            timeout=timeout,
            ca_cert=(os.environ.get("LOCKBROKER_CA_CERT") or None) if https else None,
        )


def tls_context(
    url: str,
    ca_cert: Optional[Union[str, "os.PathLike[str]"]],
    ssl_context: Optional[ssl.SSLContext],
) -> Optional[ssl.SSLContext]:
    """The TLS settings of an ``https://`` broker: ``ssl_context`` as given, or the
    system's roots plus ``ca_cert`` (a PEM file), or the system's roots alone.
    ``None`` for ``http://``; TLS settings with an ``http://`` URL are a mistake
    that would send the key in clear, so they raise :class:`ValueError`."""
    if ca_cert is not None and ssl_context is not None:
        raise ValueError("pass ca_cert or ssl_context, not both")
    if not url.lower().startswith("https://"):
        if ca_cert is not None or ssl_context is not None:
            raise ValueError(f"ca_cert and ssl_context need an https:// broker URL, not {url!r}")
        return None
    if ssl_context is not None:
        return ssl_context
    context = ssl.create_default_context()
    if ca_cert is not None:
        context.load_verify_locations(cafile=os.fspath(ca_cert))
    return context


# -- the lease ---------------------------------------------------------------------


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
        #: ``"renewer_failed"`` when the renewer itself broke down.
        self.lost_reason: Optional[str] = None
        self._token: str = data["token"]

    @property
    def token(self) -> str:
        """The secret that proves this lease. Keep it out of logs."""
        return self._token

    def remaining(self) -> float:
        """Seconds until the lease expires unless renewed (0 once past)."""
        return max(0.0, self.deadline - time.monotonic())

    def raise_if_lost(self) -> None:
        """Raise :class:`LeaseLost` if the lease is lost or past its deadline."""
        if not self.lost.is_set() and self.remaining() <= 0:
            self._mark_lost("expired")
        if self.lost.is_set():
            raise LeaseLost(
                f"the lease on {self.name!r} (fence {self.fence}) is lost; another holder "
                "may already be running, so stop and treat this work as possibly duplicated",
                code="lease_lost",
            )

    def _extend_ttl(self, ttl: Optional[Duration]) -> float:
        """The TTL an explicit extend asks for; raises :class:`LeaseLost` first if
        the lease is already lost, since a lost lease is never extended."""
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


# -- renewing ----------------------------------------------------------------------


class Action(enum.Enum):
    """The kinds of :class:`Step`."""

    #: The lease is lost (or marked so now): the renewer ends.
    STOP = "stop"
    #: Pause for ``Step.delay`` seconds (ending early if told to stop), then ask again.
    WAIT = "wait"
    #: Send an extend for ``Step.ttl`` with HTTP timeout ``Step.timeout``, then report
    #: the answer to :meth:`Renewals.renewed` or :meth:`Renewals.failed`.
    EXTEND = "extend"


class Step(NamedTuple):
    """What the renewer does next."""

    action: Action
    delay: float = 0.0
    ttl: float = 0.0
    timeout: float = 0.0


class Renewals:
    """The renewer's state machine: the renewer thread or task asks it for the next
    :class:`Step` and tells it how each extend went; it does no I/O of its own.

    It renews every ``ttl / 3`` and never asks for a lease that would outlive
    ``max_hold`` from acquisition, so a hung body loses the lock instead of keeping
    it: the last renewal asks for just what is left. The broker's own max hold is
    not known in advance: once an extend is refused with ``max_hold_exceeded``, the
    renewer halves the gap between the lease's deadline and the refused expiry
    with shorter extends, at once, until the lease ends within about ``ttl / 50``
    (and one round trip) of the cap.

    An unreachable broker is retried briefly, never past the lease's deadline; a
    refusal other than ``lease_lost`` ends renewing, and the lease then runs out. A
    lease past its deadline, or one the broker says is gone, is marked lost. A
    lease being released is never renewed.
    """

    def __init__(self, lease: LeaseBase, max_hold: float, timeout: float, now: float) -> None:
        self.lease = lease
        self.ttl = lease.ttl
        self.interval = lease.ttl / 3.0
        self.hold_deadline = lease.granted_at + max_hold
        #: A lease that ends this close to its limit is not extended further.
        self.close_enough = max(MIN_CAP_GAP, lease.ttl * CAP_GAP_SHARE)
        #: Once the broker refused an extend for its max hold: an instant known to
        #: lie past that cap (the cap lies between the deadline and it).
        self.cap_before: Optional[float] = None
        #: The client's HTTP timeout; an extend never waits past the lease's deadline.
        self.timeout = timeout
        self.renewing = True
        #: Set once renewing is over and the lease is left to run out: the next step
        #: after that wait marks it expired.
        self.running_out = False
        self.next_at = now + self.interval
        self._sent_at = now
        self._asked = 0.0

    def next_step(self, now: float) -> Step:
        lease = self.lease
        if lease.releasing:
            return Step(Action.STOP)
        if self.running_out or now >= lease.deadline:
            lease._mark_lost("expired")
            return Step(Action.STOP)
        if lease.lost.is_set():
            return Step(Action.STOP)
        ttl = self._next_ttl(now) if self.renewing else None
        if ttl is None:
            # A hold limit reached (or renewing refused): let the lease run out,
            # then report it gone.
            self.running_out = True
            return Step(Action.WAIT, delay=lease.deadline - now)
        if now < self.next_at:
            return Step(Action.WAIT, delay=min(self.next_at, lease.deadline) - now)
        self._sent_at, self._asked = now, ttl
        timeout = min(self.timeout, max(0.05, lease.deadline - now))
        return Step(Action.EXTEND, ttl=ttl, timeout=timeout)

    def renewed(self, data: Dict[str, Any]) -> None:
        """The extend succeeded: the new deadline counts from when it was sent.
        While closing in on the broker's max hold, the next try follows at once."""
        self.lease._renewed(data, self._sent_at)
        self.next_at = self._sent_at + (self.interval if self.cap_before is None else 0.0)

    def failed(self, error: LockBrokerError, now: float) -> None:
        """The extend raised ``error``; decides whether and when to try again."""
        lease, name = self.lease, self.lease.name
        if lease.releasing:
            return  # the release overtook this extend: nothing is lost
        if isinstance(error, LeaseLost):
            lease._mark_lost("lease_lost")
        elif isinstance(error, MaxHoldExceeded):
            # Refused: the broker's clock then was at most ``now``, so its cap
            # lies before now + the TTL asked; the lease stays valid meanwhile.
            if self.cap_before is None:
                log.info("lease on %r reached the broker's max hold; closing in on it", name)
            refused = now + self._asked
            self.cap_before = refused if self.cap_before is None else min(self.cap_before, refused)
            if error.expires_in is not None:
                lease._valid_for(self._sent_at, error.expires_in)
            self.next_at = now
        elif isinstance(error, BrokerUnavailable):
            log.warning("renewing lease on %r failed, retrying: %s", name, error)
            self.next_at = now + self._retry_pause(now)
        else:
            log.error("renewing lease on %r refused, not retrying: %s", name, error)
            self.renewing = False

    def crashed(self) -> None:
        """Called from the renewer's last-resort handler: a bug in the renewer must
        not leave the work believing it holds the lock."""
        log.exception("lease renewer for %r failed", self.lease.name)
        self.lease._mark_lost("renewer_failed")

    def _next_ttl(self, now: float) -> Optional[float]:
        """The TTL to ask for now, or ``None`` when the lease already ends (close
        enough to) where a hold limit would end it: ``max_hold``, or halfway
        between its deadline and what the broker refused."""
        end = self.hold_deadline
        if self.cap_before is not None:
            end = min(end, (self.lease.deadline + self.cap_before) / 2.0)
        if end - self.lease.deadline < self.close_enough:
            return None
        return min(self.ttl, end - now)

    def _retry_pause(self, now: float) -> float:
        """Pause before retrying a failed renewal: short, and never past expiry."""
        return max(0.0, min(RETRY_PAUSE, self.interval / 2.0, self.lease.deadline - now))


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
        """Called once the body ended and the renewer stopped, before the release.

        Marks the lease lost if its deadline passed while the body ran (whatever
        the release then meets, the work ran part of the time without a lease it
        could count on). Says whether to release: not when the broker has already
        said the lease is gone, nor when the body released it."""
        lease = self.lease
        assert lease is not None
        if lease.remaining() <= 0 and not lease.released:
            lease._mark_lost("expired")
        return lease.lost_reason != "lease_lost" and not lease.released

    def _leave(
        self, error: Optional[LockBrokerError], exc_type: Optional[Type[BaseException]]
    ) -> None:
        """Ends the block: raises :class:`LeaseLost` if the lease was lost while the
        body ran, unless the body raised first (then it is only logged, so the
        body's own exception is the one the caller sees). ``error`` is what the
        release raised, if it was sent and failed."""
        assert self.lease is not None
        problem = _exit_error(self.lease, error)
        if problem is not None:
            if exc_type is None:
                raise problem
            log.warning("lease on %r: %s (while handling %s)", self.name, problem, exc_type.__name__)


def _exit_error(lease: LeaseBase, error: Optional[LockBrokerError]) -> Optional[LeaseLost]:
    """The :class:`LeaseLost` to raise on leaving a ``lock()`` block, given what the
    release raised (``None`` if it succeeded or was not sent).

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


def _lost_error(lease: LeaseBase) -> LeaseLost:
    return LeaseLost(
        f"the lease on {lease.name!r} (fence {lease.fence}) was lost while the work ran "
        f"({lease.lost_reason}); another holder may already have run, so treat the work "
        "as possibly duplicated",
        code="lease_lost",
    )
