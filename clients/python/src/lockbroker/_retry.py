"""The retry rule of one acquire, without the I/O: the same ``request_id`` on
every attempt, how long to pause after a busy answer or an unreachable broker,
and when the caller's ``wait`` is over."""

from __future__ import annotations

import time
import uuid
from typing import Optional, Tuple

from ._options import LockOptions, default_owner
from ._wire import Request, acquire_body, resource_path
from .errors import LockBrokerError, LockBusy

#: A waiting acquire whose answer took longer than this share of the TTL is
#: followed by an extend, so the local deadline starts from a recent send time.
RESYNC_SHARE = 0.1


def new_request_id() -> str:
    """A fresh id that makes a re-sent acquire return the same lease, not busy."""
    return uuid.uuid4().hex


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
            o.ttl, left, self.owner, self.request_id, o.lock_delay, o.fair, o.shared, o.limit,
            o.session,
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
