"""Watching locks (``client.watch``, ``client.watch_prefix``) and leader election
(``client.leader``).

The first part needs no broker: the event-stream parser, the typed events, the
resume rule, who leads as the events show it, and reconnecting against a small
scripted HTTP server in this process. The second part runs against a real broker
and Redis, and needs a broker with event streams (``GET /v1/locks/{name}/events``).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional
from urllib.parse import quote

import pytest

from conftest import lease_key, wait_until
from lockbroker import (
    AsyncClient,
    AsyncLeader,
    AsyncWatch,
    Client,
    InvalidRequest,
    Lagged,
    Leader,
    LockEvent,
    LockState,
    LockStatus,
    StateComplete,
    Watch,
)
from lockbroker._events import (
    LeaderView,
    SSEMessage,
    SSEParser,
    WatchCursor,
    event_from_message,
    prefix_events_path,
)
from lockbroker.errors import BrokerUnavailable


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def take(events: Watch, count: int, timeout: float = 10.0) -> list:
    """The next ``count`` events; fails when they do not come within ``timeout``."""
    closer = threading.Timer(timeout, events.close)
    closer.start()
    got = []
    try:
        for event in events:
            got.append(event)
            if len(got) == count:
                break
    finally:
        closer.cancel()
    assert len(got) == count, f"only {got} within {timeout}s"
    return got


async def atake(events: AsyncWatch, count: int, timeout: float = 10.0) -> list:
    got: list = []

    async def collect() -> None:
        async for event in events:
            got.append(event)
            if len(got) == count:
                return

    try:
        await asyncio.wait_for(collect(), timeout)
    except asyncio.TimeoutError:
        pass
    assert len(got) == count, f"only {got} within {timeout}s"
    return got


def state_json(name: str, **extra) -> Dict:
    status = {"name": name, "held": False, "mode": None, "fence": None, "owner": None,
              "expires_in_ms": 0, "available_in_ms": 0, "holders": [], "holder_count": 0}
    status.update(extra)
    return status


def change_json(kind: str, name: str, fence: int, owner: Optional[str] = "node-a",
                mode: str = "exclusive", expires_in_ms: int = 5000) -> Dict:
    return {"name": name, "type": kind, "mode": mode, "fence": fence, "owner": owner,
            "expires_in_ms": expires_in_ms, "expires_at_ms": 1700000000000 + fence}


def msg(kind: str, data: str, id: Optional[str]) -> SSEMessage:
    """A message with an ``id:`` line of its own."""
    return SSEMessage(kind, data, id, id or "")


def sse(kind: str, id: int, data: Dict) -> bytes:
    return f"event: {kind}\nid: {id}\ndata: {json.dumps(data)}\n\n".encode()


# -- the parser --------------------------------------------------------------------


STREAM = (
    b": keep-alive\n"
    b"event: state\nid: 1\ndata: {\"a\": 1}\n\n"
    b"event: acquired\r\nid: 2\r\ndata: first line\r\ndata:second line\r\n\r\n"
    b": a comment between messages\r"
    b"event: released\rid: 3\rdata:  two spaces keep one\r\r"
    b"data: no event or id: message, id 3 still\n\n"
    b"data: caf\xc3\xa9 \xe2\x82\xac\n\n"
)
EXPECTED = [
    SSEMessage("state", '{"a": 1}', "1", "1"),
    SSEMessage("acquired", "first line\nsecond line", "2", "2"),
    SSEMessage("released", " two spaces keep one", "3", "3"),
    SSEMessage("message", "no event or id: message, id 3 still", None, "3"),
    SSEMessage("message", "caf\u00e9 \u20ac", None, "3"),
]


def test_parser_reads_a_stream_given_whole():
    parser = SSEParser()
    assert parser.feed(STREAM) == EXPECTED
    assert parser.comments == 2 and parser.last_event_id == "3"


def test_parser_gives_the_same_messages_however_the_stream_is_cut():
    # Every cut point: inside field names, values, "\r\n" pairs and UTF-8 characters.
    for cut in range(1, len(STREAM)):
        parser = SSEParser()
        got = parser.feed(STREAM[:cut]) + parser.feed(STREAM[cut:])
        assert got == EXPECTED, cut
    parser = SSEParser()
    one_by_one = [m for i in range(len(STREAM)) for m in parser.feed(STREAM[i:i + 1])]
    assert one_by_one == EXPECTED


def test_parser_keeps_a_message_until_its_blank_line():
    parser = SSEParser()
    assert parser.feed(b"event: acquired\nid: 7\ndata: {}\n") == []
    assert parser.feed(b"\r") == [SSEMessage("acquired", "{}", "7", "7")]
    # The "\n" after that "\r" is part of the same line end, not a second blank line.
    assert parser.feed(b"\ndata: next\n") == []
    assert parser.feed(b"\n") == [SSEMessage("message", "next", None, "7")]


def test_parser_skips_comments_and_messages_without_data():
    parser = SSEParser()
    assert parser.feed(b": keep-alive\n\n: keep-alive\n\n") == []
    assert parser.comments == 2
    # An id alone dispatches nothing but moves the last event id; its event type
    # does not leak into the next message.
    assert parser.feed(b"event: lagged\nid: 9\n\ndata: x\n\n") == [
        SSEMessage("message", "x", None, "9")]
    assert parser.last_event_id == "9"


def test_parser_field_rules():
    parser = SSEParser(last_event_id="4")
    got = parser.feed(
        b"\xef\xbb\xbfdata\n\n"              # a byte order mark; a field without colon
        b"data:\ndata:\n\n"                  # empty data lines: one "\n"
        b"id: bad\x00id\ndata: a\n\n"        # an id with NUL is ignored
        b"retry: 2500\nretry: soon\nunknown: x\ndata: b\n\n"
        b"id\ndata: c\n\n"                   # "id" alone clears the id
    )
    assert got == [
        SSEMessage("message", "", None, "4"),
        SSEMessage("message", "\n", None, "4"),
        SSEMessage("message", "a", None, "4"),
        SSEMessage("message", "b", None, "4"),
        SSEMessage("message", "c", "", ""),
    ]
    assert parser.retry == 2500


def test_parser_waits_for_a_byte_order_mark_cut_in_two():
    parser = SSEParser()
    assert parser.feed(b"\xef\xbb") == []
    assert parser.feed(b"\xbfdata: x\n\n") == [SSEMessage("message", "x", None, "")]


def test_parser_drops_an_unfinished_message_and_refuses_endless_lines():
    parser = SSEParser()
    assert parser.feed(b"data: never ended\n") == []  # a dropped connection loses it
    small = SSEParser(max_bytes=64)
    with pytest.raises(ValueError):
        small.feed(b"data: " + b"x" * 100)
    with pytest.raises(ValueError):
        small.feed(b"".join(b"data: " + b"y" * 20 + b"\n" for _ in range(5)))


# -- the typed events --------------------------------------------------------------


def test_events_are_typed_and_carry_no_token():
    acquired = event_from_message(msg(
        "acquired", json.dumps(dict(change_json("acquired", "job", 12), token="secret")), "41"))
    assert acquired == LockEvent(type="acquired", name="job", mode="exclusive", fence=12,
                                 owner="node-a", expires_in=5.0,
                                 expires_at_ms=1700000000012, id=41)
    assert "secret" not in repr(acquired) and not hasattr(acquired, "token")

    released = event_from_message(msg("released", json.dumps(
        {"name": "job", "type": "released", "mode": "shared", "fence": 12, "owner": None,
         "expires_in_ms": 0, "expires_at_ms": None}), "42"))
    assert isinstance(released, LockEvent)
    assert (released.mode, released.owner, released.expires_in, released.expires_at_ms) == (
        "shared", None, 0.0, None)

    holder = {"owner": "node-a", "fence": 12, "mode": "exclusive", "expires_in_ms": 4000,
              "available_in_ms": 4000}
    state = event_from_message(msg("state", json.dumps(state_json(
        "job", held=True, mode="exclusive", fence=12, owner="node-a", expires_in_ms=4000,
        available_in_ms=4000, holders=[holder], holder_count=1)), "40"))
    assert isinstance(state, LockState) and isinstance(state, LockStatus)
    assert (state.type, state.id, state.held, state.owner, state.fence) == (
        "state", 40, True, "node-a", 12)
    assert state.holders[0].fence == 12 and state.expires_in == 4.0

    complete = event_from_message(msg(
        "state", '{"prefix": "billing:", "complete": true}', "43"))
    assert complete == StateComplete(prefix="billing:", id=43)
    lagged = event_from_message(msg("lagged", '{"missed": 17}', "44"))
    assert lagged == Lagged(missed=17, id=44) and lagged.type == "lagged"


def test_an_event_without_an_id_line_has_no_id_of_its_own():
    parser = SSEParser()
    messages = parser.feed(sse("acquired", 5, change_json("acquired", "job", 5))
                           + b"event: lagged\ndata: {\"missed\": 3}\n\n")
    lagged = event_from_message(messages[1])
    assert lagged == Lagged(missed=3, id=None) and messages[1].last_event_id == "5"


def test_unknown_and_unreadable_events_are_skipped():
    assert event_from_message(msg("renamed", "{}", "1")) is None
    assert event_from_message(msg("acquired", "not json", "2")) is None
    assert event_from_message(msg("acquired", '{"name": "x"}', "3")) is None


def test_the_prefix_path_is_quoted():
    assert prefix_events_path("billing:eu/") == "/v1/events?prefix=billing%3Aeu%2F"
    assert prefix_events_path("") == "/v1/events?prefix="


# -- resuming ----------------------------------------------------------------------


def test_a_resumed_stream_leaves_out_what_it_repeats_until_a_fresh_state():
    cursor = WatchCursor("/v1/locks/job/events", None, 45)
    headers = cursor.connecting()
    assert headers["Accept"] == "text/event-stream" and "Last-Event-ID" not in headers
    got = cursor.feed(sse("state", 1, state_json("job")) + sse(
        "acquired", 2, change_json("acquired", "job", 5)))
    assert [e.type for e in got] == ["state", "acquired"] and cursor.last_event_id == "2"

    cursor.dropped(None)
    assert 0 < cursor.take_pause() <= 0.25 and cursor.take_pause() == 0
    assert cursor.connecting()["Last-Event-ID"] == "2"
    # The broker repeats event 2: left out; event 3 is new.
    got = cursor.feed(sse("acquired", 2, change_json("acquired", "job", 5))
                      + sse("released", 3, change_json("released", "job", 5)))
    assert [(e.type, e.id) for e in got] == [("released", 3)]

    # Another broker could not resume: it starts with a state, and its ids are its own.
    cursor.dropped(BrokerUnavailable("gone", code="transport"))
    assert cursor.connecting()["Last-Event-ID"] == "3"
    got = cursor.feed(sse("state", 1, state_json("job"))
                      + sse("acquired", 2, change_json("acquired", "job", 6)))
    assert [(e.type, e.id) for e in got] == [("state", 1), ("acquired", 2)]
    assert cursor.last_event_id == "2"


def test_a_watch_given_an_id_resumes_after_it():
    cursor = WatchCursor("/v1/locks/job/events", "10", 45)
    assert cursor.connecting()["Last-Event-ID"] == "10"
    got = cursor.feed(sse("extended", 10, change_json("extended", "job", 5))
                      + sse("released", 11, change_json("released", "job", 5)))
    assert [(e.type, e.id) for e in got] == [("released", 11)]
    assert cursor.feed(b"id: 12\n\n") == [] and cursor.last_event_id == "12"  # an id alone


def test_reconnect_pauses_grow_and_honour_retry_after_and_refusals_end_the_watch():
    cursor = WatchCursor("/v1/locks/job/events", None, 45)
    pauses = []
    for _ in range(8):
        cursor.dropped(BrokerUnavailable("down", code="transport"))
        pauses.append(cursor.take_pause())
    assert pauses[-1] > pauses[0] and max(pauses) <= 15
    cursor.dropped(BrokerUnavailable("too many", code="too_many_streams", status=429,
                                     retry_after=30))
    assert cursor.take_pause() >= 30
    with pytest.raises(InvalidRequest):
        cursor.dropped(InvalidRequest("no such route", code="not_found", status=404))
    with pytest.raises(BrokerUnavailable):
        cursor.dropped(BrokerUnavailable("untrusted", code="tls"))


def test_the_leader_view_follows_the_exclusive_holder_and_never_goes_back():
    view = LeaderView()
    view.apply(LockState(name="x", held=False, owner=None, fence=None, expires_in=0,
                         available_in=0))
    assert view.leader is None and view.leader_term is None
    view.apply(event_from_message(msg("acquired", json.dumps(
        change_json("acquired", "x", 7, owner="node-a")), "2")))
    assert (view.leader, view.leader_term) == ("node-a", 7)
    # A late event about an older lease changes nothing.
    view.apply(event_from_message(msg("released", json.dumps(
        change_json("released", "x", 6, owner="node-b")), "3")))
    assert (view.leader, view.leader_term) == ("node-a", 7)
    view.apply(event_from_message(msg("expired", json.dumps(
        change_json("expired", "x", 7, owner="node-a")), "4")))
    assert view.leader is None
    view.apply(event_from_message(msg("acquired", json.dumps(
        change_json("acquired", "x", 8, owner="node-b", mode="shared")), "5")))
    assert view.leader is None  # a shared lease is nobody's leadership


# -- reconnecting, against a scripted server ---------------------------------------


class ScriptedServer:
    """An HTTP server in this process answering each event-stream request with the
    next step of a script, then 404: ``("error", status, code, retry_after)``,
    ``("stream", pieces, chunked)`` (the pieces, then the connection ends) or
    ``("hold", pieces)`` (the pieces, then the connection stays open)."""

    def __init__(self, script: list) -> None:
        self.script = list(script)
        self.requests: List[Dict[str, str]] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                server.requests.append(dict(self.headers.items(), path=self.path))
                step = server.script.pop(0) if server.script else ("error", 404, "not_found", None)
                if step[0] == "error":
                    _, status, code, retry_after = step
                    body = json.dumps({"error": {"code": code, "message": code}}).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    if retry_after is not None:
                        self.send_header("Retry-After", retry_after)
                    self.end_headers()
                    self.wfile.write(body)
                    return
                chunked = step[0] == "stream" and step[2]
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Connection", "close")
                self.end_headers()
                for piece in step[1]:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                    self.wfile.flush()
                    time.sleep(0.02)
                if step[0] == "hold":
                    server.release.wait(10)
                self.close_connection = True  # the stream drops, mid-body when chunked

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


DROPPING_SCRIPT = [
    ("error", 429, "too_many_streams", "0"),
    ("stream", [
        b'event: state\nid: 1\nda',
        b'ta: ' + json.dumps(state_json("job")).encode() + b'\n\n: keep-alive\n\nevent: acq',
        b'uired\r\nid: 2\r\ndata: ' + json.dumps(change_json("acquired", "job", 5)).encode()
        + b'\r',
        b'\n\r\n',
    ], True),
    ("stream", [
        sse("acquired", 2, change_json("acquired", "job", 5)),  # repeated: left out
        sse("released", 3, change_json("released", "job", 5, expires_in_ms=0)),
    ], False),
]


@pytest.fixture
def scripted():
    servers: List[ScriptedServer] = []

    def start(script: list) -> ScriptedServer:
        server = ScriptedServer(script)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def check_dropping_script(server: ScriptedServer, got: list) -> None:
    assert [(e.type, e.id) for e in got] == [("state", 1), ("acquired", 2), ("released", 3)]
    assert isinstance(got[0], LockState) and isinstance(got[1], LockEvent)
    sent = [(r["path"], r.get("Last-Event-ID")) for r in server.requests]
    assert sent == [("/v1/locks/job/events", None), ("/v1/locks/job/events", None),
                    ("/v1/locks/job/events", "2"), ("/v1/locks/job/events", "3")]
    assert all(r["Accept"] == "text/event-stream" for r in server.requests)


def test_watch_reconnects_with_the_last_event_id_until_refused(scripted):
    server = scripted(DROPPING_SCRIPT)
    got = []
    with Client(server.url, timeout=5).watch("job") as events:
        with pytest.raises(InvalidRequest):  # the script's end: 404 is not retried
            for event in events:
                got.append(event)
        assert events.last_event_id == "3"
        assert list(events) == []  # a refused watch stays ended
    check_dropping_script(server, got)


def test_async_watch_reconnects_with_the_last_event_id_until_refused(scripted):
    server = scripted(DROPPING_SCRIPT)

    async def scenario():
        got = []
        async with AsyncClient(server.url, timeout=5).watch("job") as events:
            with pytest.raises(InvalidRequest):
                async for event in events:
                    got.append(event)
            assert events.last_event_id == "3"
        return got

    check_dropping_script(server, run(scenario()))


def test_closing_a_watch_from_another_thread_ends_the_iteration(scripted):
    server = scripted([("hold", [sse("state", 1, state_json("job"))])])
    with Client(server.url, timeout=5).watch("job") as events:
        assert take(events, 1)[0].type == "state"
        threading.Timer(0.2, events.close).start()
        started = time.monotonic()
        assert list(events) == []  # blocked reading, then closed
        assert time.monotonic() - started < 2
    assert len(server.requests) == 1  # not reopened


def test_closing_an_async_watch_ends_the_iteration(scripted):
    server = scripted([("hold", [sse("state", 1, state_json("job"))])])

    async def scenario():
        events = AsyncClient(server.url, timeout=5).watch("job")
        assert (await atake(events, 1))[0].type == "state"
        asyncio.get_running_loop().call_later(0.2, events.close)
        started = time.monotonic()
        assert [event async for event in events] == []
        assert time.monotonic() - started < 2

    run(scenario())
    assert len(server.requests) == 1


# -- against a real broker: watching -----------------------------------------------


def test_watch_yields_state_then_acquired_extended_released(client, name):
    with client.watch(name) as events:
        state = take(events, 1)[0]
        assert isinstance(state, LockState) and state.type == "state"
        assert state.name == name and not state.held and state.owner is None

        lease = client.acquire(name, ttl=5, owner="watch-test")
        lease.extend(8)
        lease.release()
        acquired, extended, released = take(events, 3)

    assert [e.type for e in (acquired, extended, released)] == ["acquired", "extended", "released"]
    for event in (acquired, extended, released):
        assert isinstance(event, LockEvent)
        assert (event.name, event.mode, event.fence) == (name, "exclusive", lease.fence)
    assert acquired.owner == extended.owner == "watch-test"
    assert released.owner in ("watch-test", None)  # "owner (or null)"
    assert 4 < acquired.expires_in <= 5 and acquired.expires_at_ms is not None
    assert 7 < extended.expires_in <= 8 and extended.expires_at_ms > acquired.expires_at_ms
    assert released.expires_in == 0
    ids = [e.id for e in (state, acquired, extended, released)]
    assert all(isinstance(i, int) for i in ids) and ids == sorted(set(ids))
    assert events.last_event_id == str(released.id)


def test_watch_reports_an_expiry(client, name):
    with client.watch(name) as events:
        take(events, 1)
        lease = client.acquire(name, ttl=0.3, owner="expiring")
        acquired, expired = take(events, 2, timeout=5)
    assert (acquired.type, expired.type) == ("acquired", "expired")
    assert expired.fence == lease.fence and expired.expires_in == 0


class RawStream:
    """An event stream read byte for byte by a thread of its own, past this client."""

    def __init__(self, broker, path: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", broker.port, timeout=10)
        self.conn.connect()
        self.sock = self.conn.sock
        self.conn.request("GET", path, headers={"Accept": "text/event-stream"})
        self.response = self.conn.getresponse()
        self.raw = b""
        self._until: Optional[bytes] = None
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while True:
                piece = self.response.read1(65536)
                if not piece:
                    return
                with self._changed:
                    self.raw += piece
                    self._changed.notify_all()
        except Exception:  # the end of the stream, or the test's close
            return

    def wait_for(self, needle: bytes, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: needle in self.raw, timeout)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader; it closes nothing
        except OSError:
            pass
        self._thread.join(5)
        self.conn.close()


def test_no_token_appears_in_any_event(broker, client, name):
    stream = RawStream(broker, f"/v1/locks/{quote(name, safe='')}/events")
    assert stream.response.status == 200
    assert stream.response.getheader("Content-Type").startswith("text/event-stream")
    assert stream.wait_for(b"event: state", 5)
    with client.watch(name) as events:
        take(events, 1)
        tokens = []
        exclusive = client.acquire(name, ttl=5, owner="writer")
        tokens.append(exclusive.token)
        exclusive.extend(6)
        exclusive.release()
        readers = [client.acquire(name, ttl=5, owner=f"reader-{i}", shared=True) for i in (1, 2)]
        tokens += [reader.token for reader in readers]
        for reader in readers:
            reader.release()
        expiring = client.acquire(name, ttl=0.3, owner="expiring")
        tokens.append(expiring.token)
        typed = take(events, 8, timeout=5)
    try:
        assert stream.wait_for(b"event: expired", 5), stream.raw.decode(errors="replace")[-500:]
    finally:
        stream.close()
    raw = stream.raw

    assert [e.type for e in typed] == [
        "acquired", "extended", "released", "acquired", "acquired", "released", "released",
        "acquired",
    ]
    assert b'"token"' not in raw
    for token in tokens:
        assert token.encode() not in raw
        assert all(token not in repr(event) for event in typed)
    assert all(not hasattr(event, "token") for event in typed)


def test_a_resumed_watch_does_not_repeat_events(client, name):
    with client.watch(name) as events:
        take(events, 1)
        lease = client.acquire(name, ttl=5)
        (acquired,) = take(events, 1)
        resume_from = events.last_event_id
    assert acquired.type == "acquired" and resume_from == str(acquired.id)

    lease.extend(6)  # while nobody watches
    lease.release()
    with client.watch(name, last_event_id=resume_from) as resumed:
        got = take(resumed, 2)
    assert [e.type for e in got] == ["extended", "released"]
    assert all(e.id > acquired.id and e.fence == lease.fence for e in got)


def test_watch_prefix_sends_each_held_lock_then_complete_then_changes(client, name):
    prefix = f"{name}:"
    first = client.acquire(prefix + "a", ttl=5, owner="a")
    second = client.acquire(prefix + "b", ttl=5, owner="b")
    outside = client.acquire(name + "-outside", ttl=5)
    third = None
    try:
        with client.watch_prefix(prefix) as events:
            snapshot = take(events, 3)
            assert all(e.type == "state" for e in snapshot)
            held = {(e.name, e.owner, e.fence) for e in snapshot[:2]}
            assert held == {(prefix + "a", "a", first.fence), (prefix + "b", "b", second.fence)}
            assert all(isinstance(e, LockState) and e.held for e in snapshot[:2])
            assert snapshot[2] == StateComplete(prefix=prefix, id=snapshot[2].id)

            outside.release()  # not under the prefix: no event
            third = client.acquire(prefix + "c", ttl=5, owner="c")
            first.release()
            acquired, released = take(events, 2)
    finally:
        for lease in (first, second, third, outside):
            if lease is not None and not lease.released:
                lease.release()
    assert third is not None
    assert (acquired.type, acquired.name, acquired.fence) == ("acquired", prefix + "c", third.fence)
    assert (released.type, released.name, released.fence) == ("released", prefix + "a", first.fence)


def test_async_watch_yields_state_then_changes(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.watch(name) as events:
            (state,) = await atake(events, 1)
            assert isinstance(state, LockState) and not state.held
            async with client.lock(name, ttl=5, owner="async-watch") as lease:
                (acquired,) = await atake(events, 1)
            (released,) = await atake(events, 1)
        assert (acquired.type, acquired.fence, acquired.owner) == (
            "acquired", lease.fence, "async-watch")
        assert (released.type, released.fence) == ("released", lease.fence)
        assert released.id > acquired.id > state.id

    run(scenario())


def test_async_watch_yields_extended_with_its_expiry_and_ids_in_order(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.watch(name) as events:
            (state,) = await atake(events, 1)
            lease = await client.acquire(name, ttl=5, owner="watch-test")
            await lease.extend(8)
            await lease.release()
            acquired, extended, released = await atake(events, 3)
        assert [e.type for e in (acquired, extended, released)] == [
            "acquired", "extended", "released"]
        for event in (acquired, extended, released):
            assert isinstance(event, LockEvent)
            assert (event.name, event.mode, event.fence) == (name, "exclusive", lease.fence)
        assert 4 < acquired.expires_in <= 5
        assert 7 < extended.expires_in <= 8 and extended.expires_at_ms > acquired.expires_at_ms
        assert released.expires_in == 0
        ids = [e.id for e in (state, acquired, extended, released)]
        assert ids == sorted(set(ids)) and events.last_event_id == str(released.id)

    run(scenario())


def test_async_watch_reports_an_expiry(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.watch(name) as events:
            await atake(events, 1)
            lease = await client.acquire(name, ttl=0.3, owner="expiring")
            acquired, expired = await atake(events, 2, timeout=5)
        assert (acquired.type, expired.type) == ("acquired", "expired")
        assert expired.fence == lease.fence and expired.expires_in == 0

    run(scenario())


def test_async_a_resumed_watch_does_not_repeat_events(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.watch(name) as events:
            await atake(events, 1)
            lease = await client.acquire(name, ttl=5)
            (acquired,) = await atake(events, 1)
            resume_from = events.last_event_id
        assert acquired.type == "acquired" and resume_from == str(acquired.id)

        await lease.extend(6)  # while nobody watches
        await lease.release()
        async with client.watch(name, last_event_id=resume_from) as resumed:
            got = await atake(resumed, 2)
        assert [e.type for e in got] == ["extended", "released"]
        assert all(e.id > acquired.id and e.fence == lease.fence for e in got)

    run(scenario())


def test_async_watch_prefix_sends_each_held_lock_then_complete_then_changes(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        prefix = f"{name}:"
        first = await client.acquire(prefix + "a", ttl=5, owner="a")
        second = await client.acquire(prefix + "b", ttl=5, owner="b")
        outside = await client.acquire(name + "-outside", ttl=5)
        async with client.watch_prefix(prefix) as events:
            snapshot = await atake(events, 3)
            held = {(e.name, e.owner, e.fence) for e in snapshot[:2]}
            assert held == {(prefix + "a", "a", first.fence), (prefix + "b", "b", second.fence)}
            assert all(isinstance(e, LockState) and e.held for e in snapshot[:2])
            assert snapshot[2] == StateComplete(prefix=prefix, id=snapshot[2].id)

            await outside.release()  # not under the prefix: no event
            third = await client.acquire(prefix + "c", ttl=5, owner="c")
            await first.release()
            acquired, released = await atake(events, 2)
        assert (acquired.type, acquired.name, acquired.fence) == (
            "acquired", prefix + "c", third.fence)
        assert (released.type, released.name, released.fence) == (
            "released", prefix + "a", first.fence)
        for lease in (second, third):
            await lease.release()

    run(scenario())


# -- against a real broker: electing a leader --------------------------------------


def test_two_leaders_on_one_name_one_leads_the_other_follows(client, name):
    with client.leader(name, ttl=1.5, owner="node-a") as a, \
            client.leader(name, ttl=1.5, owner="node-b") as b:
        assert isinstance(a, Leader)
        wait_until(lambda: a.is_leader or b.is_leader, 10, "nobody was elected")
        first, second = (a, b) if a.is_leader else (b, a)
        time.sleep(2)  # past the TTL: the leader renews, the other keeps waiting
        assert first.is_leader and not second.is_leader
        assert first.elected.is_set() and not second.elected.is_set()
        assert first.term == client.status(name).fence and second.term is None
        assert first.leader == first.owner
        wait_until(lambda: second.leader == first.owner, 5, "the follower did not see the leader")
        assert second.leader_term == first.term
        assert not first.lost.is_set() and not second.lost.is_set()
        assert first.owner in repr(first) and "following" in repr(second)

        started = time.monotonic()
        second.stop()  # ends its waiting acquire at once
        assert time.monotonic() - started < 1.5
        assert first.is_leader and client.status(name).owner == first.owner


def test_stopping_the_leader_makes_the_other_lead_with_a_larger_term(client, name):
    a = client.leader(name, ttl=2, owner="node-a").start()
    b = client.leader(name, ttl=2, owner="node-b").start()
    try:
        wait_until(lambda: a.is_leader or b.is_leader, 10, "nobody was elected")
        first, second = (a, b) if a.is_leader else (b, a)
        old_term = first.term
        first.stop()
        assert not first.is_leader and first.term is None
        assert not first.lost.is_set()  # stepping down is no loss
        assert second.elected.wait(5), "the follower did not take over"
        assert second.is_leader and second.term > old_term
        assert client.status(name).owner == second.owner
        wait_until(lambda: second.leader == second.owner, 5, "no leader seen")
        second.resign()
        assert not second.is_leader
        wait_until(lambda: not client.status(name).held, 5, "resign did not release")
    finally:
        a.stop()
        b.stop()


def test_a_leader_whose_lease_is_lost_sets_lost_and_leads_no_more(client, redis, name):
    with client.leader(name, ttl=1.5, owner="node-a") as leader:
        assert leader.elected.wait(10)
        term = leader.term
        assert redis.command("DEL", lease_key(name)) == 1
        assert leader.lost.wait(3), "the renewer did not notice the lost lease"
        assert leader.lost_reason == "lease_lost"
        assert not leader.is_leader and leader.term is None
        # One term per helper: a new one campaigns again, with a larger term.
        with client.leader(name, ttl=1.5, owner="node-a") as again:
            assert again.elected.wait(10)
            assert again.term > term


def test_async_leaders_hand_over_with_a_larger_term(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        a = await client.leader(name, ttl=2, owner="node-a").start()
        b = client.leader(name, ttl=2, owner="node-b")
        assert isinstance(b, AsyncLeader)
        try:
            await asyncio.wait_for(a.elected.wait(), 10)
            await b.start()
            await asyncio.sleep(0.5)
            assert a.is_leader and not b.is_leader and b.term is None
            for _ in range(100):
                if b.leader == "node-a":
                    break
                await asyncio.sleep(0.05)
            assert b.leader == "node-a" and b.leader_term == a.term
            term = a.term
            await a.stop()
            assert not a.is_leader and not a.lost.is_set()
            await asyncio.wait_for(b.elected.wait(), 5)
            assert b.is_leader and b.term > term
        finally:
            await a.stop()
            await b.stop()
        assert not (await client.status(name)).held

    run(scenario())


def test_async_two_leaders_on_one_name_one_leads_the_other_follows(broker, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.leader(name, ttl=1.5, owner="node-a") as a, \
                client.leader(name, ttl=1.5, owner="node-b") as b:
            for _ in range(200):
                if a.is_leader or b.is_leader:
                    break
                await asyncio.sleep(0.05)
            assert a.is_leader or b.is_leader, "nobody was elected"
            first, second = (a, b) if a.is_leader else (b, a)
            await asyncio.sleep(2)  # past the TTL: the leader renews, the other keeps waiting
            assert first.is_leader and not second.is_leader
            assert first.elected.is_set() and not second.elected.is_set()
            assert first.term == (await client.status(name)).fence and second.term is None
            for _ in range(100):
                if second.leader == first.owner:
                    break
                await asyncio.sleep(0.05)
            assert second.leader == first.owner and second.leader_term == first.term
            assert not first.lost.is_set() and not second.lost.is_set()

            started = time.monotonic()
            await second.stop()  # ends its waiting acquire at once
            assert time.monotonic() - started < 1.5
            assert first.is_leader and (await client.status(name)).owner == first.owner
        assert not (await client.status(name)).held

    run(scenario())


def test_async_a_leader_whose_lease_is_lost_sets_lost_and_leads_no_more(broker, redis, name):
    async def scenario():
        client = AsyncClient(broker.url, timeout=5)
        async with client.leader(name, ttl=1.5, owner="node-a") as leader:
            await asyncio.wait_for(leader.elected.wait(), 10)
            term = leader.term
            assert redis.command("DEL", lease_key(name)) == 1
            await asyncio.wait_for(leader.lost.wait(), 3)
            assert leader.lost_reason == "lease_lost"
            assert not leader.is_leader and leader.term is None
            # One term per helper: a new one campaigns again, with a larger term.
            async with client.leader(name, ttl=1.5, owner="node-a") as again:
                await asyncio.wait_for(again.elected.wait(), 10)
                assert again.term > term

    run(scenario())
