"""Several locks at once against a real broker: ``acquire_all`` takes every lock
or none and names the busy one, waits until the holder releases, gives back what
it cannot return, and ``release_all`` ends each lease as its own release would;
``lock_all`` renews every lease, sets the set's ``lost`` when one is lost, and
gives them all back with one release-all; blocking and asyncio."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from conftest import force_release, lease_key
from lockbroker import (
    AsyncClient,
    AuthError,
    LeaseLost,
    LockAsk,
    LockBrokerError,
    LockBusy,
    ReleaseResult,
)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_acquire_all_takes_every_lock_or_none_and_busy_names_the_lock(client, name):
    a, b, c = f"{name}:a", f"{name}:b", f"{name}:c"
    holder = client.acquire(b, ttl=10, owner="holder")

    with pytest.raises(LockBusy) as busy:
        client.acquire_all([c, b, a], ttl=10, owner="mover")
    assert busy.value.lock == b and busy.value.status == 423
    assert busy.value.owner == "holder" and busy.value.fence == holder.fence
    assert not client.status(a).held and not client.status(c).held

    holder.release()
    leases = client.acquire_all([c, b, LockAsk(a, shared=True)], ttl=10, owner="mover")
    assert [lease.name for lease in leases] == [c, b, a]
    assert [lease.mode for lease in leases] == ["exclusive", "exclusive", "shared"]
    assert leases[1].fence > holder.fence
    assert len({lease.token for lease in leases}) == 3
    for lease in leases:
        status = client.status(lease.name)
        assert status.held and status.fence == lease.fence and lease.owner == "mover"
    # Each is an ordinary lease: extended and released on its own.
    leases[0].extend(20)
    leases[0].release()
    assert not client.status(c).held and client.status(b).held
    client.release_all(leases[1:])


def test_a_name_given_twice_is_refused_without_asking_and_none_is_no_request(client, name):
    with pytest.raises(ValueError, match=r"named twice \(locks\[1\]\)"):
        client.acquire_all([LockAsk(name, shared=True), name], ttl=10)
    assert not client.status(name).held
    assert client.acquire_all([], ttl=10) == []
    assert client.release_all([]) == []


def test_acquire_all_waits_until_the_holder_releases(client, name):
    p, q = f"{name}:p", f"{name}:q"
    holder = client.acquire(q, ttl=10, owner="holder")
    releaser = threading.Timer(0.7, holder.release)
    releaser.start()
    started = time.monotonic()
    leases = client.acquire_all([p, q], ttl=10, wait=5, owner="mover")
    elapsed = time.monotonic() - started
    releaser.join()
    assert 0.65 <= elapsed < 4, elapsed
    assert leases[1].fence > holder.fence
    assert client.status(p).held and client.status(q).held
    client.release_all(leases)


def test_a_wait_that_runs_out_is_busy_and_takes_nothing(client, name):
    a, b = f"{name}:a", f"{name}:b"
    client.acquire(b, ttl=10, owner="holder")
    started = time.monotonic()
    with pytest.raises(LockBusy) as busy:
        client.acquire_all([a, b], ttl=10, wait=0.4)
    assert time.monotonic() - started >= 0.4
    assert busy.value.lock == b
    assert not client.status(a).held


def test_the_same_request_id_gets_the_same_leases(client, name):
    names = [f"{name}:1", f"{name}:2"]
    first = client.acquire_all(names, ttl=10, request_id=f"move-{name}")
    again = client.acquire_all(names, ttl=10, request_id=f"move-{name}")
    assert [(lease.token, lease.fence) for lease in first] == [
        (lease.token, lease.fence) for lease in again
    ]


def test_release_all_ends_each_lease_as_its_own_release_would(client, redis, name):
    a, b, taken = f"{name}:a", f"{name}:b", f"{name}:taken"
    leases = client.acquire_all([a, b], ttl=10)
    # Lost at the broker, which this client learns from release_all.
    lost = client.acquire(taken, ttl=10)
    redis.command("DEL", lease_key(taken))
    leases.append(lost)

    results = client.release_all(leases)
    assert [result.name for result in results] == [a, b, taken]
    for lease, result in zip(leases[:2], results):
        assert result == ReleaseResult(lease.name, True, fence=lease.fence)
        assert lease.released and not lease.lost.is_set()
        assert not client.status(lease.name).held
    assert not results[2].released and isinstance(results[2].error, LeaseLost)
    assert lost.lost.is_set() and lost.lost_reason == "lease_lost" and not lost.released
    with pytest.raises(LeaseLost):
        lost.extend()


def test_a_lease_already_lost_is_not_asked_about_and_the_rest_are_released(
    client, redis, name
):
    a, b = f"{name}:a", f"{name}:b"
    leases = client.acquire_all([a, b], ttl=10)
    redis.command("DEL", lease_key(a))
    with pytest.raises(LeaseLost):
        leases[0].extend()
    assert leases[0].lost_reason == "lease_lost"

    results = client.release_all(leases)
    assert isinstance(results[0].error, LeaseLost) and not results[0].released
    assert results[1].released and results[1].fence == leases[1].fence
    assert leases[1].released and not client.status(b).held


def test_async_acquire_all_and_release_all(broker, name):
    a, b = f"{name}:a", f"{name}:b"

    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        holder = await client.acquire(b, ttl=10, owner="holder")
        with pytest.raises(LockBusy) as busy:
            await client.acquire_all([a, b], ttl=10)
        assert busy.value.lock == b and busy.value.owner == "holder"
        assert not (await client.status(a)).held

        async def release_soon():
            await asyncio.sleep(0.5)
            await holder.release()

        releaser = asyncio.ensure_future(release_soon())
        leases = await client.acquire_all([a, LockAsk(b, shared=True)], ttl=10, wait=5)
        await releaser
        assert [(lease.name, lease.mode) for lease in leases] == [
            (a, "exclusive"), (b, "shared")
        ]
        assert isinstance(leases[0].lost, asyncio.Event)
        assert leases[1].fence > holder.fence

        results = await client.release_all(leases)
        assert [(r.name, r.released, r.fence) for r in results] == [
            (lease.name, True, lease.fence) for lease in leases
        ]
        assert all(lease.released for lease in leases)
        assert not (await client.status(a)).held and not (await client.status(b)).held
        again = await client.release_all(leases)
        assert [r.released for r in again] == [True, True]  # as a repeated release answers

    run(scenario())


def sent_paths(client, monkeypatch):
    """The paths of the requests ``client`` sends from now on, in order."""
    paths = []
    request = client._transport.request

    def recording(method, path, *args, **kwargs):
        paths.append(path)
        return request(method, path, *args, **kwargs)

    monkeypatch.setattr(client._transport, "request", recording)
    return paths


def test_lock_all_renews_every_lease_and_leaving_gives_them_back_in_one_release_all(
    client, name, monkeypatch
):
    a, b = f"{name}:a", f"{name}:b"
    with client.lock_all([a, LockAsk(b, shared=True)], ttl=1.2, owner="mover") as leases:
        first, second = leases
        assert [(lease.name, lease.mode) for lease in leases] == [(a, "exclusive"), (b, "shared")]
        time.sleep(3.6)  # three TTLs
        assert not leases.lost.is_set() and leases.lost_lease is None
        leases.raise_if_lost()
        assert leases.remaining() > 0.5, leases
        for lease in leases:
            status = client.status(lease.name)
            assert status.held and status.fence == lease.fence
        with pytest.raises(LockBusy) as busy:
            client.acquire(a, ttl=1)
        assert busy.value.owner == "mover"
        paths = sent_paths(client, monkeypatch)
    # Renewals may still go out before leaving; then one release-all, no release.
    assert [path for path in paths if not path.endswith("/extend")] == ["/v1/locks/release-all"]
    assert first.released and second.released
    assert not client.status(a).held and not client.status(b).held


def test_a_lost_lease_sets_the_sets_loss_and_leaving_raises_it(client, broker, name):
    a, b = f"{name}:a", f"{name}:b"
    with pytest.raises(LeaseLost, match=b) as raised:
        with client.lock_all([a, b], ttl=1.2) as leases:
            force_release(broker, b)
            # The next renewal of b, within a third of the TTL, learns it.
            assert leases.lost.wait(2), "the set's loss was not set"
            assert leases.lost_lease is leases[1] and leases.lost_reason == "lease_lost"
            assert leases[1].lost.is_set() and not leases[0].lost.is_set()
            with pytest.raises(LeaseLost, match=b):
                leases.raise_if_lost()
    assert raised.value.code == "lease_lost"
    assert leases[0].released and not client.status(a).held


def test_a_busy_lock_all_takes_nothing_and_is_entered_once(client, name):
    a, b = f"{name}:a", f"{name}:b"
    holder = client.acquire(b, ttl=10, owner="holder")
    lock = client.lock_all([a, b], ttl=10)
    with pytest.raises(LockBusy) as busy:
        with lock:
            pass
    assert busy.value.lock == b and not client.status(a).held
    holder.release()
    with lock as leases:
        with pytest.raises(RuntimeError, match="entered only once"):
            lock.__enter__()
    assert leases[0].released and leases[1].released
    with pytest.raises(ValueError, match="max_hold"):
        client.lock_all([a], ttl=10, max_hold=5)


def test_an_acquire_all_answer_for_other_locks_is_given_back(client, name, monkeypatch):
    a, b = f"{name}:a", f"{name}:b"
    request = client._transport.request

    def reordered(method, path, *args, **kwargs):
        answer = request(method, path, *args, **kwargs)
        if path.endswith("/acquire-all"):
            answer["leases"].reverse()
        return answer

    monkeypatch.setattr(client._transport, "request", reordered)
    with pytest.raises(LockBrokerError, match="other locks than asked for") as raised:
        client.acquire_all([a, b], ttl=10)
    assert raised.value.code == "bad_response"
    assert not client.status(a).held and not client.status(b).held


def test_leases_whose_resync_fails_are_given_back(client, name, monkeypatch):
    p, q = f"{name}:p", f"{name}:q"
    holder = client.acquire(q, ttl=10)
    releaser = threading.Timer(0.5, holder.release)
    releaser.start()

    def revoked(*args, **kwargs):
        raise AuthError("the key was revoked", code="forbidden", status=403)

    # The grant waits longer than a tenth of the TTL, so an extend follows it.
    monkeypatch.setattr(client, "_extend", revoked)
    with pytest.raises(AuthError):
        client.acquire_all([p, q], ttl=2, wait=5)
    releaser.join()
    assert not client.status(p).held and not client.status(q).held


def test_async_lock_all_renews_sets_the_loss_and_gives_back(broker, name):
    a, b, c = f"{name}:a", f"{name}:b", f"{name}:c"

    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.lock_all([a, b], ttl=1.2) as leases:
            assert isinstance(leases.lost, asyncio.Event)
            await asyncio.sleep(3.6)  # three TTLs
            assert not leases.lost.is_set()
            assert all([(await client.status(lease.name)).held for lease in leases])
        assert all(lease.released for lease in leases)
        assert not (await client.status(a)).held and not (await client.status(b)).held

        with pytest.raises(LeaseLost, match=c):
            async with client.lock_all([a, c], ttl=1.2) as leases:
                await asyncio.get_running_loop().run_in_executor(None, force_release, broker, c)
                await asyncio.wait_for(leases.lost.wait(), 2)
                assert leases.lost_lease is leases[1] and not leases[0].lost.is_set()
        assert leases[0].released and not (await client.status(a)).held

    run(scenario())
