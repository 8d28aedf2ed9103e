"""The broker's HTTP API as data, without I/O: the route families and modes, the
paths and bodies of each request, and the answers parsed into frozen records.
Both clients send what these build and read what they parse."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple
from urllib.parse import quote

#: The route families: ``/v1/locks/...`` for lock leases (exclusive and shared),
#: ``/v1/semaphores/...`` for semaphore permits.
LOCKS = "locks"
SEMAPHORES = "semaphores"
#: The ``mode`` of a lock lease; a semaphore permit's is ``PERMIT``.
EXCLUSIVE = "exclusive"
SHARED = "shared"
PERMIT = "permit"


def millis(value: float) -> int:
    """Seconds as whole milliseconds, at least 1."""
    return max(1, int(round(value * 1000)))


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
    session: Optional[str] = None,
) -> Dict[str, Any]:
    """The JSON body of an acquire. ``fair`` and ``"mode": "shared"`` are sent only
    when set, so brokers without fair queueing or shared locks keep accepting the
    default; ``limit`` goes only to a semaphore's acquire, which requires it. With
    ``session`` (a session's token) the lease takes its TTL and lock-delay from
    the session, so ``ttl`` and ``lock_delay`` are left out."""
    body: Dict[str, Any] = {"wait_ms": int(wait * 1000), "request_id": request_id}
    if session is not None:
        body["session"] = session
    else:
        body["ttl_ms"] = millis(ttl)
        if lock_delay is not None:
            body["lock_delay_ms"] = int(lock_delay * 1000)
    if owner is not None:
        body["owner"] = owner
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


# -- sessions ------------------------------------------------------------------------

SESSIONS_PATH = "/v1/sessions"


def session_path(session_id: str, action: Optional[str] = None) -> str:
    """``/v1/sessions/{id}[/action]`` with the id percent-encoded (the broker
    answers ``400`` naming ``id`` for one it did not issue)."""
    if not isinstance(session_id, str) or not session_id:
        raise ValueError("a session id must be a non-empty string")
    path = f"{SESSIONS_PATH}/" + quote(session_id, safe="")
    return f"{path}/{action}" if action else path


def open_session_request(
    ttl: float, owner: Optional[str], lock_delay: Optional[float]
) -> Request:
    """``POST /v1/sessions``; a ``lock_delay`` of ``None`` is the broker's default."""
    body: Dict[str, Any] = {"ttl_ms": millis(ttl)}
    if owner is not None:
        body["owner"] = owner
    if lock_delay is not None:
        body["lock_delay_ms"] = int(lock_delay * 1000)
    return "POST", SESSIONS_PATH, body


def keep_session_request(session_id: str, token: str) -> Request:
    """``POST /v1/sessions/{id}/keepalive``: the token goes in the body, never the URL."""
    return "POST", session_path(session_id, "keepalive"), {"token": _token(token)}


def close_session_request(session_id: str, token: str) -> Request:
    """``POST /v1/sessions/{id}/close``."""
    return "POST", session_path(session_id, "close"), {"token": _token(token)}


def session_status_request(session_id: str) -> Request:
    """``GET /v1/sessions/{id}``."""
    return "GET", session_path(session_id), None


def _token(token: str) -> str:
    if not isinstance(token, str) or not token:
        raise ValueError("a session token must be a non-empty string")
    return token


@dataclass(frozen=True)
class SessionGrant:
    """The broker's answer to opening a session: the only one that carries its
    ``token``, which is left out of ``repr()``."""

    #: The session's id, for its routes. Not a secret.
    id: str
    #: The secret that keeps and closes the session and takes leases under it.
    token: str = field(repr=False)
    #: Seconds each keepalive keeps the session (and every lease under it).
    ttl: float
    #: When the session expires without a keepalive, in Unix ms of the broker's clock.
    expires_at_ms: int
    #: Seconds the session is sure to stay valid from when the answer left.
    validity: float
    #: The lock-delay of every lease under the session, in seconds.
    lock_delay: float
    owner: Optional[str]

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "SessionGrant":
        return cls(
            id=data["id"],
            token=data["token"],
            ttl=data["ttl_ms"] / 1000.0,
            expires_at_ms=data["expires_at_ms"],
            validity=data.get("validity_ms", data["ttl_ms"]) / 1000.0,
            lock_delay=data.get("lock_delay_ms", 0) / 1000.0,
            owner=data.get("owner"),
        )


@dataclass(frozen=True)
class EndedLease:
    """A lease that had ended (released by its holder, force-released, lost, or
    past the maximum hold) and that a keepalive took out of its session."""

    name: str
    #: ``"lock"`` or ``"semaphore"``.
    space: str


@dataclass(frozen=True)
class SessionRenewal:
    """The broker's answer to a keepalive: the session and every lease under it
    renewed to ``ttl``."""

    id: str
    ttl: float
    #: When the session now expires, in Unix ms of the broker's clock.
    expires_at_ms: int
    #: Seconds the session is sure to stay valid from when the answer left.
    validity: float
    #: How many leases were renewed with the session.
    leases: int
    #: The leases that had ended and were taken out of the session.
    ended: Tuple[EndedLease, ...] = ()

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "SessionRenewal":
        ended = data.get("ended")
        return cls(
            id=data["id"],
            ttl=data["ttl_ms"] / 1000.0,
            expires_at_ms=data["expires_at_ms"],
            validity=data.get("validity_ms", data["ttl_ms"]) / 1000.0,
            leases=int(data.get("leases", 0)),
            ended=tuple(
                EndedLease(item["name"], item.get("space", "lock"))
                for item in (ended if isinstance(ended, list) else [])
                if isinstance(item, dict) and isinstance(item.get("name"), str)
            ),
        )


@dataclass(frozen=True)
class SessionStatus:
    """A session's state as ``GET /v1/sessions/{id}`` reports it. Never a token.
    A session that expired or was closed reads ``open=False``; its terms read
    ``None`` once the broker forgot them (a minute after it ended)."""

    id: str
    #: Whether the session is open now.
    open: bool
    #: The holder's label (``None`` once it is not open).
    owner: Optional[str]
    #: Seconds it stays valid without a keepalive (0 when not open).
    expires_in: float
    #: Seconds each keepalive gives (``None`` once its record is gone).
    ttl: Optional[float]
    #: The lock-delay of its leases, in seconds (``None`` once its record is gone).
    lock_delay: Optional[float]
    #: How many leases it holds.
    leases: int

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "SessionStatus":
        ttl_ms, delay_ms = data.get("ttl_ms"), data.get("lock_delay_ms")
        return cls(
            id=data["id"],
            open=bool(data["open"]),
            owner=data.get("owner"),
            expires_in=data.get("expires_in_ms", 0) / 1000.0,
            ttl=None if ttl_ms is None else ttl_ms / 1000.0,
            lock_delay=None if delay_ms is None else delay_ms / 1000.0,
            leases=int(data.get("leases", 0)),
        )


def leases_released(data: Dict[str, Any]) -> int:
    """How many leases a session's close released."""
    return int(data.get("leases_released", 0))
