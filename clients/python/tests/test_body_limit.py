"""Both clients read at most :data:`MAX_BODY` bytes of an answer, however it is
framed, against a tiny HTTP server in this process that sends what a test tells
it to (the blocking client from a thread of its own)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Awaitable, Callable

import pytest

from lockbroker import AsyncClient, Client, LockBrokerError, LockStatus
from lockbroker._transport import MAX_BODY, READ_SIZE

#: Writes one answer to a request whose head was read.
Answer = Callable[[asyncio.StreamWriter], Awaitable[None]]


def status_body(size: int) -> bytes:
    """A lock status answer padded to exactly ``size`` bytes of JSON."""
    empty = {"name": "job", "held": False, "pad": ""}
    pad = size - len(json.dumps(empty).encode())
    body = json.dumps(dict(empty, pad="x" * pad)).encode()
    assert len(body) == size
    return body


def with_length(body: bytes, status: str = "200 OK") -> Answer:
    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
    return answer


def chunked(body: bytes) -> Answer:
    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for start in range(0, len(body), READ_SIZE):
            piece = body[start:start + READ_SIZE]
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    return answer


def until_closed(body: bytes) -> Answer:
    """The body framed by the end of the connection."""
    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\n\r\n" + body)
        await writer.drain()
    return answer


async def endless(writer: asyncio.StreamWriter) -> None:
    """A body framed by the end of the connection that never ends: it goes on
    until the client hangs up (a client without a cap does so at its timeout)."""
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"pad\": \"")
    while True:
        writer.write(b"x" * 65536)
        await writer.drain()


async def serving(answer: Answer, scenario: Callable[[str], Awaitable[None]]) -> None:
    """Runs ``scenario`` with the URL of a server that answers every request with
    ``answer`` and then closes the connection."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            await answer(writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up, as it should after too much
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await scenario(f"http://127.0.0.1:{port}")
    finally:
        server.close()
        await server.wait_closed()


def run(answer: Answer, scenario: Callable[[str], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(serving(answer, scenario), 30))


async def status_of(kind: str, url: str) -> LockStatus:
    """The lock status through the async client, or the blocking one."""
    if kind == "async":
        return await AsyncClient(url, timeout=5).status("job")
    return await asyncio.to_thread(lambda: Client(url, timeout=5).status("job"))


async def acquire_with(kind: str, url: str) -> None:
    if kind == "async":
        await AsyncClient(url, timeout=5).acquire("job", ttl=5)
    else:
        await asyncio.to_thread(lambda: Client(url, timeout=5).acquire("job", ttl=5))


CLIENTS = pytest.mark.parametrize("kind", ["async", "blocking"])


@CLIENTS
@pytest.mark.parametrize("framing", [with_length, chunked, until_closed])
def test_a_body_of_max_body_bytes_is_read(kind, framing):
    async def scenario(url: str) -> None:
        status = await status_of(kind, url)
        assert isinstance(status, LockStatus) and status.name == "job" and not status.held

    run(framing(status_body(MAX_BODY)), scenario)


@CLIENTS
@pytest.mark.parametrize("framing", [with_length, chunked, until_closed])
def test_a_larger_body_is_a_bad_response(kind, framing):
    async def scenario(url: str) -> None:
        with pytest.raises(LockBrokerError) as refused:
            await status_of(kind, url)
        error = refused.value
        assert type(error) is LockBrokerError  # not retried as an unreachable broker
        assert (error.code, error.status) == ("bad_response", 200)
        assert str(MAX_BODY) in error.message

    run(framing(status_body(MAX_BODY + 1)), scenario)


@CLIENTS
def test_an_error_answer_with_a_larger_body_is_a_bad_response(kind):
    async def scenario(url: str) -> None:
        with pytest.raises(LockBrokerError) as refused:
            await acquire_with(kind, url)
        assert type(refused.value) is LockBrokerError
        assert (refused.value.code, refused.value.status) == ("bad_response", 423)

    body = json.dumps({"error": {"code": "lock_busy", "message": "x" * MAX_BODY}}).encode()
    run(with_length(body, "423 Locked"), scenario)


@CLIENTS
def test_a_body_that_never_ends_is_refused_once_past_the_cap(kind):
    async def scenario(url: str) -> None:
        started = time.monotonic()
        with pytest.raises(LockBrokerError) as refused:
            await status_of(kind, url)
        assert refused.value.code == "bad_response"  # not a timeout
        assert time.monotonic() - started < 3

    run(endless, scenario)
