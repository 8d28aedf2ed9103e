"""Python client for lockbroker: leases with fence numbers over HTTP.

::

    from lockbroker import Client

    client = Client("http://127.0.0.1:7700", api_key=None, timeout=10)
    with client.lock("nightly-report", ttl=30, wait=10) as lease:
        run_report(fence=lease.fence)   # pass the fence to what you write to

``client.lock(name, shared=True)`` holds a shared lease, and
``client.semaphore(name, limit=3)`` one of a semaphore's permits, the same way.
``client.watch(name)`` iterates a lock's events, and ``client.leader(name)``
campaigns for leadership. ``AsyncClient`` is the asyncio twin (``async with
client.lock(...)``).
"""

from ._common import (
    DEFAULT_MAX_HOLD,
    DEFAULT_TIMEOUT,
    DEFAULT_TTL,
    FenceCheck,
    Holder,
    LockStatus,
    SemaphoreStatus,
)
from ._events import Lagged, LockEvent, LockState, StateComplete, WatchEvent
from ._version import __version__
from .aio import (
    AsyncClient,
    AsyncLeader,
    AsyncLease,
    AsyncLock,
    AsyncPermit,
    AsyncSemaphore,
    AsyncWatch,
)
from .client import Client, Leader, Lease, Lock, Permit, Renewal, Semaphore, Watch
from .errors import (
    AuthError,
    BrokerUnavailable,
    InvalidRequest,
    LeaseLost,
    LimitConflict,
    LockBrokerError,
    LockBusy,
    MaxHoldExceeded,
)

__all__ = [
    "AsyncClient",
    "AsyncLeader",
    "AsyncLease",
    "AsyncLock",
    "AsyncPermit",
    "AsyncSemaphore",
    "AsyncWatch",
    "AuthError",
    "BrokerUnavailable",
    "Client",
    "DEFAULT_MAX_HOLD",
    "DEFAULT_TIMEOUT",
    "DEFAULT_TTL",
    "FenceCheck",
    "Holder",
    "InvalidRequest",
    "Lagged",
    "Leader",
    "Lease",
    "LeaseLost",
    "LimitConflict",
    "Lock",
    "LockBrokerError",
    "LockBusy",
    "LockEvent",
    "LockState",
    "LockStatus",
    "MaxHoldExceeded",
    "Permit",
    "Renewal",
    "Semaphore",
    "SemaphoreStatus",
    "StateComplete",
    "Watch",
    "WatchEvent",
    "__version__",
]
