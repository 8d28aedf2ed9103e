"""The caller's arguments, checked once where they are passed: durations and
counts, the options of an acquire (and of ``lock()`` and ``semaphore()``), and
what a client is built from (timeout, TLS), so nothing later checks again."""

from __future__ import annotations

import os
import socket
import ssl
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar, Optional, Type, TypeVar, Union

from ._wire import LOCKS, SEMAPHORES

#: A duration in seconds (``int`` or ``float``) or a :class:`datetime.timedelta`.
Duration = Union[int, float, timedelta]

#: TTL of a lease when none is given: finite, like everything here.
DEFAULT_TTL = 30.0


class _DefaultTtl(float):
    """:data:`DEFAULT_TTL` as the default argument of an acquire: a float like
    any other, which an acquire under a session (whose leases take the
    session's TTL) can tell apart from a TTL the caller gave."""


#: The ``ttl`` default of the single acquires.
ACQUIRE_TTL: float = _DefaultTtl(DEFAULT_TTL)
#: How long ``lock()`` keeps renewing a lease at most, unless told otherwise.
DEFAULT_MAX_HOLD = 3600.0
#: Seconds one HTTP exchange may take (plus the wait, for a waiting acquire).
DEFAULT_TIMEOUT = 10.0


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


def default_owner() -> str:
    """``host:pid``, so a ``lock_busy`` answer says who holds the lock."""
    return f"{socket.gethostname()}:{os.getpid()}"[:256]


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
    #: The token of the session to take the lease under (a secret: not in
    #: ``repr()``); the lease then has the session's TTL and lock-delay.
    session: Optional[str] = field(default=None, repr=False)

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
        session: Optional[str] = None,
    ) -> "LockOptions":
        """Durations as seconds; raises :class:`TypeError` or :class:`ValueError`
        for ``None``, negatives, NaN and infinity, for a ``max_hold`` shorter
        than the TTL (the first renewal could then not happen at all), for a
        ``limit`` that is not a whole number of at least 1, and for a ``ttl`` or
        ``lock_delay`` given with a ``session`` (whose own they are)."""
        if session is not None:
            if not isinstance(session, str) or not session:
                raise TypeError("session must be a session's token or a session helper")
            if not isinstance(ttl, _DefaultTtl):
                raise ValueError("a lease under a session has the session's TTL: leave out ttl")
            if lock_delay is not None:
                raise ValueError(
                    "a lease under a session has the session's lock_delay: leave it out"
                )
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
        return cls(ttl_s, wait_s, owner, delay_s, fair, hold_s, bool(shared), limit_n, session)


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
