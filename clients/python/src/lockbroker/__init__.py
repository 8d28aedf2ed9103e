"""Python client for lockbroker: leases with fence numbers over HTTP.

::

    from lockbroker import Client

    client = Client("http://127.0.0.1:7700", api_key=None, timeout=10)
    with client.lock("nightly-report", ttl=30, wait=10) as lease:
        run_report(fence=lease.fence)   # pass the fence to what you write to

``client.acquire_all([...])`` takes a lease on every lock named or on none, and
``with client.lock_all([...]) as leases:`` holds them all, renewed, with one
``leases.lost`` event for the set.
``client.lock(name, shared=True)`` holds a shared lease, and
``client.semaphore(name, limit=3)`` one of a semaphore's permits, the same way.
``client.watch(name)`` iterates a lock's events, and ``client.leader(name)``
campaigns for leadership. ``with client.session(ttl=10) as session:`` keeps one
session alive, whose keepalives renew every lease taken with
``session.acquire(name)``. ``AsyncClient`` is the asyncio twin (``async with
client.lock(...)``).
"""

from ._events import Lagged, LockEvent, LockState, StateComplete, WatchEvent
from ._multi import LockAsk, ReleaseResult
from ._options import DEFAULT_MAX_HOLD, DEFAULT_TIMEOUT, DEFAULT_TTL
from ._version import __version__
from ._wire import (
    EndedLease,
    FenceCheck,
    Holder,
    LockStatus,
    SemaphoreStatus,
    SessionGrant,
    SessionRenewal,
    SessionStatus,
)
from .aio import (
    AsyncClient,
    AsyncLeader,
    AsyncLease,
    AsyncLeaseSet,
    AsyncLock,
    AsyncLockAll,
    AsyncPermit,
    AsyncSemaphore,
    AsyncSession,
    AsyncWatch,
)
from .client import (
    Client,
    Leader,
    Lease,
    LeaseSet,
    Lock,
    LockAll,
    Permit,
    Renewal,
    Semaphore,
    Session,
    Watch,
)
from .errors import (
    AuthError,
    BrokerUnavailable,
    InvalidRequest,
    LeaseLost,
    LimitConflict,
    LockBrokerError,
    LockBusy,
    MaxHoldExceeded,
    SessionFull,
    SessionLost,
)

__all__ = [
    "AsyncClient",
    "AsyncLeader",
    "AsyncLease",
    "AsyncLeaseSet",
    "AsyncLock",
    "AsyncLockAll",
    "AsyncPermit",
    "AsyncSemaphore",
    "AsyncSession",
    "AsyncWatch",
    "AuthError",
    "BrokerUnavailable",
    "Client",
    "DEFAULT_MAX_HOLD",
    "DEFAULT_TIMEOUT",
    "DEFAULT_TTL",
    "EndedLease",
    "FenceCheck",
    "Holder",
    "InvalidRequest",
    "Lagged",
    "Leader",
    "Lease",
    "LeaseLost",
    "LeaseSet",
    "LimitConflict",
    "Lock",
    "LockAll",
    "LockBrokerError",
    "LockAsk",
    "LockBusy",
    "LockEvent",
    "LockState",
    "LockStatus",
    "MaxHoldExceeded",
    "Permit",
    "ReleaseResult",
    "Renewal",
    "Semaphore",
    "SemaphoreStatus",
    "Session",
    "SessionFull",
    "SessionGrant",
    "SessionLost",
    "SessionRenewal",
    "SessionStatus",
    "StateComplete",
    "Watch",
    "WatchEvent",
    "__version__",
]
