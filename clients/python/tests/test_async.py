"""The asyncio twin against a real broker and Redis."""

from __future__ import annotations

import asyncio
import inspect
import time

import pytest

from conftest import free_port, lease_key
from lockbroker import (
    AsyncClient,
    BrokerUnavailable,
    InvalidRequest,
    LeaseLost,
    LockBusy,
    MaxHoldExceeded,
    Renewal,
)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_async_lock_holds_and_releases(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.lock(name, ttl=5, owner="async-job") as lease:
            assert lease.fence > 0 and lease.token not in repr(lease)
            status = await client.status(name)
            assert status.held and status.owner == "async-job"
            assert isinstance(lease.lost, asyncio.Event) and not lease.lost.is_set()
        assert not (await client.status(name)).held
        assert lease.released and lease.release_acknowledged is None

    run(scenario())


def test_async_renewer_keeps_the_lease_past_its_ttl(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.lock(name, ttl=1) as lease:
            await asyncio.sleep(2.5)
            assert not lease.lost.is_set()
            assert (await client.status(name)).fence == lease.fence
            with pytest.raises(LockBusy) as busy:
                await client.acquire(name, ttl=1)
            assert busy.value.fence == lease.fence

    run(scenario())


def test_async_lost_is_set_when_the_lease_disappears(broker, redis, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        with pytest.raises(LeaseLost):
            async with client.lock(name, ttl=1.5) as lease:
                redis.command("DEL", lease_key(name))
                await asyncio.wait_for(lease.lost.wait(), 3)
                assert lease.lost_reason == "lease_lost"

    run(scenario())


def test_async_lost_is_set_when_the_broker_cannot_be_reached(make_broker, name):
    broker = make_broker()

    async def scenario():
        client = AsyncClient(broker.url, timeout=0.3)
        with pytest.raises(LeaseLost):
            async with client.lock(name, ttl=1.5) as lease:
                broker.pause()
                await asyncio.wait_for(lease.lost.wait(), 3)
                assert lease.lost_reason == "expired"
                with pytest.raises(LeaseLost):
                    await lease.extend()
                await asyncio.sleep(0.3)
                broker.resume()

    run(scenario())


def test_async_max_hold_ends_the_lease(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        with pytest.raises(LeaseLost):
            async with client.lock(name, ttl=1, max_hold=1.6) as lease:
                started = time.monotonic()
                await asyncio.wait_for(lease.lost.wait(), 4)
                assert 1.2 < time.monotonic() - started < 2.2
                await asyncio.sleep(0.3)  # past the broker's own expiry too

    run(scenario())


def test_async_wait_gets_the_lock_after_release(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        first = await client.acquire(name, ttl=10)

        async def release_soon():
            await asyncio.sleep(0.5)
            await first.release()

        releaser = asyncio.ensure_future(release_soon())
        second = await client.acquire(name, ttl=5, wait=5)
        await releaser
        assert second.fence > first.fence
        await second.release()

    run(scenario())


def test_async_errors(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        with pytest.raises(InvalidRequest):
            await client.acquire("no spaces", ttl=1)
        lease = await client.acquire(name, ttl=0.3)
        await asyncio.sleep(0.5)
        with pytest.raises(LeaseLost):
            await lease.release()
        down = AsyncClient("http://127.0.0.1:9", timeout=1)
        with pytest.raises(BrokerUnavailable):
            await down.acquire(name, ttl=1)

    run(scenario())


def test_async_renewer_extends_up_to_the_brokers_max_hold(make_broker, name):
    broker = make_broker({"LOCKBROKER_LOCKS_MAX_HOLD_MS": "4500"})

    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        with pytest.raises(LeaseLost):
            async with client.lock(name, ttl=3) as lease:
                started = time.monotonic()
                await asyncio.sleep(4.25)
                assert not lease.lost.is_set(), "the lease ended before the broker's max hold"
                assert (await client.status(name)).fence == lease.fence
                await asyncio.wait_for(lease.lost.wait(), 1.5)
                assert time.monotonic() - started < 4.6
                await asyncio.sleep(0.3)
        assert not (await client.status(name)).held

    run(scenario())


def test_async_exit_raises_lease_lost_after_the_renewer_failed(broker, name, monkeypatch):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)

        async def broken(*args, **kwargs):
            raise RuntimeError("renewer bug")

        monkeypatch.setattr(client, "_extend", broken)
        with pytest.raises(LeaseLost, match="renewer_failed"):
            async with client.lock(name, ttl=0.6) as lease:
                await asyncio.wait_for(lease.lost.wait(), 2)
                assert (await client.status(name)).held
        assert lease.released and not (await client.status(name)).held

    run(scenario())


def test_async_exit_raises_lease_lost_after_the_local_deadline(broker, name, monkeypatch):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        holder = await client.acquire(name, ttl=10)

        async def release_soon():
            await asyncio.sleep(1.0)
            await holder.release()

        async def unreachable(*args, **kwargs):
            raise BrokerUnavailable("cut", code="transport")

        monkeypatch.setattr(client, "_extend", unreachable)
        releaser = asyncio.ensure_future(release_soon())
        with pytest.raises(LeaseLost, match="expired"):
            async with client.lock(name, ttl=1.5, wait=5) as lease:
                await asyncio.wait_for(lease.lost.wait(), 2)
                assert lease.lost_reason == "expired"
                assert (await client.status(name)).held
        await releaser
        assert lease.released and not (await client.status(name)).held

    run(scenario())


def test_async_wait_longer_than_the_ttl_keeps_and_renews_the_lease(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        holder = await client.acquire(name, ttl=10)

        async def release_soon():
            await asyncio.sleep(2.5)
            await holder.release()

        releaser = asyncio.ensure_future(release_soon())
        started = time.monotonic()
        async with client.lock(name, ttl=1, wait=10, max_hold=3) as lease:
            assert time.monotonic() - started > 2
            assert not lease.lost.is_set() and lease.remaining() > 0.5
            await asyncio.sleep(2)
            assert not lease.lost.is_set(), lease.lost_reason
            status = await client.status(name)
            assert status.held and status.fence == lease.fence
        await releaser
        assert not (await client.status(name)).held

    run(scenario())


def test_async_release_inside_the_block_stops_renewing(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.lock(name, ttl=0.6) as lease:
            await lease.release()
            await asyncio.sleep(0.7)
            assert not lease.lost.is_set()
        assert lease.released and not (await client.status(name)).held

    run(scenario())


def test_async_fences_grow_from_one_lease_to_the_next(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        fences = []
        for _ in range(3):
            async with client.lock(name, ttl=5) as lease:
                fences.append(lease.fence)
        assert fences == sorted(set(fences))

    run(scenario())


def test_async_a_second_acquirer_gets_lock_busy_with_the_holder(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.lock(name, ttl=5, owner="first") as lease:
            with pytest.raises(LockBusy) as busy:
                await client.acquire(name, ttl=5, owner="second")
        error = busy.value
        assert error.status == 423 and error.code == "lock_busy"
        assert error.owner == "first" and error.fence == lease.fence
        assert 0 < error.available_in <= 5 and 0 < error.expires_in <= 5
        assert error.retry_after is not None and error.retry_after >= 1
        assert [(h.owner, h.fence, h.mode) for h in error.holders] == [
            ("first", lease.fence, "exclusive")
        ]

    run(scenario())


def test_async_wait_gives_up_with_lock_busy_at_its_deadline(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        holder = await client.acquire(name, ttl=10)
        started = time.monotonic()
        with pytest.raises(LockBusy):
            await client.acquire(name, ttl=5, wait=0.6)
        assert 0.5 < time.monotonic() - started < 3
        await holder.release()

    run(scenario())


def test_async_an_exception_in_the_body_wins_over_lease_lost(broker, redis, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        with pytest.raises(ValueError, match="work failed"):
            async with client.lock(name, ttl=1.5) as lease:
                redis.command("DEL", lease_key(name))
                await asyncio.wait_for(lease.lost.wait(), 3)
                raise ValueError("work failed")

    run(scenario())


def test_async_the_brokers_max_hold_refuses_extend_and_ends_the_lease(make_broker, name):
    broker = make_broker({"LOCKBROKER_LOCKS_MAX_HOLD_MS": "1500"})

    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        lease = await client.acquire(name, ttl=1)
        await asyncio.sleep(0.7)
        with pytest.raises(MaxHoldExceeded) as refused:
            await lease.extend(1)
        assert refused.value.status == 409 and 0 < refused.value.expires_in <= 1
        assert not lease.lost.is_set()  # refused, not lost: the lease runs on
        await lease.release()

        with pytest.raises(LeaseLost):
            async with client.lock(name, ttl=1) as managed:
                await asyncio.wait_for(managed.lost.wait(), 3)
                assert managed.lost_reason == "expired"
                await asyncio.sleep(0.3)  # past the broker's own expiry too

    run(scenario())


def test_async_release_after_expiry_raises_lease_lost_and_sets_lost(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        lease = await client.acquire(name, ttl=0.3)
        await asyncio.sleep(0.5)
        with pytest.raises(LeaseLost) as lost:
            await lease.release()
        assert lost.value.status == 409 and "duplicated" in lost.value.message
        assert lease.lost.is_set() and lease.lost_reason == "lease_lost"
        with pytest.raises(LeaseLost):
            await lease.extend()  # refused without asking the broker
        assert not lease.released

    run(scenario())


def test_async_release_acknowledged_says_whether_a_replica_acknowledged(
    make_redis, make_broker, name
):
    primary = make_redis()
    replica = make_redis(replica_of=primary)
    broker = make_broker({"LOCKBROKER_REDIS_MIN_REPLICAS_ACKED": "1"}, redis_server=primary)

    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.lock(name, ttl=5) as lease:
            pass
        assert lease.released and lease.release_acknowledged is True
        held = await client.acquire(name + "-2", ttl=30)
        replica.pause()
        try:
            assert await held.release() == held.fence
        finally:
            replica.resume()
        assert held.released and held.release_acknowledged is False
        assert not (await client.status(held.name)).held

    run(scenario())


def test_async_lock_delay_keeps_an_expired_lock_unavailable(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        await client.acquire(name, ttl=0.2, lock_delay=1.0)
        await asyncio.sleep(0.4)  # expired, not released: the lock-delay applies
        status = await client.status(name)
        assert not status.held and 0.3 < status.available_in <= 1.0
        with pytest.raises(LockBusy):
            await client.acquire(name, ttl=1)
        lease = await client.acquire(name, ttl=1, wait=2)
        await lease.release()

    run(scenario())


def test_async_extend_replaces_the_remaining_ttl(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        lease = await client.acquire(name, ttl=1)
        renewal = await client.extend(name, lease.token, 4)
        assert isinstance(renewal, Renewal)
        assert renewal.fence == lease.fence and renewal.ttl == 4 and renewal.name == name
        assert (await client.status(name)).expires_in > 2
        assert await lease.extend(3) is lease and lease.remaining() > 2
        assert await client.release(name, lease.token) == lease.fence

    run(scenario())


def test_async_acquire_with_the_same_request_id_returns_the_same_lease(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        first = await client.acquire(name, ttl=5, request_id="job-42")
        again = await client.acquire(name, ttl=5, request_id="job-42")
        assert (again.fence, again.token) == (first.fence, first.token)
        with pytest.raises(LockBusy):
            await client.acquire(name, ttl=5, request_id="job-43")
        await first.release()

    run(scenario())


def test_async_an_acquire_whose_answer_was_lost_is_resent_and_gets_the_same_lease(
    broker, name
):
    # The broker grants the first attempt but its answer never arrives: the
    # retry carries the same request_id, so it gets that lease back, not busy.
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        transport = client._transport
        real_request = transport.request
        sent = []

        async def answer_lost_once(method, path, body=None, timeout=None):
            data = await real_request(method, path, body, timeout)
            sent.append(body)
            if len(sent) == 1:
                raise BrokerUnavailable("the connection dropped", code="transport")
            return data

        transport.request = answer_lost_once
        lease = await client.acquire(name, ttl=5, wait=2)
        transport.request = real_request
        assert len(sent) == 2 and sent[0]["request_id"] == sent[1]["request_id"]
        status = await client.status(name)
        assert status.held and status.holder_count == 1 and status.fence == lease.fence
        assert await lease.release() == lease.fence

    run(scenario())


def test_async_broker_unreachable_raises_broker_unavailable_after_the_wait(name):
    async def scenario():
        client = AsyncClient(f"http://127.0.0.1:{free_port()}", timeout=1)
        with pytest.raises(BrokerUnavailable) as down:
            await client.acquire(name, ttl=5)
        assert down.value.code == "transport" and down.value.status is None
        started = time.monotonic()
        with pytest.raises(BrokerUnavailable):
            await client.acquire(name, ttl=5, wait=0.8)  # retried until the wait runs out
        assert time.monotonic() - started >= 0.7

    run(scenario())


def test_async_redis_down_raises_broker_unavailable(make_broker, make_redis, name):
    redis = make_redis()
    broker = make_broker(redis_server=redis)
    redis.stop()

    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        with pytest.raises(BrokerUnavailable) as down:
            await client.acquire(name, ttl=5)
        assert down.value.status == 503 and down.value.code == "backend_unavailable"
        assert down.value.retry_after == 1

    run(scenario())


def test_async_bad_input_raises_invalid_request_naming_the_field(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        with pytest.raises(InvalidRequest) as bad_name:
            await client.acquire("no spaces allowed", ttl=5)
        assert bad_name.value.status == 400 and bad_name.value.field == "name"
        with pytest.raises(InvalidRequest) as bad_ttl:
            await client.acquire(name, ttl=10 * 86400)
        assert bad_ttl.value.field == "ttl_ms"

    run(scenario())


def test_async_durations_are_finite_and_never_none(name):
    for method in (AsyncClient.acquire, AsyncClient.lock, AsyncClient.semaphore,
                   AsyncClient.__init__):
        for param in inspect.signature(method).parameters.values():
            if param.name in ("ttl", "wait", "max_hold", "timeout"):
                assert isinstance(param.default, (int, float)), (method, param)
                assert 0 <= param.default < float("inf")
    client = AsyncClient("http://127.0.0.1:9", timeout=1)
    with pytest.raises(TypeError):
        run(client.acquire(name, ttl=None))
    with pytest.raises(TypeError):
        client.lock(name, wait=None)
    with pytest.raises(ValueError):
        client.lock(name, ttl=10, max_hold=5)
    with pytest.raises(ValueError):
        run(client.acquire(name, ttl=float("inf")))
    with pytest.raises(ValueError):
        AsyncClient("http://127.0.0.1:9", timeout=0)


def test_async_a_lock_can_be_entered_only_once(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        lock = client.lock(name, ttl=5)
        async with lock:
            pass
        with pytest.raises(RuntimeError, match=r"client\.lock\(\)"):
            async with lock:
                pytest.fail("the block ran a second time")
        assert not (await client.status(name)).held

    run(scenario())
