"""The exceptions the client raises, and the one table from broker answers to them.

Every error the broker sends has the shape ``{"error": {"code": ..., "message": ...}}``;
:func:`error_from_response` turns one into the matching exception class. Transport
failures (refused, reset, timed out) become :class:`BrokerUnavailable`.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple, Type

from ._wire import Holder, holders_from_json


class LockBrokerError(Exception):
    """Base of every error this package raises.

    ``code`` is the broker's stable error code (or ``"transport"`` when no answer came
    back), ``status`` the HTTP status (``None`` without an answer), ``details`` the
    rest of the error object, and ``retry_after`` the ``Retry-After`` header in seconds.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "error",
        status: Optional[int] = None,
        details: Optional[Mapping[str, Any]] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.details: Dict[str, Any] = dict(details or {})
        self.retry_after = retry_after

    def __str__(self) -> str:
        if self.status is None:
            return f"{self.code}: {self.message}"
        return f"{self.code} ({self.status}): {self.message}"


class LockBusy(LockBrokerError):
    """The lock is held by other leases, or every permit of the semaphore is taken
    (423 ``lock_busy``), also after waiting.

    ``owner`` and ``fence`` describe the holder (of several, the one whose end lets
    this caller try again first); ``available_in`` is when the lock may be free
    again, in seconds (it includes any lock-delay). ``holders`` lists every lease
    in the way, and ``limit`` is a semaphore's limit.
    """

    @property
    def owner(self) -> Optional[str]:
        """The holder's ``owner`` label, if it gave one."""
        return self.details.get("owner")

    @property
    def fence(self) -> Optional[int]:
        """The holder's fence."""
        return self.details.get("fence")

    @property
    def holders(self) -> Tuple[Holder, ...]:
        """Every lease (or permit) in the way, at most 100; empty from a broker
        that does not list them."""
        return holders_from_json(self.details.get("holders"))

    @property
    def limit(self) -> Optional[int]:
        """The semaphore's limit (``None`` for a lock)."""
        return self.details.get("limit")

    @property
    def lock(self) -> Optional[str]:
        """For ``acquire_all``, the lock that was busy (``None`` from a single
        acquire, which names its one lock itself)."""
        return self.details.get("lock")

    @property
    def expires_in(self) -> Optional[float]:
        """Seconds until the holder's lease expires unless renewed."""
        return _seconds(self.details.get("expires_in_ms"))

    @property
    def available_in(self) -> Optional[float]:
        """Seconds until the lock can next be granted (expiry plus lock-delay)."""
        return _seconds(self.details.get("available_in_ms"))


class LeaseLost(LockBrokerError):
    """The token no longer holds the lease (409 ``lease_lost``).

    The lease expired or was taken: another holder may already have run, so treat
    the work done under this lease as possibly duplicated.
    """


class SessionLost(LeaseLost):
    """The session is not open (409 ``session_lost``): it expired, was closed, or
    the token is not its; or the session helper saw it lost (no keepalive
    succeeded within its TTL). Every lease taken under it has ended or ends with
    it, so this is a :class:`LeaseLost` too: treat the work done under them as
    possibly duplicated, and open a new session to go on."""


class SessionFull(LockBrokerError):
    """The session already holds as many leases as one may (409
    ``session_full``, the broker's ``locks.max_leases_per_session``). Nothing
    was granted: release some, or take the lease under another session."""


class MaxHoldExceeded(LockBrokerError):
    """The broker refuses to extend the lease past its maximum hold (409).

    The lease stays valid until it expires, ``expires_in`` seconds from the answer.
    """

    @property
    def expires_in(self) -> Optional[float]:
        """Seconds the lease still has."""
        return _seconds(self.details.get("expires_in_ms"))


class LimitConflict(LockBrokerError):
    """The semaphore's permits are held under another limit (409
    ``limit_conflict``): ``limit`` is the one to ask with. Nothing was granted."""

    @property
    def limit(self) -> Optional[int]:
        """The limit the semaphore's permits are held under."""
        return self.details.get("limit")


class BrokerUnavailable(LockBrokerError):
    """The broker could not be reached or cannot serve now: connection failures,
    timeouts, ``backend_unavailable``, ``overloaded``, ``shutting_down``,
    ``too_many_waiters``, ``too_many_sessions``, ``too_many_streams``, ``rate_limited``,
    ``request_timeout``, ``contended`` (quorum mode: acquires in flight split the votes; no lease holds
    the lock) and any other 5xx.
    Nothing was granted; retrying later (after ``retry_after``) is safe."""


class InvalidRequest(LockBrokerError):
    """The broker rejected the request itself (400, 404, 405, 413, 415): a bad lock name,
    TTL or other field. ``field`` names the offending field when the broker said."""

    @property
    def field(self) -> Optional[str]:
        """The field the broker rejected."""
        return self.details.get("field")


class AuthError(LockBrokerError):
    """The API key is missing or wrong (401 ``unauthorized``) or may not do this
    (403 ``forbidden``)."""


_BY_CODE: Dict[str, Type[LockBrokerError]] = {
    "lock_busy": LockBusy,
    "lease_lost": LeaseLost,
    "session_lost": SessionLost,
    "session_full": SessionFull,
    "max_hold_exceeded": MaxHoldExceeded,
    "limit_conflict": LimitConflict,
    "backend_unavailable": BrokerUnavailable,
    "shutting_down": BrokerUnavailable,
    "too_many_waiters": BrokerUnavailable,
    "too_many_sessions": BrokerUnavailable,
    "too_many_streams": BrokerUnavailable,
    "contended": BrokerUnavailable,
    "rate_limited": BrokerUnavailable,
    "overloaded": BrokerUnavailable,
    "request_timeout": BrokerUnavailable,
    "invalid_request": InvalidRequest,
    "payload_too_large": InvalidRequest,
    "unsupported_media_type": InvalidRequest,
    "not_found": InvalidRequest,
    "method_not_allowed": InvalidRequest,
    "unauthorized": AuthError,
    "forbidden": AuthError,
}

_BY_STATUS: Dict[int, Type[LockBrokerError]] = {
    400: InvalidRequest,
    401: AuthError,
    403: AuthError,
    404: InvalidRequest,
    405: InvalidRequest,
    408: BrokerUnavailable,
    413: InvalidRequest,
    415: InvalidRequest,
    423: LockBusy,
    429: BrokerUnavailable,
}


def error_from_response(
    status: int, body: Any, retry_after: Optional[str] = None
) -> LockBrokerError:
    """The exception for a non-2xx answer: by the error ``code`` when the body has
    one, else by HTTP status (a proxy's HTML 502 is still ``BrokerUnavailable``)."""
    detail: Dict[str, Any] = {}
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        detail = dict(body["error"])
    code = str(detail.pop("code", "") or f"http_{status}")
    message = str(detail.pop("message", "") or f"the broker answered HTTP {status}")
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status)
    if cls is None:
        cls = BrokerUnavailable if status >= 500 else LockBrokerError
    return cls(
        message,
        code=code,
        status=status,
        details=detail,
        retry_after=_parse_retry_after(retry_after),
    )


def error_from_detail(error: Mapping[str, Any]) -> LockBrokerError:
    """The exception for an error object inside a 200 answer (one lease's result
    in a release-all), by its ``code``, with no HTTP status of its own."""
    detail = dict(error)
    code = str(detail.pop("code", "") or "error")
    message = str(detail.pop("message", "") or f"the broker answered {code}")
    return _BY_CODE.get(code, LockBrokerError)(message, code=code, details=detail)


def _parse_retry_after(value: Optional[str]) -> Optional[float]:
    if value is None:
        return None
    try:
        return max(0.0, float(value.strip()))
    except ValueError:
        return None  # an HTTP date: rare from a broker, and not worth a parser


def _seconds(ms: Any) -> Optional[float]:
    return None if ms is None else ms / 1000.0
