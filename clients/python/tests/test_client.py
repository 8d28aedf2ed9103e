"""The blocking client against a real broker and Redis."""

from __future__ import annotations

import inspect
import threading
import time

import pytest

from conftest import lease_key
from lockbroker import (
    BrokerUnavailable,
    Client,
    InvalidRequest,
    LeaseLost,
    LockBrokerError,
    LockBusy,
    MaxHoldExceeded,
)


def test_lock_holds_the_lock_inside_the_block_and_releases_on_exit(client, name):
    with client.lock(name, ttl=5, owner="report-job") as lease:
        assert lease.fence > 0
        assert isinstance(lease.token, str) and len(lease.token) >= 16
        status = client.status(name)
        assert status.held and status.owner == "report-job" and status.fence == lease.fence
        assert not lease.lost.is_set()
    assert lease.released
    assert not client.status(name).held


def test_lease_repr_never_shows_the_token(client, name):
    with client.lock(name, ttl=5) as lease:
        assert lease.token not in repr(lease)
        assert str(lease.fence) in repr(lease)


def test_fences_grow_from_one_lease_to_the_next(client, name):
    fences = []
    for _ in range(3):
        with client.lock(name, ttl=5) as lease:
            fences.append(lease.fence)
    assert fences == sorted(set(fences))


def test_a_second_acquirer_gets_lock_busy_with_the_holder(client, name):
    with client.lock(name, ttl=5, owner="first") as lease:
        with pytest.raises(LockBusy) as busy:
            client.acquire(name, ttl=5, owner="second")
    error = busy.value
    assert error.status == 423 and error.code == "lock_busy"
    assert error.owner == "first" and error.fence == lease.fence
    assert 0 < error.available_in <= 5 and 0 < error.expires_in <= 5
    assert error.retry_after is not None and error.retry_after >= 1


def test_wait_gets_the_lock_once_the_holder_releases(client, name):
    first = client.acquire(name, ttl=10)
    releaser = threading.Timer(0.5, first.release)
    releaser.start()
    started = time.monotonic()
    try:
        second = client.acquire(name, ttl=5, wait=5)
    finally:
        releaser.join()
    assert 0.3 < time.monotonic() - started < 4
    assert second.fence > first.fence
    second.release()


def test_wait_gives_up_with_lock_busy_at_its_deadline(client, name):
    holder = client.acquire(name, ttl=10)
    started = time.monotonic()
    with pytest.raises(LockBusy):
        client.acquire(name, ttl=5, wait=0.6)
    assert 0.5 < time.monotonic() - started < 3
    holder.release()


def test_renewer_keeps_the_lease_past_its_ttl(client, name):
    with client.lock(name, ttl=1.2) as lease:
        time.sleep(3)
        assert not lease.lost.is_set()
        assert lease.remaining() > 0.3
        status = client.status(name)
        assert status.held and status.fence == lease.fence
        with pytest.raises(LockBusy):
            client.acquire(name, ttl=1)
    assert not client.status(name).held


def test_lost_is_set_when_the_lease_disappears_and_exit_raises_lease_lost(client, redis, name):
    with pytest.raises(LeaseLost):
        with client.lock(name, ttl=1.5) as lease:
            assert redis.command("DEL", lease_key(name)) == 1
            assert lease.lost.wait(3), "the renewer did not notice the lost lease"
            assert lease.lost_reason == "lease_lost"
            with pytest.raises(LeaseLost):
                lease.raise_if_lost()


def test_an_exception_in_the_body_wins_over_lease_lost(client, redis, name):
    with pytest.raises(ValueError, match="work failed"):
        with client.lock(name, ttl=1.5) as lease:
            redis.command("DEL", lease_key(name))
            assert lease.lost.wait(3)
            raise ValueError("work failed")


def test_lost_is_set_when_the_broker_cannot_be_reached_until_expiry(make_broker, name):
    broker = make_broker()
    client = Client(broker.url, timeout=0.3)
    with pytest.raises(LeaseLost):
        with client.lock(name, ttl=1.5) as lease:
            started = time.monotonic()
            broker.pause()
            assert lease.lost.wait(3), "lost was not set when the lease ran out"
            assert lease.lost_reason == "expired"
            assert time.monotonic() - started < 2.0
            # A lost lease is never renewed: this fails at once, without asking
            # the (still paused) broker.
            with pytest.raises(LeaseLost):
                lease.extend()
            time.sleep(0.3)  # past the broker's own expiry
            broker.resume()
    assert not client.status(name).held


def test_max_hold_stops_renewing_and_the_lease_runs_out(client, name):
    with pytest.raises(LeaseLost):
        with client.lock(name, ttl=1, max_hold=1.6) as lease:
            started = time.monotonic()
            assert lease.lost.wait(4), "the lease outlived max_hold"
            held_for = time.monotonic() - started
            assert 1.2 < held_for < 2.2, held_for
            assert lease.lost_reason == "expired"
            time.sleep(0.3)  # the local deadline comes first; let the broker's pass too
            assert not client.status(name).held


def test_the_brokers_max_hold_refuses_extend_and_ends_the_lease(make_broker, name):
    broker = make_broker({"LOCKBROKER_LOCKS_MAX_HOLD_MS": "1500"})
    client = Client(broker.url, timeout=5)
    lease = client.acquire(name, ttl=1)
    time.sleep(0.7)
    with pytest.raises(MaxHoldExceeded) as refused:
        lease.extend(1)
    assert refused.value.status == 409 and 0 < refused.value.expires_in <= 1
    lease.release()

    with pytest.raises(LeaseLost):
        with client.lock(name, ttl=1) as managed:
            assert managed.lost.wait(3)
            assert managed.lost_reason == "expired"
            time.sleep(0.3)  # the local deadline comes first; let the broker's pass too


def test_the_renewer_extends_up_to_the_brokers_max_hold(make_broker, name):
    # TTL 3 s against a 4.5 s max hold: the renewal at 2 s is refused, yet the
    # lease must last until the cap, not end at 4 s with the last full renewal.
    broker = make_broker({"LOCKBROKER_LOCKS_MAX_HOLD_MS": "4500"})
    client = Client(broker.url, timeout=5)
    with pytest.raises(LeaseLost):
        with client.lock(name, ttl=3) as lease:
            started = time.monotonic()
            time.sleep(4.25)
            assert not lease.lost.is_set(), "the lease ended before the broker's max hold"
            assert client.status(name).fence == lease.fence
            assert lease.lost.wait(1.5), "the lease outlived the broker's max hold"
            assert time.monotonic() - started < 4.6
            assert lease.lost_reason == "expired"
            time.sleep(0.3)
    assert not client.status(name).held


def test_exit_raises_lease_lost_after_the_renewer_failed_though_the_release_succeeds(
    client, name, monkeypatch
):
    def broken(*args, **kwargs):
        raise RuntimeError("renewer bug")

    monkeypatch.setattr(client, "_extend", broken)
    with pytest.raises(LeaseLost, match="renewer_failed"):
        with client.lock(name, ttl=0.6) as lease:
            assert lease.lost.wait(2)
            assert lease.lost_reason == "renewer_failed"
            assert client.status(name).held  # the release below reaches a live lease
    assert lease.released and not client.status(name).held


def test_exit_raises_lease_lost_after_the_local_deadline_though_the_release_succeeds(
    client, name, monkeypatch
):
    # A waited grant whose extends never get through: the local deadline counts
    # from the acquire's send time, so it passes while the broker still holds
    # the lease, and the release on exit gets 200.
    holder = client.acquire(name, ttl=10)
    releaser = threading.Timer(1.0, holder.release)
    releaser.start()

    def unreachable(*args, **kwargs):
        raise BrokerUnavailable("cut", code="transport")

    monkeypatch.setattr(client, "_extend", unreachable)
    try:
        with pytest.raises(LeaseLost, match="expired"):
            with client.lock(name, ttl=1.5, wait=5) as lease:
                assert lease.lost.wait(2)
                assert lease.lost_reason == "expired"
                assert client.status(name).held
    finally:
        releaser.join()
    assert lease.released and not client.status(name).held


def test_a_wait_longer_than_the_ttl_keeps_and_renews_the_lease(client, name):
    holder = client.acquire(name, ttl=10)
    releaser = threading.Timer(2.5, holder.release)
    releaser.start()
    started = time.monotonic()
    try:
        with client.lock(name, ttl=1, wait=10, max_hold=3) as lease:
            assert time.monotonic() - started > 2  # waited more than twice the TTL
            assert not lease.lost.is_set() and lease.remaining() > 0.5
            time.sleep(2)  # two TTLs: renewed, counted from the grant
            assert not lease.lost.is_set(), lease.lost_reason
            status = client.status(name)
            assert status.held and status.fence == lease.fence
    finally:
        releaser.join()
    assert not client.status(name).held


def test_releasing_inside_the_block_stops_renewing_and_exit_is_quiet(client, name):
    with client.lock(name, ttl=0.6) as lease:
        lease.release()
        time.sleep(0.7)  # past several renewal times and the TTL
        assert not lease.lost.is_set()
    assert lease.released and not client.status(name).held


def test_release_after_expiry_raises_lease_lost(client, name):
    lease = client.acquire(name, ttl=0.3)
    time.sleep(0.5)
    with pytest.raises(LeaseLost) as lost:
        lease.release()
    assert lost.value.status == 409 and "duplicated" in lost.value.message
    assert lease.lost.is_set()


def test_release_acknowledged_is_none_without_replica_acknowledgement(client, name):
    with client.lock(name, ttl=5) as lease:
        assert lease.release_acknowledged is None
    assert lease.released and lease.release_acknowledged is None
    single = client.acquire(name, ttl=5)
    assert single.release() == single.fence and single.release_acknowledged is None


def test_release_acknowledged_says_whether_a_replica_acknowledged(
    make_redis, make_broker, name
):
    primary = make_redis()
    replica = make_redis(replica_of=primary)  # started once its link is up
    broker = make_broker({"LOCKBROKER_REDIS_MIN_REPLICAS_ACKED": "1"}, redis_server=primary)
    client = Client(broker.url, timeout=5)
    with client.lock(name, ttl=5) as lease:
        pass
    assert lease.released and lease.release_acknowledged is True
    held = client.acquire(name + "-2", ttl=30)
    replica.pause()
    try:
        assert held.release() == held.fence
    finally:
        replica.resume()
    assert held.released and held.release_acknowledged is False
    assert not client.status(held.name).held  # free on the primary all the same


def test_lock_delay_keeps_an_expired_lock_unavailable(client, name):
    client.acquire(name, ttl=0.2, lock_delay=1.0)
    time.sleep(0.4)  # expired, not released: the lock-delay applies
    status = client.status(name)
    assert not status.held and 0.3 < status.available_in <= 1.0
    with pytest.raises(LockBusy):
        client.acquire(name, ttl=1)
    lease = client.acquire(name, ttl=1, wait=2)
    lease.release()


def test_extend_replaces_the_remaining_ttl(client, name):
    lease = client.acquire(name, ttl=1)
    renewal = client.extend(name, lease.token, 4)
    assert renewal.fence == lease.fence and renewal.ttl == 4
    assert client.status(name).expires_in > 2
    assert client.release(name, lease.token) == lease.fence


def test_acquire_with_the_same_request_id_returns_the_same_lease(client, name):
    first = client.acquire(name, ttl=5, request_id="job-42")
    again = client.acquire(name, ttl=5, request_id="job-42")
    assert (again.fence, again.token) == (first.fence, first.token)
    first.release()


def test_broker_unreachable_raises_broker_unavailable(name):
    client = Client(f"http://127.0.0.1:{_closed_port()}", timeout=1)
    with pytest.raises(BrokerUnavailable) as down:
        client.acquire(name, ttl=5)
    assert down.value.code == "transport" and down.value.status is None
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable):
        client.acquire(name, ttl=5, wait=0.8)  # retried until the wait runs out
    assert time.monotonic() - started >= 0.7


def test_redis_down_raises_broker_unavailable(make_broker, make_redis, name):
    redis = make_redis()
    broker = make_broker(redis_server=redis)
    client = Client(broker.url, timeout=5)
    redis.stop()
    with pytest.raises(BrokerUnavailable) as down:
        client.acquire(name, ttl=5)
    assert down.value.status == 503 and down.value.code == "backend_unavailable"
    assert down.value.retry_after == 1


def test_bad_input_raises_invalid_request_naming_the_field(client, name):
    with pytest.raises(InvalidRequest) as bad_name:
        client.acquire("no spaces allowed", ttl=5)
    assert bad_name.value.status == 400 and bad_name.value.field == "name"
    with pytest.raises(InvalidRequest) as bad_ttl:
        client.acquire(name, ttl=10 * 86400)
    assert bad_ttl.value.field == "ttl_ms"


def test_every_error_is_a_lock_broker_error():
    for error in (LockBusy, LeaseLost, MaxHoldExceeded, BrokerUnavailable, InvalidRequest):
        assert issubclass(error, LockBrokerError)


def test_api_key_is_accepted(broker, name):
    client = Client(broker.url, api_key="test-key", timeout=5)
    with client.lock(name, ttl=5) as lease:
        assert lease.fence > 0


def test_durations_are_finite_and_never_none(client, name):
    for method in (Client.acquire, Client.lock, Client.__init__):
        for param in inspect.signature(method).parameters.values():
            if param.name in ("ttl", "wait", "max_hold", "timeout"):
                assert isinstance(param.default, (int, float)), (method, param)
                assert 0 <= param.default < float("inf")
    with pytest.raises(TypeError):
        client.acquire(name, ttl=None)
    with pytest.raises(TypeError):
        client.lock(name, wait=None)
    with pytest.raises(ValueError):
        client.lock(name, ttl=10, max_hold=5)
    with pytest.raises(ValueError):
        client.acquire(name, ttl=float("inf"))


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
