"""Sessions against a real broker and Redis: one keepalive keeps every lease
under the session, a close releases them all, a session lost (closed
elsewhere, or not kept in time) takes its leases with it; and, without a
broker, the keepalive loop's state machine on a fake clock."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import urllib.request
from typing import Any, Dict

import pytest

from conftest import force_release
from lockbroker import (
    AsyncClient,
    Client,
    EndedLease,
    InvalidRequest,
    LeaseLost,
    LockAsk,
    Session,
    SessionFull,
    SessionGrant,
    SessionLost,
    SessionRenewal,
    SessionStatus,
)
from lockbroker._options import ACQUIRE_TTL, LockOptions
from lockbroker._renewals import Action
from lockbroker._sessions import Keepalives, SessionBase
from lockbroker.errors import BrokerUnavailable, error_from_response

EXTEND_ROUTES = ("/v1/locks/{name}/extend", "/v1/semaphores/{name}/extend")
KEEPALIVE_ROUTE = "/v1/sessions/{id}/keepalive"


def requests_to(broker, route: str) -> int:
    """How many requests the broker answered on ``route`` (a route template),
    whatever their status, from its own metrics."""
    with urllib.request.urlopen(f"{broker.url}/metrics", timeout=5) as response:
        text = response.read().decode()
    prefix = "lockbroker_http_request_duration_seconds_count{"
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith(prefix) and f'route="{route}"' in line
    )


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


# -- keeping ---------------------------------------------------------------------------


def test_a_session_keeps_100_leases_past_its_ttl_with_keepalives_only(make_broker, name):
    broker = make_broker()  # its own, so its metrics count this test's requests only
    with Client(broker.url, timeout=5) as client:
        with client.session(ttl=1.5, owner="batch-7") as session:
            leases = [session.acquire(f"{name}-{i}") for i in range(96)]
            leases.append(session.acquire(f"{name}-shared", shared=True))
            leases.append(session.acquire_permit(f"{name}-slots", 2))
            leases += session.acquire_all([f"{name}-x", LockAsk(f"{name}-y", shared=True)])
            assert len(leases) == 100 and session.status().leases == 100
            assert all(lease.owner == "batch-7" and lease.session_id == session.id
                       for lease in leases)

            time.sleep(3.5)  # more than twice the session's TTL

            session.raise_if_lost()
            opened = session.status()
            assert opened.open and opened.leases == 100
            for lease in leases:
                lease.raise_if_lost()
                # The local deadline and the broker's expiry follow the session's.
                assert session.deadline - session.ttl / 2 <= lease.deadline <= session.deadline
                assert abs(lease.expires_at_ms - session.expires_at_ms) <= 1000 * session.ttl / 2
                if lease.mode == "permit":
                    status: Any = client.semaphore_status(lease.name)
                else:
                    status = client.status(lease.name)
                assert lease.fence in [holder.fence for holder in status.holders]
                expires_in = [h.expires_in for h in status.holders if h.fence == lease.fence][0]
                assert abs(expires_in - opened.expires_in) < 0.5
            assert sum(requests_to(broker, route) for route in EXTEND_ROUTES) == 0
            assert requests_to(broker, KEEPALIVE_ROUTE) >= 5  # one every 0.5 s
        assert session.state == "closed" and session.leases_released == 100
        assert all(lease.released and not lease.lost.is_set() for lease in leases)
        assert not client.status(f"{name}-0").held
        assert client.semaphore_status(f"{name}-slots").held == 0
        assert sum(requests_to(broker, route) for route in EXTEND_ROUTES) == 0


def test_closing_releases_every_lease(client, name):
    with client.session(ttl=5) as session:
        lock = session.acquire(f"{name}-lock", owner="job")
        shared = session.acquire(f"{name}-shared", shared=True)
        permit = session.acquire_permit(f"{name}-slots", 3)
        pair = session.acquire_all([f"{name}-a", f"{name}-b"])
        assert client.status(f"{name}-lock").owner == "job"
        assert session.status().leases == 5
        assert session.close() == 5
        assert session.close() == 5  # closing again sends nothing more
    leases = [lock, shared, permit, *pair]
    assert all(lease.released and not lease.lost.is_set() for lease in leases)
    assert session.state == "closed" and not session.lost.is_set()
    session.raise_if_lost()  # a close is no loss
    for lock_name in (f"{name}-lock", f"{name}-shared", f"{name}-a", f"{name}-b"):
        assert not client.status(lock_name).held
    assert client.semaphore_status(f"{name}-slots").held == 0
    assert not client.session_status(session.id).open


def test_a_lease_the_broker_ended_is_lost_at_the_next_keepalive(broker, client, name):
    with client.session(ttl=1.5) as session:
        kept = session.acquire(f"{name}-kept")
        taken = session.acquire(f"{name}-taken")
        released = session.acquire(f"{name}-released")
        released.release()
        force_release(broker, f"{name}-taken")
        assert taken.lost.wait(3), "the keepalive did not report the ended lease"
        assert taken.lost_reason == "lease_lost"
        with pytest.raises(LeaseLost) as lost:
            taken.raise_if_lost()
        assert not isinstance(lost.value, SessionLost)
        assert not released.lost.is_set() and released.released
        time.sleep(0.6)  # another keepalive
        kept.raise_if_lost()
        assert session.status().leases == 1
    assert session.leases_released == 1 and kept.released


def test_a_lease_whose_end_was_told_in_a_lost_answer_is_still_found_lost(broker, client, name):
    with client.session(ttl=1.5) as session:
        kept = session.acquire(f"{name}-kept")
        taken = session.acquire(f"{name}-taken")
        force_release(broker, f"{name}-taken")
        # A keepalive of its own takes the one answer that names the ended
        # lease, as if the session's answer had been lost on its way: the
        # session's next keepalive renews one lease of the two it holds.
        assert client.keep_session(session.id, session.token).leases == 1
        assert taken.lost.wait(3), "the keepalive's short count went unnoticed"
        assert taken.lost_reason == "lease_lost"
        time.sleep(0.6)  # another keepalive
        kept.raise_if_lost()
        session.raise_if_lost()


def test_a_grant_that_waited_past_the_ttl_counts_from_a_fresh_keepalive(client, name):
    client.acquire(name, 2.0)  # not renewed: ends in 2 s
    with client.session(ttl=1.0) as session:
        started = time.monotonic()
        lease = session.acquire(name, wait=5)
        assert time.monotonic() - started > 1.5  # it waited for longer than the TTL
        # Counted from the acquire's send time, the deadline would be past.
        assert lease.remaining() > 0.5
        lease.raise_if_lost()
        assert client.status(name).fence == lease.fence


# -- losing ----------------------------------------------------------------------------


def test_a_session_closed_elsewhere_is_seen_lost_with_its_leases(client, name):
    with pytest.raises(SessionLost):
        with client.session(ttl=1.5) as session:
            leases = [session.acquire(f"{name}-a"), session.acquire_permit(f"{name}-s", 1)]
            assert client.close_session(session.id, session.token) == 2
            assert session.lost.wait(3), "no keepalive saw the session closed"
            assert session.state == "lost"
            for lease in leases:
                assert lease.lost.is_set() and lease.lost_reason == "session_lost"
                with pytest.raises(SessionLost):
                    lease.raise_if_lost()
            with pytest.raises(SessionLost):
                session.raise_if_lost()
            with pytest.raises(SessionLost):
                session.acquire(f"{name}-b")
    assert not any(lease.released for lease in leases)
    assert not client.status(f"{name}-a").held


def test_a_session_not_kept_in_time_is_lost_by_the_local_clock(make_broker, name):
    broker = make_broker()
    with Client(broker.url, timeout=5) as client:
        with pytest.raises(SessionLost):
            with client.session(ttl=1.5) as session:
                lease = session.acquire(name)
                broker.pause()  # keepalives get no answer
                try:
                    assert session.lost.wait(2.5), "the session outlived its local deadline"
                    assert lease.lost.is_set() and lease.lost_reason == "session_lost"
                finally:
                    broker.resume()
        # The broker's own clock ended the session and its lease too. The
        # lease was taken after the session opened, so it may outlast the
        # session by those milliseconds, and no longer.
        assert not client.session_status(session.id).open
        status = client.status(name)
        if status.held:
            assert status.expires_in < 0.5, status
            time.sleep(status.expires_in + 0.05)
        assert not client.status(name).held


def test_acquire_under_a_closed_session_raises_session_lost(client, name):
    grant = client.open_session(ttl=5)
    assert client.close_session(grant.id, grant.token) == 0
    with pytest.raises(SessionLost) as lost:
        client.acquire(name, session=grant.token)
    assert lost.value.code == "session_lost" and lost.value.status == 409
    assert isinstance(lost.value, LeaseLost)
    with pytest.raises(SessionLost):
        client.acquire_permit(name, 2, session=grant.token)
    with pytest.raises(SessionLost):
        client.acquire_all([name], session=grant.token)
    with pytest.raises(SessionLost):
        client.keep_session(grant.id, grant.token)
    # The helper refuses at once once closed.
    session = client.session(ttl=5).open()
    session.close()
    with pytest.raises(SessionLost):
        session.acquire(name)
    assert not client.status(name).held


def test_a_full_session_refuses_more_leases(make_broker, name):
    broker = make_broker({"LOCKBROKER_LOCKS_MAX_LEASES_PER_SESSION": "2"})
    with Client(broker.url, timeout=5) as client:
        with client.session(ttl=5) as session:
            session.acquire(f"{name}-1")
            session.acquire(f"{name}-2")
            with pytest.raises(SessionFull) as full:
                session.acquire(f"{name}-3")
            assert full.value.code == "session_full" and full.value.status == 409
            assert session.state == "open" and not client.status(f"{name}-3").held


# -- plain calls -----------------------------------------------------------------------


def test_the_plain_calls_answer_typed_records(client, name):
    grant = client.open_session(ttl=4, owner="etl", lock_delay=0.25)
    assert isinstance(grant, SessionGrant)
    assert (grant.ttl, grant.owner, grant.lock_delay) == (4.0, "etl", 0.25)
    assert len(grant.id) == 16 and grant.token.startswith(grant.id + ".")
    assert 0 < grant.validity <= grant.ttl

    lease = client.acquire(name, session=grant.token, owner="etl")
    kept = client.acquire(f"{name}-kept", session=grant.token)
    assert lease.session_id == grant.id and 0 < lease.ttl <= 4.0
    with pytest.raises(RuntimeError):
        lease.extend()  # renewed only by its session's keepalives
    lease.release()
    renewal = client.keep_session(grant.id, grant.token)
    assert isinstance(renewal, SessionRenewal)
    assert renewal.ended == (EndedLease(name, "lock"),) and renewal.leases == 1
    assert renewal.id == grant.id and renewal.ttl == 4.0

    status = client.session_status(grant.id)
    assert isinstance(status, SessionStatus)
    assert (status.open, status.owner, status.ttl, status.lock_delay, status.leases) == (
        True, "etl", 4.0, 0.25, 1)
    assert 0 < status.expires_in <= 4.0
    assert client.close_session(grant.id, grant.token) == 1
    assert not kept.released  # nothing tracks a lease taken with a bare token
    assert not client.status(f"{name}-kept").held
    closed = client.session_status(grant.id)
    assert not closed.open and closed.expires_in == 0


def test_ttl_or_lock_delay_with_a_session_is_refused_before_sending(client, name):
    grant = client.open_session(ttl=5)
    try:
        for call in (
            lambda: client.acquire(name, 10, session=grant.token),
            lambda: client.acquire(name, lock_delay=1, session=grant.token),
            lambda: client.acquire_permit(name, 2, ttl=10, session=grant.token),
            lambda: client.acquire_all([name], 10, session=grant.token),
        ):
            with pytest.raises(ValueError) as refused:
                call()
            assert grant.token not in str(refused.value)
        assert client.session_status(grant.id).leases == 0
        with pytest.raises(InvalidRequest) as bad:
            client.acquire(name, session=grant.id + ".nope")
        assert bad.value.field == "session"
    finally:
        client.close_session(grant.id, grant.token)


def test_the_token_never_shows(client, name, caplog):
    caplog.set_level(logging.DEBUG, logger="lockbroker")
    grant = client.open_session(ttl=5)
    assert grant.token not in repr(grant) and grant.token not in str(grant)
    options = LockOptions.check(ttl=ACQUIRE_TTL, wait=0, owner=None, lock_delay=None, fair=False,
                                session=grant.token)
    assert grant.token not in repr(options)
    client.close_session(grant.id, grant.token)
    with pytest.raises(SessionLost) as refused:
        client.acquire(name, session=grant.token)
    texts = [repr(refused.value), str(refused.value), repr(refused.value.details)]

    with pytest.raises(SessionLost) as lost_on_exit:
        with client.session(ttl=1.5) as session:
            lease = session.acquire(name)
            texts += [repr(session), str(session), repr(lease)]
            client.close_session(session.id, session.token)
            assert session.lost.wait(3)
            texts += [repr(session), str(session), repr(lease)]
            for check in (session.raise_if_lost, lease.raise_if_lost,
                          lambda: session.acquire(name)):
                with pytest.raises(SessionLost) as error:
                    check()
                texts += [repr(error.value), str(error.value)]
    texts += [repr(lost_on_exit.value), str(lost_on_exit.value)]
    texts += [record.getMessage() for record in caplog.records]
    for token in (grant.token, session.token):
        assert not [text for text in texts if token in text]
        assert not [text for text in texts if token.split(".")[1] in text]


def test_a_lost_session_is_a_lost_lease():
    lost = error_from_response(409, {"error": {"code": "session_lost", "message": "gone"}})
    full = error_from_response(409, {"error": {"code": "session_full", "message": "full"}})
    assert isinstance(lost, LeaseLost) and not isinstance(full, LeaseLost)


# -- asyncio ---------------------------------------------------------------------------


def test_async_session_keeps_and_closes_its_leases(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.session(ttl=1.5, owner="async-batch") as session:
            assert isinstance(session.lost, asyncio.Event)
            lock = await session.acquire(f"{name}-a")
            permit = await session.acquire_permit(f"{name}-s", 2)
            pair = await session.acquire_all([f"{name}-x", f"{name}-y"])
            assert lock.owner == "async-batch" and lock.session_id == session.id
            assert (await session.status()).leases == 4
            await asyncio.sleep(2.5)  # past the TTL: only keepalives kept them
            session.raise_if_lost()
            for lease in (lock, permit, *pair):
                lease.raise_if_lost()
            assert (await client.status(f"{name}-a")).fence == lock.fence
            assert await session.close() == 4
        assert all(lease.released for lease in (lock, permit, *pair))
        assert not (await client.status(f"{name}-a")).held
        assert (await client.semaphore_status(f"{name}-s")).held == 0

    run(scenario())


def test_async_session_closed_elsewhere_is_lost(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        with pytest.raises(SessionLost):
            async with client.session(ttl=1.5) as session:
                lease = await session.acquire(name)
                assert await client.close_session(session.id, session.token) == 1
                await asyncio.wait_for(session.lost.wait(), 3)
                assert lease.lost.is_set() and lease.lost_reason == "session_lost"
                assert session.state == "lost" and session.token not in repr(session)
                with pytest.raises(SessionLost):
                    await session.acquire(f"{name}-more")
        grant = await client.open_session(ttl=5)
        await client.close_session(grant.id, grant.token)
        with pytest.raises(SessionLost):
            await client.acquire(name, session=grant.token)
        with pytest.raises(SessionLost):
            await client.keep_session(grant.id, grant.token)
        assert not (await client.session_status(grant.id)).open

    run(scenario())


def test_async_session_finds_a_lease_whose_end_was_told_in_a_lost_answer(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.session(ttl=1.5) as session:
            kept = await session.acquire(f"{name}-kept")
            taken = await session.acquire(f"{name}-taken")
            force_release(broker, f"{name}-taken")
            # The answer that names the ended lease goes to another keepalive.
            assert (await client.keep_session(session.id, session.token)).leases == 1
            await asyncio.wait_for(taken.lost.wait(), 3)
            assert taken.lost_reason == "lease_lost"
            await asyncio.sleep(0.6)  # another keepalive
            kept.raise_if_lost()
            session.raise_if_lost()

    run(scenario())


def test_a_session_helper_belongs_to_its_kind_of_client(broker, client, name):
    async def scenario():
        async_client = AsyncClient(broker.url, timeout=5)
        async with async_client.session(ttl=5) as session:
            with pytest.raises(TypeError):
                client.acquire(name, session=session)  # type: ignore[arg-type]

    run(scenario())


# -- the keepalive loop on a fake clock ------------------------------------------------


class FakeSession(SessionBase):
    """A session opened at ``now`` for ``ttl`` seconds, with one lease."""

    def __init__(self, now: float, ttl: float) -> None:
        super().__init__(None, ttl=ttl, owner="w", lock_delay=None)
        self.lost = threading.Event()
        ms = round(ttl * 1000)
        self._opened({"id": "0123456789abcdef", "token": "0123456789abcdef." + "0" * 32,
                      "ttl_ms": ms, "expires_at_ms": 0, "validity_ms": ms,
                      "lock_delay_ms": 0, "owner": "w"}, now)
        self.lease = _FakeLease()
        self._join([self.lease])


class _FakeLease:
    """Just what a session needs of a lease."""

    def __init__(self) -> None:
        self.name, self._kind, self.ttl = "job", "locks", 0.0
        self.deadline, self.expires_at_ms = 0.0, 0
        self.released = self.releasing = False
        self.lost = threading.Event()
        self.lost_reason = None
        self._session = None

    def _mark_lost(self, reason: str) -> None:
        if not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()


def kept(ttl_ms: int) -> Dict[str, Any]:
    """A keepalive's answer that renewed the session for ``ttl_ms``."""
    return {"id": "0123456789abcdef", "ttl_ms": ttl_ms, "expires_at_ms": 0,
            "validity_ms": ttl_ms, "leases": 1, "ended": []}


def test_keepalives_go_every_third_of_the_ttl_from_each_send():
    session = FakeSession(100.0, 3.0)
    loop = Keepalives(session, timeout=10.0, opened_at=100.0)
    assert loop.next_step(100.0) == (Action.WAIT, 1.0, 0.0, 0.0)
    step = loop.next_step(101.0)
    assert step.action is Action.EXTEND and step.timeout == 2.0  # never past the deadline
    loop.kept(kept(3000))  # answered later; counts from the send
    assert session.deadline == 104.0 and session.lease.deadline == 104.0
    assert loop.next_step(101.5).action is Action.WAIT and loop.next_at == 102.0


def test_keepalives_retry_an_unreachable_broker_until_the_deadline_then_lose_it():
    session = FakeSession(100.0, 3.0)
    loop = Keepalives(session, timeout=10.0, opened_at=100.0)
    now = 101.0
    while True:
        step = loop.next_step(now)
        if step.action is Action.STOP:
            break
        if step.action is Action.WAIT:
            now += step.delay
            continue
        now += step.timeout  # no answer within the timeout
        loop.failed(BrokerUnavailable("timed out", code="transport"), now)
    assert now == pytest.approx(103.0)
    assert session.lost.is_set() and session.state == "lost"
    assert session.lease.lost_reason == "session_lost"


def test_keepalives_lose_the_session_at_once_when_the_broker_says_so():
    session = FakeSession(100.0, 3.0)
    loop = Keepalives(session, timeout=10.0, opened_at=100.0)
    assert loop.next_step(101.0).action is Action.EXTEND
    loop.failed(SessionLost("not open", code="session_lost"), 101.01)
    assert session.lost.is_set() and session.lease.lost_reason == "session_lost"
    assert loop.next_step(101.02).action is Action.STOP


def test_a_lease_joined_after_a_keepalive_was_sent_keeps_its_own_deadline():
    session = FakeSession(100.0, 3.0)
    loop = Keepalives(session, timeout=10.0, opened_at=100.0)
    assert loop.next_step(101.0).action is Action.EXTEND
    late = _FakeLease()
    late.deadline = 103.5
    session._join([late])  # granted while the keepalive was on its way
    loop.kept(kept(3000))
    assert session.lease.deadline == 104.0 and late.deadline == 103.5
