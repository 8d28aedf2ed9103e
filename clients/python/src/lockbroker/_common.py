"""What the sync and async clients share: durations, request bodies, the lease and
status records, and the renewal rule (how long the next extend may ask for)."""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Dict, Optional, Union
from urllib.parse import quote

from .errors import LeaseLost

log = logging.getLogger("lockbroker")

#: A duration in seconds (``int`` or ``float``) or a :class:`datetime.timedelta`.
Duration = Union[int, float, timedelta]

#: TTL of a lease when none is given: finite, like everything here.
DEFAULT_TTL = 30.0
#: How long ``lock()`` keeps renewing a lease at most, unless told otherwise.
DEFAULT_MAX_HOLD = 3600.0
#: Seconds one HTTP exchange may take (plus the wait, for a waiting acquire).
DEFAULT_TIMEOUT = 10.0
#: Longest pause between renewal retries while the broker cannot be reached.
RETRY_PAUSE = 1.0


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


def millis(value: float) -> int:
    """Seconds as whole milliseconds, at least 1."""
    return max(1, int(round(value * 1000)))


def default_owner() -> str:
    """``host:pid``, so a ``lock_busy`` answer says who holds the lock."""
    return f"{socket.gethostname()}:{os.getpid()}"[:256]


def new_request_id() -> str:
    """A fresh id that makes a re-sent acquire return the same lease, not busy."""
    return uuid.uuid4().hex


def lock_path(name: str, action: Optional[str] = None) -> str:
    """``/v1/locks/{name}[/action]`` with the name percent-encoded."""
    if not isinstance(name, str) or not name:
        raise ValueError("lock name must be a non-empty string")
    path = "/v1/locks/" + quote(name, safe="")
    return f"{path}/{action}" if action else path


def acquire_body(
    ttl: float,
    wait: float,
    owner: Optional[str],
    request_id: str,
    lock_delay: Optional[float],
    fair: bool = False,
) -> Dict[str, Any]:
    """The JSON body of an acquire. ``fair`` is sent only when set, so brokers
    without fair queueing keep accepting the default."""
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
    return body


@dataclass(frozen=True)
class LockStatus:
    """A lock's state as ``GET /v1/locks/{name}`` reports it. Never a token."""

    name: str
    held: bool
    owner: Optional[str]
    #: The last fence issued for this lock (``None`` when it has none).
    fence: Optional[int]
    #: Seconds until the current lease expires (0 when not held).
    expires_in: float
    #: Seconds until the lock can next be granted (expiry plus lock-delay).
    available_in: float

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "LockStatus":
        return cls(
            name=data["name"],
            held=bool(data["held"]),
            owner=data.get("owner"),
            fence=data.get("fence"),
            expires_in=data.get("expires_in_ms", 0) / 1000.0,
            available_in=data.get("available_in_ms", 0) / 1000.0,
        )


class LeaseBase:
    """The state of one granted lease; :class:`lockbroker.Lease` and
    :class:`lockbroker.AsyncLease` add the calls.

    ``deadline`` is a :func:`time.monotonic` instant no later than the broker's own
    expiry (it is measured from when the request was *sent*), so a lease this
    process believes it holds is held.
    """

    #: Set once the lease is (or may be) gone: replaced by a threading.Event or
    #: an asyncio.Event in the subclasses.
    lost: Any

    def __init__(self, data: Dict[str, Any], sent_at: float, ttl: float) -> None:
        self.name: str = data["name"]
        self.fence: int = data["fence"]
        self.owner: Optional[str] = data.get("owner")
        self.ttl: float = ttl
        #: The broker's expiry, in Unix milliseconds of the broker's clock.
        self.expires_at_ms: int = data["expires_at_ms"]
        self.deadline: float = sent_at + data["ttl_ms"] / 1000.0
        self.released = False
        #: Why ``lost`` was set: ``"lease_lost"`` when the broker said so,
        #: ``"expired"`` when the deadline passed without a renewal.
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

    def _mark_lost(self, reason: str) -> None:
        """Sets ``lost`` (once) and records why."""
        if not self.lost.is_set():
            self.lost_reason = reason
            log.warning("lease on %r (fence %d) lost: %s", self.name, self.fence, reason)
            self.lost.set()

    def _renewed(self, data: Dict[str, Any], sent_at: float) -> None:
        self.expires_at_ms = data["expires_at_ms"]
        self.deadline = sent_at + data["ttl_ms"] / 1000.0

    def __repr__(self) -> str:  # the token is deliberately left out
        state = "lost" if self.lost.is_set() else ("released" if self.released else "held")
        return (
            f"<{type(self).__name__} name={self.name!r} fence={self.fence} "
            f"owner={self.owner!r} {state} remaining={self.remaining():.3f}s>"
        )


class RenewPlan:
    """When to renew and for how long, so the renewer never asks for a lease that
    would outlive ``max_hold`` from acquisition."""

    def __init__(self, ttl: float, max_hold: float, started_at: float) -> None:
        self.ttl = ttl
        self.interval = ttl / 3.0
        self.hold_deadline = started_at + max_hold

    def next_ttl(self, now: float) -> Optional[float]:
        """The TTL to ask for now, or ``None`` when max hold leaves no room (the
        lease then runs out at the hold deadline)."""
        room = self.hold_deadline - now
        if room < 0.001:
            return None
        return min(self.ttl, room)

    def retry_pause(self, lease_deadline: float, now: float) -> float:
        """Pause before retrying a failed renewal: short, and never past expiry."""
        return max(0.0, min(RETRY_PAUSE, self.interval / 2.0, lease_deadline - now))
