"""Python client for lockbroker: leases with fence numbers over HTTP.

::

    from lockbroker import Client

    client = Client("http://127.0.0.1:7700", api_key=None, timeout=10)
    with client.lock("nightly-report", ttl=30, wait=10) as lease:
        run_report(fence=lease.fence)   # pass the fence to what you write to

``AsyncClient`` is the asyncio twin (``async with client.lock(...)``).
"""

from ._common import DEFAULT_MAX_HOLD, DEFAULT_TIMEOUT, DEFAULT_TTL, LockStatus
from ._version import __version__
from .aio import AsyncClient, AsyncLease, AsyncLock
from .client import Client, Lease, Lock, Renewal
from .errors import (
    AuthError,
    BrokerUnavailable,
    InvalidRequest,
    LeaseLost,
    LockBrokerError,
    LockBusy,
    MaxHoldExceeded,
)

__all__ = [
    "AsyncClient",
    "AsyncLease",
    "AsyncLock",
    "AuthError",
    "BrokerUnavailable",
    "Client",
    "DEFAULT_MAX_HOLD",
    "DEFAULT_TIMEOUT",
    "DEFAULT_TTL",
    "InvalidRequest",
    "Lease",
    "LeaseLost",
    "Lock",
    "LockBrokerError",
    "LockBusy",
    "LockStatus",
    "MaxHoldExceeded",
    "Renewal",
    "__version__",
]
