"""Fence checks: whether a lease's fence is still current, asked of the broker by
the blocking and the asyncio client, for locks and semaphore permits."""

from __future__ import annotations

import asyncio

import pytest

from lockbroker import AsyncClient, FenceCheck, InvalidRequest


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_a_held_lease_fence_is_current_and_not_after_release(client, name):
    lease = client.acquire(name, ttl=5)

    check = client.check_fence(name, lease.fence)
    assert isinstance(check, FenceCheck)
    assert (check.name, check.fence, check.current, check.held) == (
        name, lease.fence, True, True)
    assert 0 < check.expires_in <= 5
    own = lease.check_fence()
    assert (own.name, own.fence, own.current, own.held) == (name, lease.fence, True, True)

    lease.release()
    after = client.check_fence(name, lease.fence)
    assert (after.current, after.held, after.expires_in) == (False, False, 0)
    assert not lease.check_fence().current


def test_an_older_fence_is_not_current_after_a_newer_grant(client, name):
    older = client.acquire(name, ttl=5)
    older.release()
    newer = client.acquire(name, ttl=5)
    try:
        assert newer.fence > older.fence
        stale = client.check_fence(name, older.fence)
        assert (stale.fence, stale.current, stale.held) == (older.fence, False, True)
        assert 0 < stale.expires_in <= 5  # the newer lease's expiry
        assert client.check_fence(name, newer.fence).current
    finally:
        newer.release()


def test_a_semaphore_permit_fence_is_checked_on_the_semaphore(client, name):
    first = client.acquire_permit(name, limit=2, ttl=5)
    second = client.acquire_permit(name, limit=2, ttl=5)
    try:
        assert client.check_semaphore_fence(name, first.fence).current
        assert second.check_fence().current
        # The permit's fence belongs to the semaphore, not to a lock of that name.
        assert not client.check_fence(name, first.fence).current
        first.release()
        gone = client.check_semaphore_fence(name, first.fence)
        assert (gone.current, gone.held) == (False, True)
    finally:
        second.release()


def test_a_bad_fence_or_name_is_an_invalid_request(client, name):
    for fence in (0, -1, 2**53):
        with pytest.raises(InvalidRequest) as bad:
            client.check_fence(name, fence)
        assert bad.value.status == 400 and bad.value.field == "fence"
    with pytest.raises(InvalidRequest) as bad_name:
        client.check_semaphore_fence("no spaces", 1)
    assert bad_name.value.field == "name"
    with pytest.raises(TypeError):
        client.check_fence(name, "1")  # type: ignore[arg-type]


def test_the_async_client_checks_fences_too(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        lease = await client.acquire(name, ttl=5)
        assert (await client.check_fence(name, lease.fence)).current
        assert (await lease.check_fence()).current
        await lease.release()
        assert not (await lease.check_fence()).current

        permit = await client.acquire_permit(name, limit=1, ttl=5)
        assert (await client.check_semaphore_fence(name, permit.fence)).current
        assert (await permit.check_fence()).current
        await permit.release()
        assert not (await client.check_semaphore_fence(name, permit.fence)).current

        with pytest.raises(InvalidRequest) as bad:
            await client.check_semaphore_fence(name, 0)
        assert bad.value.field == "fence"

    run(scenario())
