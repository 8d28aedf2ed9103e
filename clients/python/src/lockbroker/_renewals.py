"""The renewer's state machine, without I/O: when to extend a lease, for how
long, how to retry, and when to give it up. The blocking client's renewer thread
and the asyncio client's renewer task run it with their own calls."""

from __future__ import annotations

import enum
import logging
from typing import Any, Dict, NamedTuple, Optional

from ._lease import LeaseBase
from .errors import BrokerUnavailable, LeaseLost, LockBrokerError, MaxHoldExceeded

log = logging.getLogger("lockbroker")

#: Longest pause between renewal retries while the broker cannot be reached.
RETRY_PAUSE = 1.0
#: How close (as a share of the TTL, and at least ``MIN_CAP_GAP`` seconds) the
#: renewer tries to bring a lease to a hold limit before letting it run out.
CAP_GAP_SHARE = 0.01
MIN_CAP_GAP = 0.01


class Action(enum.Enum):
    """The kinds of :class:`Step`."""

    #: The lease is lost (or marked so now): the renewer ends.
    STOP = "stop"
    #: Pause for ``Step.delay`` seconds (ending early if told to stop), then ask again.
    WAIT = "wait"
    #: Send an extend for ``Step.ttl`` with HTTP timeout ``Step.timeout``, then report
    #: the answer to :meth:`Renewals.renewed` or :meth:`Renewals.failed`.
    EXTEND = "extend"


class Step(NamedTuple):
    """What the renewer does next."""

    action: Action
    delay: float = 0.0
    ttl: float = 0.0
    timeout: float = 0.0


class Renewals:
    """The renewer's state machine: the renewer thread or task asks it for the next
    :class:`Step` and tells it how each extend went; it does no I/O of its own.

    It renews every ``ttl / 3`` and never asks for a lease that would outlive
    ``max_hold`` from acquisition, so a hung body loses the lock instead of keeping
    it: the last renewal asks for just what is left. The broker's own max hold is
    not known in advance: once an extend is refused with ``max_hold_exceeded``, the
    renewer halves the gap between the lease's deadline and the refused expiry
    with shorter extends, at once, until the lease ends within about ``ttl / 50``
    (and one round trip) of the cap.

    An unreachable broker is retried briefly, never past the lease's deadline; a
    refusal other than ``lease_lost`` ends renewing, and the lease then runs out. A
    lease past its deadline, or one the broker says is gone, is marked lost. A
    lease being released is never renewed.
    """

    def __init__(self, lease: LeaseBase, max_hold: float, timeout: float, now: float) -> None:
        self.lease = lease
        self.ttl = lease.ttl
        self.interval = lease.ttl / 3.0
        self.hold_deadline = lease.granted_at + max_hold
        #: A lease that ends this close to its limit is not extended further.
        self.close_enough = max(MIN_CAP_GAP, lease.ttl * CAP_GAP_SHARE)
        #: Once the broker refused an extend for its max hold: an instant known to
        #: lie past that cap (the cap lies between the deadline and it).
        self.cap_before: Optional[float] = None
        #: The client's HTTP timeout; an extend never waits past the lease's deadline.
        self.timeout = timeout
        self.renewing = True
        #: Set once renewing is over and the lease is left to run out: the next step
        #: after that wait marks it expired.
        self.running_out = False
        self.next_at = now + self.interval
        self._sent_at = now
        self._asked = 0.0

    def next_step(self, now: float) -> Step:
        lease = self.lease
        if lease.releasing:
            return Step(Action.STOP)
        if self.running_out or now >= lease.deadline:
            lease._mark_lost("expired")
            return Step(Action.STOP)
        if lease.lost.is_set():
            return Step(Action.STOP)
        ttl = self._next_ttl(now) if self.renewing else None
        if ttl is None:
            # A hold limit reached (or renewing refused): let the lease run out,
            # then report it gone.
            self.running_out = True
            return Step(Action.WAIT, delay=lease.deadline - now)
        if now < self.next_at:
            return Step(Action.WAIT, delay=min(self.next_at, lease.deadline) - now)
        self._sent_at, self._asked = now, ttl
        timeout = min(self.timeout, max(0.05, lease.deadline - now))
        return Step(Action.EXTEND, ttl=ttl, timeout=timeout)

    def renewed(self, data: Dict[str, Any]) -> None:
        """The extend succeeded: the new deadline counts from when it was sent.
        While closing in on the broker's max hold, the next try follows at once."""
        self.lease._renewed(data, self._sent_at)
        self.next_at = self._sent_at + (self.interval if self.cap_before is None else 0.0)

    def failed(self, error: LockBrokerError, now: float) -> None:
        """The extend raised ``error``; decides whether and when to try again."""
        lease, name = self.lease, self.lease.name
        if lease.releasing:
            return  # the release overtook this extend: nothing is lost
        if isinstance(error, LeaseLost):
            lease._mark_lost("lease_lost")
        elif isinstance(error, MaxHoldExceeded):
            # Refused: the broker's clock then was at most ``now``, so its cap
            # lies before now + the TTL asked; the lease stays valid meanwhile.
            if self.cap_before is None:
                log.info("lease on %r reached the broker's max hold; closing in on it", name)
            refused = now + self._asked
            self.cap_before = refused if self.cap_before is None else min(self.cap_before, refused)
            if error.expires_in is not None:
                lease._valid_for(self._sent_at, error.expires_in)
            self.next_at = now
        elif isinstance(error, BrokerUnavailable):
            log.warning("renewing lease on %r failed, retrying: %s", name, error)
            self.next_at = now + self._retry_pause(now)
        else:
            log.error("renewing lease on %r refused, not retrying: %s", name, error)
            self.renewing = False

    def crashed(self) -> None:
        """Called from the renewer's last-resort handler: a bug in the renewer must
        not leave the work believing it holds the lock."""
        log.exception("lease renewer for %r failed", self.lease.name)
        self.lease._mark_lost("renewer_failed")

    def _next_ttl(self, now: float) -> Optional[float]:
        """The TTL to ask for now, or ``None`` when the lease already ends (close
        enough to) where a hold limit would end it: ``max_hold``, or halfway
        between its deadline and what the broker refused."""
        end = self.hold_deadline
        if self.cap_before is not None:
            end = min(end, (self.lease.deadline + self.cap_before) / 2.0)
        if end - self.lease.deadline < self.close_enough:
            return None
        return min(self.ttl, end - now)

    def _retry_pause(self, now: float) -> float:
        """Pause before retrying a failed renewal: short, and never past expiry."""
        return max(0.0, min(RETRY_PAUSE, self.interval / 2.0, self.lease.deadline - now))
