"""The asyncio twin against a real broker and Redis."""

from __future__ import annotations

import asyncio
import time

import pytest

from conftest import lease_key
from lockbroker import AsyncClient, BrokerUnavailable, InvalidRequest, LeaseLost, LockBusy


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
