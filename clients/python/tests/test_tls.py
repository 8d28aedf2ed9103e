"""HTTPS: a broker serving a self-signed certificate made at test time, trusted
through ``ca_cert`` (a PEM file) or an ``ssl.SSLContext``."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from lockbroker import AsyncClient, BrokerUnavailable, Client


@pytest.fixture
def https_broker(make_broker, tls_files):
    return make_broker(tls=tls_files)


def test_ca_cert_trusts_the_brokers_certificate(https_broker, tls_files, name):
    assert https_broker.url.startswith("https://")
    client = Client(https_broker.url, timeout=5, ca_cert=str(tls_files.ca))
    with client.lock(name, ttl=5, owner="tls-job") as lease:
        status = client.status(name)
        assert status.held and status.owner == "tls-job" and status.fence == lease.fence
    assert not client.status(name).held


def test_an_ssl_context_is_used_as_given(https_broker, tls_files, name):
    context = ssl.create_default_context(cafile=str(tls_files.ca))
    client = Client(https_broker.url, timeout=5, ssl_context=context)
    lease = client.acquire(name, ttl=5)
    assert client.release(name, lease.token) == lease.fence


def test_async_client_takes_the_ca_cert_too(https_broker, tls_files, name):
    async def scenario():
        client = AsyncClient(https_broker.url, timeout=5, ca_cert=tls_files.ca)
        async with client.lock(name, ttl=5) as lease:
            assert (await client.status(name)).fence == lease.fence
        assert not (await client.status(name)).held

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_from_env_reads_the_ca_cert(https_broker, tls_files, name, monkeypatch):
    monkeypatch.setenv("LOCKBROKER_URL", https_broker.url)
    monkeypatch.setenv("LOCKBROKER_CA_CERT", str(tls_files.ca))
    client = Client.from_env(timeout=5)
    assert not client.status(name).held


def test_an_untrusted_certificate_is_a_tls_error_that_is_not_retried(https_broker, name):
    client = Client(https_broker.url, timeout=5)
    with pytest.raises(BrokerUnavailable) as untrusted:
        client.acquire(name, ttl=5, wait=30)  # a certificate does not fix itself
    error = untrusted.value
    assert error.code == "tls" and error.status is None
    assert "certificate" in error.message and "ca_cert" in error.message
    assert https_broker.url in error.message

    async def scenario():
        with pytest.raises(BrokerUnavailable) as also:
            await AsyncClient(https_broker.url, timeout=5).acquire(name, ttl=5, wait=30)
        assert also.value.code == "tls"

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_tls_settings_need_an_https_url(tls_files):
    with pytest.raises(ValueError, match="https"):
        Client("http://127.0.0.1:7700", ca_cert=str(tls_files.ca))
    with pytest.raises(ValueError, match="both"):
        Client("https://127.0.0.1:7700", ca_cert=str(tls_files.ca),
               ssl_context=ssl.create_default_context())
    with pytest.raises(FileNotFoundError):
        Client("https://127.0.0.1:7700", ca_cert="/nonexistent/ca.pem")
