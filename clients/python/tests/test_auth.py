"""API keys (``Authorization: Bearer``) and fair acquires against a real broker.

A broker built without these features ignores the key (and rejects ``fair``); the
tests then skip, saying so.
"""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from lockbroker import AsyncClient, AuthError, Client, InvalidRequest

KEY = "test-key-0123456789abcdef"


@pytest.fixture
def keyed_broker(make_broker, workdir, name):
    keys = workdir / f"keys-{name}.toml"
    keys.write_text(
        "[[keys]]\n"
        'id = "python-tests"\n'
        f'sha256 = "{hashlib.sha256(KEY.encode()).hexdigest()}"\n'
        'scopes = ["lock"]\n'
        'prefixes = ["allowed-"]\n'
    )
    broker = make_broker({"LOCKBROKER_AUTH_KEYS_FILE": str(keys)})
    try:
        Client(broker.url, timeout=5).status("allowed-probe")
    except AuthError:
        return broker
    pytest.skip("this broker does not check API keys")


def test_the_bearer_key_opens_the_broker(keyed_broker, name):
    client = Client(keyed_broker.url, api_key=KEY, timeout=5)
    with client.lock(f"allowed-{name}", ttl=5) as lease:
        assert lease.fence > 0
        assert client.status(f"allowed-{name}").held


def test_a_missing_or_wrong_key_is_unauthorized(keyed_broker, name):
    for api_key in (None, "wrong-key"):
        client = Client(keyed_broker.url, api_key=api_key, timeout=5)
        with pytest.raises(AuthError) as denied:
            client.acquire(f"allowed-{name}", ttl=5)
        assert denied.value.status == 401 and denied.value.code == "unauthorized"


def test_a_lock_outside_the_keys_prefixes_is_forbidden(keyed_broker, name):
    client = Client(keyed_broker.url, api_key=KEY, timeout=5)
    with pytest.raises(AuthError) as denied:
        client.acquire(f"other-{name}", ttl=5)
    assert denied.value.status == 403 and denied.value.code == "forbidden"


def test_the_async_client_sends_the_key(keyed_broker, name):
    async def scenario():
        client = AsyncClient(keyed_broker.url, api_key=KEY, timeout=5)
        async with client.lock(f"allowed-{name}", ttl=5) as lease:
            assert lease.fence > 0
        with pytest.raises(AuthError):
            await AsyncClient(keyed_broker.url, timeout=5).acquire(f"allowed-{name}", ttl=5)

    asyncio.run(scenario())


def test_fair_acquire(client, name):
    try:
        first = client.acquire(name, ttl=5, fair=True)
    except InvalidRequest as error:
        if error.field == "fair":
            pytest.skip("this broker has no fair queueing")
        raise
    first.release()
    with client.lock(name, ttl=5, fair=True, wait=1) as lease:
        assert lease.fence > first.fence
