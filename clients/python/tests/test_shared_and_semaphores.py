"""Shared locks and semaphores: the blocking and the asyncio client against a real
broker and Redis, and the requests they send (checked without a broker)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from lockbroker import (
    AsyncClient,
    AsyncPermit,
    Client,
    InvalidRequest,
    LeaseLost,
    LimitConflict,
    LockBusy,
    LockStatus,
    Permit,
    SemaphoreStatus,
)
from lockbroker._options import LockOptions
from lockbroker._retry import AcquireAttempts


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def holders_of(error_or_status):
    """``(owner, fence, mode)`` of every holder listed, in fence order."""
    return sorted(((h.owner, h.fence, h.mode) for h in error_or_status.holders),
                  key=lambda holder: holder[1])


# -- shared locks ------------------------------------------------------------------


def test_shared_leases_coexist_and_an_exclusive_acquire_gets_busy(client, name):
    with client.lock(name, ttl=5, owner="reader-1", shared=True) as first:
        second = client.acquire(name, ttl=5, owner="reader-2", shared=True)
        assert first.mode == second.mode == "shared"
        assert second.fence > first.fence
        assert first.token != second.token and second.token not in repr(second)

        status = client.status(name)
        assert status.held and status.mode == "shared" and status.owner is None
        assert status.holder_count == 2 and status.fence == second.fence
        assert holders_of(status) == [
            ("reader-1", first.fence, "shared"),
            ("reader-2", second.fence, "shared"),
        ]
        assert 0 < status.expires_in <= 5

        with pytest.raises(LockBusy) as busy:
            client.acquire(name, ttl=5, owner="writer")
        error = busy.value
        assert error.status == 423 and error.code == "lock_busy" and error.limit is None
        assert holders_of(error) == [
            ("reader-1", first.fence, "shared"),
            ("reader-2", second.fence, "shared"),
        ]
        assert error.fence in (first.fence, second.fence)
        assert 0 < error.available_in <= 5

        assert second.release() == second.fence
        assert client.status(name).holder_count == 1
    assert first.released and not client.status(name).held


def test_an_exclusive_lease_keeps_shared_ones_out(client, name):
    with client.lock(name, ttl=5, owner="writer") as lease:
        assert lease.mode == "exclusive"
        status = client.status(name)
        assert status.mode == "exclusive" and status.owner == "writer"
        assert status.holder_count == 1 and holders_of(status) == [
            ("writer", lease.fence, "exclusive")
        ]
        with pytest.raises(LockBusy) as busy:
            client.acquire(name, ttl=5, shared=True)
        assert holders_of(busy.value) == [("writer", lease.fence, "exclusive")]
    shared = client.acquire(name, ttl=5, shared=True)
    assert shared.fence > lease.fence
    shared.release()


def test_a_waiting_exclusive_acquire_goes_before_newer_shared_ones(client, name):
    first = client.acquire(name, ttl=10, shared=True)
    second = client.acquire(name, ttl=10, shared=True)
    granted = {}

    def writer():
        try:
            granted["lease"] = client.acquire(name, ttl=5, wait=8, owner="writer")
        except Exception as error:  # reported below, in the test's thread
            granted["error"] = error

    waiter = threading.Thread(target=writer)
    waiter.start()
    try:
        time.sleep(0.5)  # the writer is queued by now
        # A shared request without a wait finds the writer queued: busy, though
        # only shared leases hold the lock.
        with pytest.raises(LockBusy):
            client.acquire(name, ttl=5, shared=True)
        assert waiter.is_alive()
        first.release()
        time.sleep(0.2)
        assert waiter.is_alive()  # one shared lease still holds the lock
        second.release()
    finally:
        waiter.join(10)
    assert "error" not in granted, granted.get("error")
    lease = granted["lease"]
    assert lease.mode == "exclusive" and lease.fence > second.fence
    lease.release()


def test_the_renewer_keeps_a_shared_lease_past_its_ttl(client, name):
    with client.lock(name, ttl=1.2, shared=True) as lease:
        time.sleep(3)
        assert not lease.lost.is_set()
        assert lease.remaining() > 0.3
        status = client.status(name)
        assert status.held and status.mode == "shared"
        assert holders_of(status) == [(lease.owner, lease.fence, "shared")]
        with pytest.raises(LockBusy):
            client.acquire(name, ttl=1)
    assert not client.status(name).held


# -- semaphores --------------------------------------------------------------------


def test_a_semaphore_grants_up_to_its_limit_then_is_busy_with_the_holders(client, name):
    first = client.acquire_permit(name, 2, ttl=5, owner="worker-1")
    with client.semaphore(name, limit=2, ttl=5, owner="worker-2") as second:
        assert isinstance(first, Permit) and isinstance(second, Permit)
        assert (first.mode, first.limit, second.mode, second.limit) == ("permit", 2, "permit", 2)
        assert second.fence > first.fence and second.token not in repr(second)

        status = client.semaphore_status(name)
        assert (status.limit, status.held, status.available) == (2, 2, 0)
        assert status.fence == second.fence and status.available_in > 0
        assert holders_of(status) == [
            ("worker-1", first.fence, "permit"),
            ("worker-2", second.fence, "permit"),
        ]

        with pytest.raises(LockBusy) as busy:
            client.acquire_permit(name, 2, ttl=5, owner="worker-3")
        error = busy.value
        assert error.status == 423 and error.code == "lock_busy" and error.limit == 2
        assert holders_of(error) == [
            ("worker-1", first.fence, "permit"),
            ("worker-2", second.fence, "permit"),
        ]
        assert error.fence in (first.fence, second.fence)
        assert 0 < error.available_in <= 5

        assert first.release() == first.fence
        status = client.semaphore_status(name)
        assert (status.held, status.available, status.available_in) == (1, 1, 0)
    assert second.released
    status = client.semaphore_status(name)
    assert status.held == 0 and status.limit is None and status.holders == ()


def test_another_limit_while_permits_are_held_raises_limit_conflict(client, name):
    permit = client.acquire_permit(name, 3, ttl=5)
    with pytest.raises(LimitConflict) as conflict:
        client.acquire_permit(name, 2, ttl=5)
    error = conflict.value
    assert error.status == 409 and error.code == "limit_conflict" and error.limit == 3
    with pytest.raises(LimitConflict):
        with client.semaphore(name, limit=4, ttl=5):
            pytest.fail("the block ran without a permit")
    assert client.semaphore_status(name).held == 1
    permit.release()
    # With no permit held the semaphore takes the next limit asked for.
    with client.semaphore(name, limit=2, ttl=5) as other:
        assert other.limit == 2 and client.semaphore_status(name).limit == 2


def test_the_renewer_keeps_a_permit_past_its_ttl(client, name):
    with client.semaphore(name, limit=1, ttl=1.2) as permit:
        time.sleep(3)
        assert not permit.lost.is_set()
        assert permit.remaining() > 0.3
        status = client.semaphore_status(name)
        assert status.held == 1 and status.fence == permit.fence
        assert [holder.fence for holder in status.holders] == [permit.fence]
        with pytest.raises(LockBusy):
            client.acquire_permit(name, 1, ttl=1)
    assert permit.released and client.semaphore_status(name).held == 0


def test_release_frees_a_permit(client, name):
    permit = client.acquire_permit(name, 1, ttl=10)
    with pytest.raises(LockBusy):
        client.acquire_permit(name, 1, ttl=5)
    assert permit.release() == permit.fence and permit.released
    assert client.semaphore_status(name).held == 0

    again = client.acquire_permit(name, 1, ttl=5)
    assert again.fence > permit.fence
    assert client.release_permit(name, again.token) == again.fence

    with client.semaphore(name, limit=1, ttl=0.6) as managed:
        managed.release()
        time.sleep(0.7)  # past several renewal times and the TTL
        assert not managed.lost.is_set()
        assert client.semaphore_status(name).held == 0
    assert managed.released

    expired = client.acquire_permit(name, 1, ttl=0.3)
    time.sleep(0.5)
    with pytest.raises(LeaseLost) as lost:
        expired.release()
    assert lost.value.status == 409 and expired.lost.is_set()


def test_a_waiting_acquire_gets_the_permit_once_one_is_released(client, name):
    holder = client.acquire_permit(name, 1, ttl=10)
    releaser = threading.Timer(0.5, holder.release)
    releaser.start()
    started = time.monotonic()
    try:
        permit = client.acquire_permit(name, 1, ttl=5, wait=5)
    finally:
        releaser.join()
    assert 0.3 < time.monotonic() - started < 4
    assert permit.fence > holder.fence
    permit.release()


def test_extend_permit_replaces_the_remaining_ttl(client, name):
    permit = client.acquire_permit(name, 2, ttl=1)
    renewal = client.extend_permit(name, permit.token, 4)
    assert renewal.fence == permit.fence and renewal.ttl == 4
    assert client.semaphore_status(name).holders[0].expires_in > 2
    assert permit.extend(3) is permit and permit.remaining() > 2
    permit.release()


def test_a_permit_is_lost_when_the_broker_cannot_be_reached_until_expiry(make_broker, name):
    broker = make_broker()
    client = Client(broker.url, timeout=0.3)
    with pytest.raises(LeaseLost):
        with client.semaphore(name, limit=2, ttl=1.5) as permit:
            broker.pause()
            assert permit.lost.wait(3), "lost was not set when the permit ran out"
            assert permit.lost_reason == "expired"
            with pytest.raises(LeaseLost):
                permit.extend()  # lost: refused without asking the broker
            time.sleep(0.3)  # past the broker's own expiry
            broker.resume()
    assert client.semaphore_status(name).held == 0


def test_a_token_works_only_on_its_own_routes(client, name):
    lease = client.acquire(name, ttl=5, shared=True)
    permit = client.acquire_permit(name + "-sem", 1, ttl=5)
    with pytest.raises(InvalidRequest) as wrong:
        client.extend_permit(name, lease.token, 5)
    assert wrong.value.status == 400 and wrong.value.field == "token"
    with pytest.raises(InvalidRequest) as wrong:
        client.release(permit.name, permit.token)
    assert wrong.value.field == "token"
    lease.release()
    permit.release()


def test_a_limit_above_the_maximum_is_refused(client, name):
    with pytest.raises(InvalidRequest) as bad:
        client.acquire_permit(name, 10001, ttl=5)
    assert bad.value.status == 400 and bad.value.field == "limit"


# -- the asyncio client ------------------------------------------------------------


def test_async_shared_leases_coexist_and_an_exclusive_acquire_gets_busy(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.lock(name, ttl=5, owner="reader-1", shared=True) as first:
            second = await client.acquire(name, ttl=5, owner="reader-2", shared=True)
            assert first.mode == second.mode == "shared" and second.fence > first.fence
            with pytest.raises(LockBusy) as busy:
                await client.acquire(name, ttl=5)
            assert holders_of(busy.value) == [
                ("reader-1", first.fence, "shared"),
                ("reader-2", second.fence, "shared"),
            ]
            await second.release()
        assert not (await client.status(name)).held

    run(scenario())


def test_async_semaphore_renews_its_permit_and_releases_it(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.semaphore(name, limit=1, ttl=1, owner="async-job") as permit:
            assert isinstance(permit, AsyncPermit) and permit.limit == 1
            assert isinstance(permit.lost, asyncio.Event)
            await asyncio.sleep(2.5)
            assert not permit.lost.is_set()
            status = await client.semaphore_status(name)
            assert (status.limit, status.held, status.fence) == (1, 1, permit.fence)
            with pytest.raises(LockBusy) as busy:
                await client.acquire_permit(name, 1, ttl=1)
            assert busy.value.limit == 1
            assert holders_of(busy.value) == [("async-job", permit.fence, "permit")]
            with pytest.raises(LimitConflict) as conflict:
                await client.acquire_permit(name, 5, ttl=1)
            assert conflict.value.limit == 1
        assert permit.released
        assert (await client.semaphore_status(name)).held == 0

        single = await client.acquire_permit(name, 1, ttl=1)
        assert (await client.extend_permit(name, single.token, 3)).fence == single.fence
        assert await client.release_permit(name, single.token) == single.fence

    run(scenario())


def test_async_an_exclusive_lease_keeps_shared_ones_out(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.lock(name, ttl=5, owner="writer") as lease:
            assert lease.mode == "exclusive"
            status = await client.status(name)
            assert status.mode == "exclusive" and status.owner == "writer"
            assert holders_of(status) == [("writer", lease.fence, "exclusive")]
            with pytest.raises(LockBusy) as busy:
                await client.acquire(name, ttl=5, shared=True)
            assert holders_of(busy.value) == [("writer", lease.fence, "exclusive")]
        shared = await client.acquire(name, ttl=5, shared=True)
        assert shared.mode == "shared" and shared.fence > lease.fence
        await shared.release()

    run(scenario())


def test_async_a_waiting_exclusive_acquire_goes_before_newer_shared_ones(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        first = await client.acquire(name, ttl=10, shared=True)
        second = await client.acquire(name, ttl=10, shared=True)
        writer = asyncio.ensure_future(client.acquire(name, ttl=5, wait=8, owner="writer"))
        await asyncio.sleep(0.5)  # the writer is queued by now
        with pytest.raises(LockBusy):
            await client.acquire(name, ttl=5, shared=True)
        assert not writer.done()
        await first.release()
        await asyncio.sleep(0.2)
        assert not writer.done()  # one shared lease still holds the lock
        await second.release()
        lease = await asyncio.wait_for(writer, 10)
        assert lease.mode == "exclusive" and lease.fence > second.fence
        await lease.release()

    run(scenario())


def test_async_the_renewer_keeps_a_shared_lease_past_its_ttl(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.lock(name, ttl=1.2, shared=True) as lease:
            await asyncio.sleep(3)
            assert not lease.lost.is_set() and lease.remaining() > 0.3
            status = await client.status(name)
            assert status.held and status.mode == "shared"
            assert holders_of(status) == [(lease.owner, lease.fence, "shared")]
            with pytest.raises(LockBusy):
                await client.acquire(name, ttl=1)
        assert not (await client.status(name)).held

    run(scenario())


def test_async_a_semaphore_grants_up_to_its_limit_then_is_busy_with_the_holders(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        first = await client.acquire_permit(name, 2, ttl=5, owner="worker-1")
        async with client.semaphore(name, limit=2, ttl=5, owner="worker-2") as second:
            assert isinstance(first, AsyncPermit) and isinstance(second, AsyncPermit)
            assert (first.mode, first.limit, second.mode, second.limit) == (
                "permit", 2, "permit", 2)
            assert second.fence > first.fence and second.token not in repr(second)

            status = await client.semaphore_status(name)
            assert (status.limit, status.held, status.available) == (2, 2, 0)
            assert status.fence == second.fence and status.available_in > 0
            assert holders_of(status) == [
                ("worker-1", first.fence, "permit"),
                ("worker-2", second.fence, "permit"),
            ]
            with pytest.raises(LockBusy) as busy:
                await client.acquire_permit(name, 2, ttl=5, owner="worker-3")
            error = busy.value
            assert error.status == 423 and error.code == "lock_busy" and error.limit == 2
            assert holders_of(error) == holders_of(status)
            assert 0 < error.available_in <= 5

            assert await first.release() == first.fence
            status = await client.semaphore_status(name)
            assert (status.held, status.available, status.available_in) == (1, 1, 0)
        assert second.released
        status = await client.semaphore_status(name)
        assert status.held == 0 and status.limit is None and status.holders == ()

    run(scenario())


def test_async_another_limit_while_permits_are_held_raises_limit_conflict(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        permit = await client.acquire_permit(name, 3, ttl=5)
        with pytest.raises(LimitConflict) as conflict:
            await client.acquire_permit(name, 2, ttl=5)
        error = conflict.value
        assert error.status == 409 and error.code == "limit_conflict" and error.limit == 3
        with pytest.raises(LimitConflict):
            async with client.semaphore(name, limit=4, ttl=5):
                pytest.fail("the block ran without a permit")
        assert (await client.semaphore_status(name)).held == 1
        await permit.release()
        async with client.semaphore(name, limit=2, ttl=5) as other:
            assert other.limit == 2 and (await client.semaphore_status(name)).limit == 2

    run(scenario())


def test_async_release_frees_a_permit(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        permit = await client.acquire_permit(name, 1, ttl=10)
        with pytest.raises(LockBusy):
            await client.acquire_permit(name, 1, ttl=5)
        assert await permit.release() == permit.fence and permit.released
        assert (await client.semaphore_status(name)).held == 0

        again = await client.acquire_permit(name, 1, ttl=5)
        assert again.fence > permit.fence
        assert await client.release_permit(name, again.token) == again.fence

        async with client.semaphore(name, limit=1, ttl=0.6) as managed:
            await managed.release()
            await asyncio.sleep(0.7)  # past several renewal times and the TTL
            assert not managed.lost.is_set()
            assert (await client.semaphore_status(name)).held == 0
        assert managed.released

        expired = await client.acquire_permit(name, 1, ttl=0.3)
        await asyncio.sleep(0.5)
        with pytest.raises(LeaseLost) as lost:
            await expired.release()
        assert lost.value.status == 409 and expired.lost.is_set()

    run(scenario())


def test_async_a_waiting_acquire_gets_the_permit_once_one_is_released(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        holder = await client.acquire_permit(name, 1, ttl=10)

        async def release_soon():
            await asyncio.sleep(0.5)
            await holder.release()

        releaser = asyncio.ensure_future(release_soon())
        started = time.monotonic()
        permit = await client.acquire_permit(name, 1, ttl=5, wait=5)
        await releaser
        assert 0.3 < time.monotonic() - started < 4
        assert permit.fence > holder.fence
        assert await permit.extend(3) is permit and permit.remaining() > 2
        await permit.release()

    run(scenario())


def test_async_a_permit_is_lost_when_the_broker_cannot_be_reached_until_expiry(
    make_broker, name
):
    broker = make_broker()

    async def scenario():
        client = AsyncClient(broker.url, timeout=0.3)
        with pytest.raises(LeaseLost):
            async with client.semaphore(name, limit=2, ttl=1.5) as permit:
                broker.pause()
                await asyncio.wait_for(permit.lost.wait(), 3)
                assert permit.lost_reason == "expired"
                with pytest.raises(LeaseLost):
                    await permit.extend()  # lost: refused without asking the broker
                await asyncio.sleep(0.3)  # past the broker's own expiry
                broker.resume()
        assert (await client.semaphore_status(name)).held == 0

    run(scenario())


def test_async_a_token_works_only_on_its_own_routes(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        lease = await client.acquire(name, ttl=5, shared=True)
        permit = await client.acquire_permit(name + "-sem", 1, ttl=5)
        with pytest.raises(InvalidRequest) as wrong:
            await client.extend_permit(name, lease.token, 5)
        assert wrong.value.status == 400 and wrong.value.field == "token"
        with pytest.raises(InvalidRequest) as wrong:
            await client.release(permit.name, permit.token)
        assert wrong.value.field == "token"
        await lease.release()
        await permit.release()

    run(scenario())


def test_async_a_limit_above_the_maximum_is_refused(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        with pytest.raises(InvalidRequest) as bad:
            await client.acquire_permit(name, 10001, ttl=5)
        assert bad.value.status == 400 and bad.value.field == "limit"

    run(scenario())


# -- without a broker --------------------------------------------------------------


def _first_request(name, **options):
    defaults = dict(ttl=5, wait=0, owner="o", lock_delay=None, fair=False)
    attempts = AcquireAttempts(name, LockOptions.check(**{**defaults, **options}), "r", 1.0)
    (method, path, body), _timeout = attempts.next_request()
    return method, path, body


def test_acquire_requests_name_the_mode_and_the_limit():
    method, path, body = _first_request("jobs")
    assert (method, path) == ("POST", "/v1/locks/jobs/acquire")
    assert "mode" not in body and "limit" not in body  # brokers without them accept it
    _, path, body = _first_request("jobs", shared=True)
    assert path == "/v1/locks/jobs/acquire" and body["mode"] == "shared"
    _, path, body = _first_request("a/b", limit=3)
    assert path == "/v1/semaphores/a%2Fb/acquire"
    assert body["limit"] == 3 and "mode" not in body


def test_limit_must_be_a_whole_number_of_at_least_one():
    client = Client("http://127.0.0.1:9", timeout=1)
    for limit, error in ((0, ValueError), (-1, ValueError), (True, TypeError),
                         (2.5, TypeError), ("3", TypeError), (None, TypeError)):
        with pytest.raises(error):
            client.semaphore("jobs", limit=limit)
        with pytest.raises(error):
            client.acquire_permit("jobs", limit)
        with pytest.raises(error):
            AsyncClient("http://127.0.0.1:9").semaphore("jobs", limit)
    semaphore = client.semaphore("jobs", limit=3, ttl=5)
    assert semaphore.limit == 3 and semaphore.options.kind == "semaphores"


def test_status_answers_parse_with_and_without_holders():
    old = LockStatus.from_json({"name": "a", "held": True, "owner": "w", "fence": 4,
                                "expires_in_ms": 900, "available_in_ms": 900})
    assert (old.mode, old.holder_count, old.holders) == ("exclusive", 1, ())
    free = LockStatus.from_json({"name": "a", "held": False, "owner": None, "fence": 4,
                                 "expires_in_ms": 0, "available_in_ms": 0})
    assert (free.mode, free.holder_count) == (None, 0)

    shared = LockStatus.from_json({
        "name": "a", "held": True, "owner": None, "fence": 9, "mode": "shared",
        "expires_in_ms": 3000, "available_in_ms": 3000, "holder_count": 150,
        "holders": [{"owner": "r", "fence": 8, "mode": "shared",
                     "expires_in_ms": 2000, "available_in_ms": 2000}],
    })
    assert (shared.mode, shared.holder_count, shared.owner) == ("shared", 150, None)
    assert [(h.owner, h.fence, h.mode, h.expires_in) for h in shared.holders] == [
        ("r", 8, "shared", 2.0)
    ]

    semaphore = SemaphoreStatus.from_json({
        "name": "s", "limit": 3, "held": 1, "available": 2, "fence": 12,
        "holders": [{"owner": None, "fence": 12, "mode": "permit",
                     "expires_in_ms": 500, "available_in_ms": 500}],
        "available_in_ms": 0,
    })
    assert (semaphore.limit, semaphore.held, semaphore.available) == (3, 1, 2)
    assert (semaphore.fence, semaphore.available_in) == (12, 0.0)
    assert semaphore.holders[0].mode == "permit"
    idle = SemaphoreStatus.from_json({"name": "s", "limit": None, "held": 0, "available": None,
                                      "fence": 12, "holders": [], "available_in_ms": 0})
    assert (idle.limit, idle.held, idle.available, idle.holders) == (None, 0, None, ())


def test_a_semaphore_can_be_entered_only_once():
    client = Client("http://127.0.0.1:9", timeout=1)
    semaphore = client.semaphore("jobs", limit=2)
    semaphore.lease = object()  # as after a first entry
    with pytest.raises(RuntimeError, match=r"client\.semaphore\(\)"):
        semaphore.__enter__()
