"""Python client for lockbroker: leases with fence numbers over HTTP.

::

    from lockbroker import Client

    client = Client("http://127.0.0.1:7700", api_key=None, timeout=10)
    with client.lock("nightly-report", ttl=30, wait=10) as lease:
        run_report(fence=lease.fence)   # pass the fence to what you write to

``client.lock(name, shared=True)`` holds a shared lease, and
``client.semaphore(name, limit=3)`` one of a semaphore's permits, the same way.
``AsyncClient`` is the asyncio twin (``async with client.lock(...)``).
"""

from ._common import (
    DEFAULT_MAX_HOLD,
    DEFAULT_TIMEOUT,
    DEFAULT_TTL,
    Holder,
    LockStatus,
    SemaphoreStatus,
)
from ._version import __version__
from .aio import AsyncClient, AsyncLease, AsyncLock, AsyncPermit, AsyncSemaphore
from .client import Client, Lease, Lock, Permit, Renewal, Semaphore
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
    "AsyncLease",
    "AsyncLock",
    "AsyncPermit",
    "AsyncSemaphore",
    "AuthError",
    "BrokerUnavailable",
    "Client",
    "DEFAULT_MAX_HOLD",
    "DEFAULT_TIMEOUT",
    "DEFAULT_TTL",
    "Holder",
    "InvalidRequest",
    "Lease",
    "LeaseLost",
    "LimitConflict",
    "Lock",
    "LockBrokerError",
    "LockBusy",
    "LockStatus",
    "MaxHoldExceeded",
    "Permit",
    "Renewal",
    "Semaphore",
    "SemaphoreStatus",
    "__version__",
]
