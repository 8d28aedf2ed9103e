"""The renewal state machine (:class:`Renewals`) on a fake clock, against a
scripted broker: when it renews, how it retries, when it gives a lease up.

No broker, no threads and no sleeping: :class:`Renewals` takes the time as an
argument at every call, so :class:`Simulation` turns the renewer's loop the way
:mod:`lockbroker.client` and :mod:`lockbroker.aio` do, on a clock that moves
only when a step waits or an extend's round trip takes time."""

from __future__ import annotations

import threading
from typing import Callable, List, Optional, Tuple

import pytest

from lockbroker._lease import LeaseBase
from lockbroker._renewals import MIN_CAP_GAP, RETRY_PAUSE, Action, Renewals, Step
from lockbroker.errors import (
    AuthError,
    BrokerUnavailable,
    LeaseLost,
    LockBrokerError,
    MaxHoldExceeded,
)

#: Where the fake clock starts: far from zero, like a monotonic clock.
START = 1000.0

#: What the scripted broker does with one extend: ``(sent_at, ttl)`` to the TTL
#: it granted, or an exception.
BrokerAnswer = Callable[[float, float], float]


def grant(sent_at: float, ttl: float) -> float:
    return ttl


def unreachable(sent_at: float, ttl: float) -> float:
    raise BrokerUnavailable("connection refused", code="transport")


def scripted(*answers: BrokerAnswer) -> BrokerAnswer:
    """A broker that answers with each of ``answers`` in turn, then grants."""
    left = list(answers)

    def answer(sent_at: float, ttl: float) -> float:
        return (left.pop(0) if left else grant)(sent_at, ttl)

    return answer


class FakeLease(LeaseBase):
    """A lease granted at ``sent_at`` for ``ttl`` seconds; ``lost`` as the
    blocking client has it."""

    def __init__(self, sent_at: float, ttl: float) -> None:
        data = {"name": "job", "fence": 7, "token": "secret", "owner": "w",
                "ttl_ms": round(ttl * 1000), "expires_at_ms": 0}
        super().__init__(data, sent_at, ttl)
        self.lost = threading.Event()


class Simulation:
    """A lease and its renewer on a fake clock. ``broker`` answers each extend;
    each answer arrives ``round_trip`` seconds after the request was sent."""

    def __init__(
        self,
        ttl: float = 30.0,
        *,
        max_hold: float = 3600.0,
        timeout: float = 10.0,
        round_trip: float = 0.0,
        broker: BrokerAnswer = grant,
    ) -> None:
        self.now = START
        self.lease = FakeLease(self.now, ttl)
        self.renewals = Renewals(self.lease, max_hold, timeout, self.now)
        self.round_trip = round_trip
        self.broker = broker
        #: Every extend sent: ``(sent_at, ttl, timeout)``.
        self.extends: List[Tuple[float, float, float]] = []
        #: When the renewer ended (``None`` while it runs).
        self.stopped_at: Optional[float] = None

    def step(self) -> Step:
        """One turn of the renewer's loop."""
        step = self.renewals.next_step(self.now)
        if step.action is Action.STOP:
            self.stopped_at = self.now
        elif step.action is Action.WAIT:
            self.now += step.delay
        else:
            sent_at = self.now
            self.extends.append((sent_at, step.ttl, step.timeout))
            self.now += self.round_trip
            try:
                granted = self.broker(sent_at, step.ttl)
            except LockBrokerError as error:
                self.renewals.failed(error, self.now)
            else:
                self.renewals.renewed({"ttl_ms": round(granted * 1000), "expires_at_ms": 0})
        return step

    def run(self, until: float = START + 3600.0) -> None:
        """Turns the loop until the renewer ends or the clock reaches ``until``."""
        for _ in range(10_000):  # a renewer that never waits is a bug: fail, do not hang
            if self.stopped_at is not None or self.now >= until:
                return
            self.step()
        pytest.fail(f"the renewer took 10000 steps by {self.now - START:.3f}s")

    def sent(self) -> List[float]:
        """When each extend was sent, in seconds from the grant."""
        return [round(sent_at - START, 6) for sent_at, _ttl, _timeout in self.extends]


def test_the_first_renewal_waits_a_third_of_the_ttl():
    sim = Simulation(ttl=30.0)
    step = sim.renewals.next_step(START)
    assert step.action is Action.WAIT and step.delay == pytest.approx(10.0)
    # Asked again early (a spurious wake-up), it waits only what is left.
    assert sim.renewals.next_step(START + 4.0).delay == pytest.approx(6.0)


def test_renewals_come_every_third_of_the_ttl_and_ask_for_the_whole_ttl():
    sim = Simulation(ttl=30.0)
    sim.run(until=START + 65.0)
    assert sim.sent() == pytest.approx([10, 20, 30, 40, 50, 60])
    assert all(ttl == 30.0 for _sent, ttl, _timeout in sim.extends)
    assert all(timeout == 10.0 for _sent, _ttl, timeout in sim.extends)
    assert sim.lease.deadline == pytest.approx(START + 90.0)
    assert not sim.lease.lost.is_set()

    short = Simulation(ttl=1.2)
    short.run(until=START + 1.3)
    assert short.sent() == pytest.approx([0.4, 0.8, 1.2])


def test_the_deadline_and_the_next_renewal_count_from_the_send_time():
    # An answer that takes 2 s says nothing of when the broker renewed within
    # them: the lease is counted from the send time, the conservative end.
    sim = Simulation(ttl=30.0, round_trip=2.0)
    sim.step()  # the wait
    sim.step()  # the extend
    assert sim.now == pytest.approx(START + 12.0)
    assert sim.lease.deadline == pytest.approx(START + 40.0)
    sim.run(until=START + 35.0)
    assert sim.sent() == pytest.approx([10, 20, 30])


def test_an_unreachable_broker_is_retried_after_a_short_pause():
    sim = Simulation(ttl=30.0, broker=scripted(unreachable, unreachable))
    sim.run(until=START + 25.0)
    assert sim.sent() == pytest.approx([10, 10 + RETRY_PAUSE, 10 + 2 * RETRY_PAUSE,
                                        20 + 2 * RETRY_PAUSE])
    assert sim.lease.deadline == pytest.approx(START + 20 + 2 * RETRY_PAUSE + 30)
    assert not sim.lease.lost.is_set()


def test_a_short_ttl_retries_within_half_a_renewal_interval():
    sim = Simulation(ttl=1.2, broker=scripted(unreachable))
    sim.run(until=START + 0.7)
    assert sim.sent() == pytest.approx([0.4, 0.6])  # 0.2 s: half of ttl / 3
    assert not sim.lease.lost.is_set()


def test_the_lease_is_lost_when_its_validity_runs_out_without_a_renewal():
    sim = Simulation(ttl=30.0, broker=unreachable)
    deadline = sim.lease.deadline
    for _ in range(1000):
        if sim.stopped_at is not None:
            break
        sim.step()
        assert sim.now < deadline + 1e-9, "the renewer ran past the deadline"
        if sim.now < deadline:
            assert not sim.lease.lost.is_set(), f"lost {deadline - sim.now:.3f}s early"
    assert sim.stopped_at == pytest.approx(deadline)  # lost on the deadline, not later
    assert sim.lease.lost_reason == "expired"
    assert sim.sent() == pytest.approx([10 + i * RETRY_PAUSE for i in range(20)])
    for sent_at, _ttl, timeout in sim.extends:
        # No extend waits for an answer past the lease's deadline.
        assert sent_at + timeout <= deadline + 1e-9


def test_a_slow_unreachable_broker_never_holds_an_extend_past_the_deadline():
    sim = Simulation(ttl=3.0, timeout=10.0, round_trip=0.7, broker=unreachable)
    sim.run()
    deadline = START + 3.0
    assert sim.lease.lost_reason == "expired"
    assert sim.extends and all(sent_at < deadline for sent_at, _ttl, _timeout in sim.extends)
    for sent_at, _ttl, timeout in sim.extends:
        assert timeout == pytest.approx(max(0.05, deadline - sent_at))


def test_the_lease_is_lost_at_once_when_the_broker_says_it_is_gone():
    def gone(sent_at: float, ttl: float) -> float:
        raise LeaseLost("the lease expired", code="lease_lost", status=409)

    sim = Simulation(ttl=30.0, broker=gone)
    sim.run()
    assert sim.stopped_at == pytest.approx(START + 10.0)  # not at the deadline, 20 s on
    assert sim.lease.lost_reason == "lease_lost"
    assert sim.sent() == pytest.approx([10])


def test_no_renewal_after_a_release():
    sim = Simulation(ttl=30.0)
    sim.run(until=START + 15.0)
    assert sim.sent() == pytest.approx([10])
    sim.lease.releasing = True
    sim.run()
    assert sim.stopped_at == pytest.approx(START + 20.0)  # at the next renewal time
    assert sim.sent() == pytest.approx([10])
    assert not sim.lease.lost.is_set()


def test_a_release_that_overtakes_an_extend_is_no_loss():
    sim = Simulation(ttl=30.0)

    def released_meanwhile(sent_at: float, ttl: float) -> float:
        sim.lease.releasing = True  # the release reached the broker first
        raise LeaseLost("no such lease", code="lease_lost", status=409)

    sim.broker = released_meanwhile
    sim.run()
    assert sim.sent() == pytest.approx([10])
    assert not sim.lease.lost.is_set() and sim.lease.lost_reason is None


def test_a_refusal_ends_renewing_and_the_lease_runs_out():
    def refused(sent_at: float, ttl: float) -> float:
        raise AuthError("the key may not extend", code="forbidden", status=403)

    sim = Simulation(ttl=30.0, broker=refused)
    sim.run()
    assert sim.sent() == pytest.approx([10])  # not retried
    assert sim.stopped_at == pytest.approx(START + 30.0)  # still valid until then
    assert sim.lease.lost_reason == "expired"


def test_max_hold_makes_the_last_renewal_ask_for_just_what_is_left():
    sim = Simulation(ttl=30.0, max_hold=45.0)
    sim.run()
    assert [(round(sent_at - START, 6), ttl) for sent_at, ttl, _timeout in sim.extends] == [
        (10.0, 30.0),
        (20.0, pytest.approx(25.0)),
    ]
    assert sim.stopped_at == pytest.approx(START + 45.0)
    assert sim.lease.lost_reason == "expired"


class CappedBroker:
    """A broker whose own max hold ends the lease at ``cap``: it refuses an extend
    that would end past it, saying how long the lease still has."""

    def __init__(self, cap: float, ttl: float) -> None:
        self.cap = cap
        self.expires_at = START + ttl

    def __call__(self, sent_at: float, ttl: float) -> float:
        if sent_at + ttl > self.cap + 1e-9:
            raise MaxHoldExceeded(
                "the lease would outlive the maximum hold", code="max_hold_exceeded",
                status=409, details={"expires_in_ms": round((self.expires_at - sent_at) * 1000)},
            )
        self.expires_at = sent_at + ttl
        return ttl


def test_a_refusal_for_the_brokers_max_hold_closes_in_on_it():
    # The broker's cap at 45 s is not known in advance: the renewal at 20 s is
    # refused, and the lease must still last to about 45 s, not end at 40 s.
    broker = CappedBroker(cap=START + 45.0, ttl=30.0)
    sim = Simulation(ttl=30.0, broker=broker)
    sim.run()
    close_enough = max(MIN_CAP_GAP, 30.0 * 0.01)
    assert START + 45.0 - close_enough <= sim.stopped_at <= START + 45.0 + 1e-9
    assert sim.lease.deadline == pytest.approx(broker.expires_at)
    assert sim.lease.lost_reason == "expired"
    # Halving the gap takes a handful of extends, all sent at once after the refusal.
    assert 3 <= len(sim.extends) <= 12, sim.extends
    assert all(sent_at == START + 20.0 for sent_at, _ttl, _timeout in sim.extends[1:])


def test_a_crashed_renewer_marks_the_lease_lost():
    sim = Simulation(ttl=30.0)
    sim.renewals.crashed()
    assert sim.lease.lost.is_set() and sim.lease.lost_reason == "renewer_failed"
    assert sim.renewals.next_step(START + 1.0).action is Action.STOP
