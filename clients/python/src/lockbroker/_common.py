"""Every I/O-free part the blocking and the asyncio client share, importable from
one place. Each lives in the module of its concern:

- :mod:`._wire`: the route families and modes, the requests, and the answers
  parsed into records (:class:`LockStatus`, :class:`Holder`, ...);
- :mod:`._options`: checked durations and counts, :class:`LockOptions`, and
  what a client is built from (:class:`ClientBase`, TLS);
- :mod:`._retry`: the retry rule of one acquire (:class:`AcquireAttempts`);
- :mod:`._lease`: the lease record (:class:`LeaseBase`) and what leaving a
  ``lock()`` block means (:class:`LockBase`);
- :mod:`._renewals`: the renewer's state machine (:class:`Renewals`);
- :mod:`._sessions`: a session helper's state (:class:`SessionBase`) and its
  keepalive loop's state machine (:class:`Keepalives`).

:mod:`lockbroker.client` and :mod:`lockbroker.aio` keep only what differs:
blocking calls and threads there, awaited calls and tasks here."""

from ._lease import LeaseBase, LockBase
from ._options import (
    DEFAULT_MAX_HOLD,
    DEFAULT_TIMEOUT,
    DEFAULT_TTL,
    ClientBase,
    Duration,
    LockOptions,
    count,
    default_owner,
    seconds,
    tls_context,
)
from ._renewals import CAP_GAP_SHARE, MIN_CAP_GAP, RETRY_PAUSE, Action, Renewals, Step
from ._retry import RESYNC_SHARE, AcquireAttempts, new_request_id
from ._sessions import Keepalives, SessionBase
from ._wire import (
    EXCLUSIVE,
    LOCKS,
    PERMIT,
    SEMAPHORES,
    SHARED,
    FenceCheck,
    Holder,
    LockStatus,
    Renewal,
    Request,
    SemaphoreStatus,
    acquire_body,
    extend_request,
    fence_check_request,
    holders_from_json,
    lock_path,
    millis,
    release_request,
    released_acknowledged,
    released_fence,
    resource_path,
    semaphore_path,
    status_request,
)

__all__ = [
    "CAP_GAP_SHARE",
    "DEFAULT_MAX_HOLD",
    "DEFAULT_TIMEOUT",
    "DEFAULT_TTL",
    "EXCLUSIVE",
    "LOCKS",
    "MIN_CAP_GAP",
    "PERMIT",
    "RESYNC_SHARE",
    "RETRY_PAUSE",
    "SEMAPHORES",
    "SHARED",
    "AcquireAttempts",
    "Action",
    "ClientBase",
    "Duration",
    "FenceCheck",
    "Holder",
    "Keepalives",
    "LeaseBase",
    "LockBase",
    "LockOptions",
    "LockStatus",
    "Renewal",
    "Renewals",
    "Request",
    "SemaphoreStatus",
    "SessionBase",
    "Step",
    "acquire_body",
    "count",
    "default_owner",
    "extend_request",
    "fence_check_request",
    "holders_from_json",
    "lock_path",
    "millis",
    "new_request_id",
    "release_request",
    "released_acknowledged",
    "released_fence",
    "resource_path",
    "seconds",
    "semaphore_path",
    "status_request",
    "tls_context",
]
