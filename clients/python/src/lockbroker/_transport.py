"""HTTP/1.1 exchanges with the broker on the standard library only: a small pool of
keep-alive ``http.client`` connections for the sync client, one connection per
request over ``asyncio`` streams for the async one. Both return the decoded JSON of
a 2xx answer and raise a :mod:`lockbroker.errors` exception for anything else.

Event streams (``text/event-stream``) get a connection of their own, outside the
pool: :class:`SyncStream` and :class:`AsyncStream` hand out the body as it comes.
A :class:`Cancel` lets another thread end a blocking stream or exchange."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import ssl
import threading
from typing import Any, Awaitable, Dict, Generic, List, Optional, Set, Tuple, TypeVar
from urllib.parse import urlsplit

from ._version import __version__
from .errors import BrokerUnavailable, LockBrokerError, error_from_response

USER_AGENT = f"lockbroker-python/{__version__}"
#: Idle keep-alive connections kept per sync client.
MAX_IDLE = 4
#: Longest header block or chunk-size line accepted from the broker.
MAX_LINE = 64 * 1024
#: Most header lines accepted in one response.
MAX_HEADERS = 100
#: Largest response body the async client reads (event streams aside): the
#: broker's largest answer, a status listing 100 holders, is a few dozen KiB.
MAX_BODY = 1024 * 1024

#: Most bytes one read of an event stream returns.
READ_SIZE = 64 * 1024

_RESET = (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected)


class Endpoint:
    """The broker's base URL, split once: scheme, host, port and a path prefix
    (for a broker behind a reverse proxy at ``https://host/lockbroker``)."""

    def __init__(self, url: str, api_key: Optional[str]) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"broker URL must be http:// or https://host[:port], not {url!r}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        host_header = self.host if ":" not in self.host else f"[{self.host}]"
        if parts.port:
            host_header += f":{parts.port}"
        self.headers = {
            "Host": host_header,
            "User-Agent": USER_AGENT,
            "Accept": "application/json",
        }
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def target(self, path: str) -> str:
        return self.prefix + path

    def describe(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.headers['Host']}{self.prefix}"

    def headers_for(self, method: str, **extra: str) -> Dict[str, str]:
        """The headers of one request: a JSON body goes with everything but GET."""
        headers = dict(self.headers, **extra)
        if method != "GET":
            headers["Content-Type"] = "application/json"
        return headers


def _encode(body: Optional[Dict[str, Any]]) -> bytes:
    return b"" if body is None else json.dumps(body, separators=(",", ":")).encode()


def _decode(status: int, raw: bytes, retry_after: Optional[str]) -> Dict[str, Any]:
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        data = None
    if 200 <= status < 300:
        if not isinstance(data, dict):
            raise LockBrokerError(
                "the broker answered with a body that is not a JSON object",
                code="bad_response",
                status=status,
            )
        return data
    raise error_from_response(status, data, retry_after)


def _check_event_stream(endpoint: Endpoint, status: int, content_type: Optional[str]) -> None:
    """A 2xx answer to a stream request must be an event stream (a proxy's HTML
    page is not one, and reading it again would not make it one)."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media != "text/event-stream":
        raise LockBrokerError(
            f"{endpoint.describe()} answered an event-stream request with "
            f"{media or 'no content type'}, not text/event-stream",
            code="bad_response",
            status=status,
        )


def _silent(endpoint: Endpoint, idle_timeout: float) -> BrokerUnavailable:
    return BrokerUnavailable(
        f"the event stream from {endpoint.describe()} sent nothing (not even a "
        f"keep-alive) for {idle_timeout:g}s",
        code="transport",
    )


def _cancelled(endpoint: Endpoint) -> BrokerUnavailable:
    return BrokerUnavailable(f"the exchange with {endpoint.describe()} was cancelled",
                             code="cancelled")


def _unavailable(endpoint: Endpoint, error: BaseException) -> BrokerUnavailable:
    where = f"cannot reach the broker at {endpoint.describe()}"
    if isinstance(error, ssl.SSLCertVerificationError):
        # Retrying does not help, and the fix is on this side: say which.
        return BrokerUnavailable(
            f"{where}: TLS: the broker's certificate is not trusted "
            f"({error.verify_message or error.reason}); for a broker whose certificate "
            "comes from a private CA, pass ca_cert= (or set LOCKBROKER_CA_CERT)",
            code="tls",
        )
    if isinstance(error, ssl.SSLError):
        reason = f"TLS handshake failed ({error.reason or error})"
    elif isinstance(error, (socket.timeout, asyncio.TimeoutError)):
        reason = "timed out"
    else:
        reason = str(error) or type(error).__name__
    return BrokerUnavailable(f"{where}: {reason}", code="transport")


#: What a transport's ``request`` returns: the answer, or an awaitable of it.
R = TypeVar("R")


class _Transport(Generic[R]):
    """What both transports share: the endpoint, the default timeout, TLS settings
    (``tls``, or the system's roots for an ``https://`` URL without it), and the
    call the clients make."""

    def __init__(
        self,
        url: str,
        api_key: Optional[str],
        timeout: float,
        tls: Optional[ssl.SSLContext] = None,
    ) -> None:
        self.endpoint = Endpoint(url, api_key)
        self.timeout = timeout
        self._ssl: Optional[ssl.SSLContext] = None
        if self.endpoint.tls:
            self._ssl = tls or ssl.create_default_context()

    def request(
        self,
        method: str,
        path: str,
        body: Optional[Dict[str, Any]] = None,
        timeout: Optional[float] = None,
    ) -> R:
        """One exchange: the decoded JSON object of a 2xx answer (to be awaited, from
        the async transport); ``timeout`` defaults to the client's."""
        return self._send(method, path, _encode(body), self.timeout if timeout is None else timeout)

    def _send(self, method: str, path: str, payload: bytes, timeout: float) -> R:
        raise NotImplementedError


class Cancel:
    """Ends blocking exchanges from another thread: :meth:`cancel` shuts down the
    socket of every exchange made with this handle that is still open, and every
    later one fails at once (with :class:`BrokerUnavailable`, code
    ``cancelled``). :meth:`wait` is a pause that ends early on cancelling."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: Set[socket.socket] = set()
        self._event = threading.Event()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        """Pauses ``seconds``; ``True`` (at once) if cancelled meanwhile."""
        return self._event.wait(seconds)

    def cancel(self) -> None:
        with self._lock:
            self._event.set()
            open_now = list(self._open)
        for sock in open_now:
            _shut_down(sock)

    def _attach(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._event.is_set():
                return False
            self._open.add(sock)
            return True

    def _detach(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)


def _shut_down(sock: socket.socket) -> None:
    """Wakes a thread blocked reading ``sock``: it reads the end of the stream. The
    plain socket's shutdown, also for TLS: the TLS object stays to the reader."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class SyncTransport(_Transport[Dict[str, Any]]):
    """Thread-safe: each request takes a pooled connection or opens one."""

    def __init__(
        self,
        url: str,
        api_key: Optional[str],
        timeout: float,
        tls: Optional[ssl.SSLContext] = None,
    ) -> None:
        super().__init__(url, api_key, timeout, tls)
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _send(self, method: str, path: str, payload: bytes, timeout: float) -> Dict[str, Any]:
        """A pooled connection the broker has closed meanwhile is retried once on a
        fresh one; every call this client makes is safe to repeat (acquires carry a
        ``request_id``)."""
        for attempt in (1, 2):
            conn, reused = self._take(timeout)
            try:
                status, raw, retry_after, keep = self._exchange(conn, method, path, payload)
            except _RESET as error:
                conn.close()
                if reused and attempt == 1:
                    continue
                raise _unavailable(self.endpoint, error) from None
            except (OSError, http.client.HTTPException) as error:
                conn.close()
                raise _unavailable(self.endpoint, error) from None
            self._give_back(conn, keep)
            return _decode(status, raw, retry_after)
        raise AssertionError("unreachable")

    def _exchange(
        self, conn: http.client.HTTPConnection, method: str, path: str, payload: bytes
    ) -> Tuple[int, bytes, Optional[str], bool]:
        headers = self.endpoint.headers_for(method)
        conn.request(method, self.endpoint.target(path), body=payload or None, headers=headers)
        response = conn.getresponse()
        raw = _read_capped(response)
        keep = not response.will_close
        return response.status, raw, response.getheader("Retry-After"), keep

    def request_cancellable(
        self,
        method: str,
        path: str,
        body: Optional[Dict[str, Any]],
        timeout: float,
        cancel: Cancel,
    ) -> Dict[str, Any]:
        """:meth:`request` on a connection of its own, which ``cancel`` can end from
        another thread (a waiting acquire the caller no longer wants)."""
        conn, sock = self._connect(timeout, cancel)
        try:
            status, raw, retry_after, _keep = self._exchange(conn, method, path, _encode(body))
        except (OSError, http.client.HTTPException) as error:
            raise (_cancelled(self.endpoint) if cancel.cancelled
                   else _unavailable(self.endpoint, error)) from None
        finally:
            cancel._detach(sock)
            conn.close()
        return _decode(status, raw, retry_after)

    def open_stream(
        self,
        path: str,
        headers: Dict[str, str],
        timeout: float,
        idle_timeout: float,
        cancel: Cancel,
    ) -> "SyncStream":
        """Opens an event stream on a connection of its own: ``timeout`` bounds
        connecting and the answer's headers, ``idle_timeout`` every read after.
        Raises the error of a non-2xx answer, as :meth:`request` does."""
        conn, sock = self._connect(timeout, cancel)
        try:
            conn.request("GET", self.endpoint.target(path),
                         headers=dict(self.endpoint.headers_for("GET"), **headers))
            response = conn.getresponse()
            if not 200 <= response.status < 300:
                _decode(response.status, _read_capped(response),
                        response.getheader("Retry-After"))
            _check_event_stream(self.endpoint, response.status, response.getheader("Content-Type"))
            # The socket, not conn.sock: http.client hands a response that ends
            # with the connection over to it, and sets conn.sock to None.
            sock.settimeout(idle_timeout)
        except LockBrokerError:
            cancel._detach(sock)
            conn.close()
            raise
        except (OSError, http.client.HTTPException) as error:
            cancel._detach(sock)
            conn.close()
            raise (_cancelled(self.endpoint) if cancel.cancelled
                   else _unavailable(self.endpoint, error)) from None
        return SyncStream(self.endpoint, conn, sock, response, idle_timeout, cancel)

    def _connect(
        self, timeout: float, cancel: Cancel
    ) -> Tuple[http.client.HTTPConnection, socket.socket]:
        """A fresh connection, connected, and its socket attached to ``cancel``."""
        if cancel.cancelled:
            raise _cancelled(self.endpoint)
        conn = self._new_connection(timeout)
        try:
            conn.connect()
        except (OSError, http.client.HTTPException) as error:
            conn.close()
            raise _unavailable(self.endpoint, error) from None
        sock = conn.sock
        if sock is None or not cancel._attach(sock):
            conn.close()
            raise _cancelled(self.endpoint)
        return conn, sock

    def _take(self, timeout: float) -> Tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is not None:
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            return conn, True
        return self._new_connection(timeout), False

    def _new_connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.endpoint.tls:
            return http.client.HTTPSConnection(
                self.endpoint.host, self.endpoint.port, timeout=timeout, context=self._ssl
            )
        return http.client.HTTPConnection(self.endpoint.host, self.endpoint.port, timeout=timeout)

    def _give_back(self, conn: http.client.HTTPConnection, keep: bool) -> None:
        with self._lock:
            if keep and len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class SyncStream:
    """The body of an event stream as it arrives, on its own connection."""

    def __init__(
        self,
        endpoint: Endpoint,
        conn: http.client.HTTPConnection,
        sock: socket.socket,
        response: http.client.HTTPResponse,
        idle_timeout: float,
        cancel: Cancel,
    ) -> None:
        self._endpoint = endpoint
        self._conn = conn
        self._sock = sock
        self._response = response
        self._idle_timeout = idle_timeout
        self._cancel = cancel

    def read(self) -> bytes:
        """The next piece of the body (whatever one read brings, chunked framing
        removed); ``b""`` once the stream ended or was cancelled. Raises
        :class:`BrokerUnavailable` when the connection fails or stays silent for
        the idle timeout."""
        try:
            return self._response.read1(READ_SIZE)
        except socket.timeout:
            if self._cancel.cancelled:
                return b""
            raise _silent(self._endpoint, self._idle_timeout) from None
        except (OSError, http.client.HTTPException, ValueError) as error:
            if self._cancel.cancelled:
                return b""
            raise _unavailable(self._endpoint, error) from None

    def close(self) -> None:
        self._cancel._detach(self._sock)
        self._response.close()
        self._conn.close()


class AsyncTransport(_Transport[Awaitable[Dict[str, Any]]]):
    """One short-lived connection per request: no pool to share between tasks or
    event loops, and cancelling a request (say, a waiting acquire) just closes it."""

    async def _send(
        self, method: str, path: str, payload: bytes, timeout: float
    ) -> Dict[str, Any]:
        try:
            status, raw, retry_after = await asyncio.wait_for(
                self._exchange(method, path, payload), timeout
            )
        except (
            OSError,
            asyncio.TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,
        ) as error:
            raise _unavailable(self.endpoint, error) from None
        return _decode(status, raw, retry_after)

    async def _exchange(
        self, method: str, path: str, payload: bytes
    ) -> Tuple[int, bytes, Optional[str]]:
        endpoint = self.endpoint
        reader, writer = await asyncio.open_connection(
            endpoint.host,
            endpoint.port,
            ssl=self._ssl,
            server_hostname=endpoint.host if self._ssl else None,
            limit=MAX_LINE,
        )
        try:
            lines = [f"{method} {endpoint.target(path)} HTTP/1.1"]
            headers = endpoint.headers_for(method, Connection="close")
            if method != "GET":
                headers["Content-Length"] = str(len(payload))
            lines += [f"{key}: {value}" for key, value in headers.items()]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload)
            await writer.drain()
            return await _read_response(reader)
        finally:
            await _close(writer)

    async def open_stream(
        self, path: str, headers: Dict[str, str], timeout: float
    ) -> "AsyncStream":
        """Opens an event stream on a connection of its own; ``timeout`` bounds
        connecting and the answer's headers. Raises the error of a non-2xx answer,
        as :meth:`request` does."""
        try:
            return await asyncio.wait_for(self._open_stream(path, headers), timeout)
        except (
            OSError,
            asyncio.TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,
        ) as error:
            raise _unavailable(self.endpoint, error) from None

    async def _open_stream(self, path: str, headers: Dict[str, str]) -> "AsyncStream":
        endpoint = self.endpoint
        reader, writer = await asyncio.open_connection(
            endpoint.host,
            endpoint.port,
            ssl=self._ssl,
            server_hostname=endpoint.host if self._ssl else None,
            limit=MAX_LINE,
        )
        try:
            request_headers = dict(endpoint.headers_for("GET"), **headers)
            lines = [f"GET {endpoint.target(path)} HTTP/1.1"]
            lines += [f"{key}: {value}" for key, value in request_headers.items()]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            await writer.drain()
            status, head = await _read_head(reader)
            if not 200 <= status < 300:
                _decode(status, await _read_body(reader, status, head), head.get("retry-after"))
            _check_event_stream(endpoint, status, head.get("content-type"))
        except BaseException:
            writer.transport.abort()
            raise
        return AsyncStream(endpoint, reader, writer, head)


class AsyncStream:
    """The body of an event stream as it arrives, on its own connection: chunked
    framing (or a Content-Length) removed, one read at a time."""

    def __init__(
        self,
        endpoint: Endpoint,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        headers: Dict[str, str],
    ) -> None:
        self._endpoint = endpoint
        self._reader = reader
        self._writer = writer
        self._chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        length = headers.get("content-length")
        #: Bytes left of a Content-Length body (``None``: until the connection ends).
        self._body_left = None if self._chunked or length is None else int(length)
        self._chunk_left = 0
        self._ended = False

    async def read(self, idle_timeout: float) -> bytes:
        """The next piece of the body; ``b""`` once the stream ended or the
        connection was closed. Raises :class:`BrokerUnavailable` when the
        connection fails or stays silent for ``idle_timeout`` seconds."""
        try:
            return await asyncio.wait_for(self._read(), idle_timeout)
        except asyncio.TimeoutError:
            raise _silent(self._endpoint, idle_timeout) from None
        except asyncio.IncompleteReadError:
            return b""  # the connection ended inside a chunk: the stream dropped
        except (OSError, asyncio.LimitOverrunError, ValueError) as error:
            raise _unavailable(self._endpoint, error) from None

    async def _read(self) -> bytes:
        reader = self._reader
        if self._ended:
            return b""
        if not self._chunked:
            size = READ_SIZE if self._body_left is None else min(READ_SIZE, self._body_left)
            if size == 0:
                self._ended = True
                return b""
            data = await reader.read(size)
            if self._body_left is not None:
                self._body_left -= len(data)
            if not data:
                self._ended = True
            return data
        if self._chunk_left == 0:
            self._chunk_left = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if self._chunk_left == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers, if any
                self._ended = True
                return b""
        data = await reader.read(min(READ_SIZE, self._chunk_left))
        if not data:
            self._ended = True
            return b""
        self._chunk_left -= len(data)
        if self._chunk_left == 0:
            await reader.readexactly(2)  # the chunk's CRLF
        return data

    def close(self) -> None:
        """Drops the connection at once (no TLS goodbye to wait for); a read in
        progress in another task returns ``b""``."""
        self._writer.transport.abort()

    async def aclose(self) -> None:
        self.close()
        try:
            await self._writer.wait_closed()
        except (OSError, ssl.SSLError):
            pass


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        await writer.wait_closed()
    except (OSError, ssl.SSLError):
        pass


async def _read_response(reader: asyncio.StreamReader) -> Tuple[int, bytes, Optional[str]]:
    """Reads one HTTP/1.1 response: status, headers, and a body framed by
    Content-Length, chunked encoding, or the end of the connection."""
    status, headers = await _read_head(reader)
    return status, await _read_body(reader, status, headers), headers.get("retry-after")


async def _read_head(reader: asyncio.StreamReader) -> Tuple[int, Dict[str, str]]:
    """The status and the headers (names in lower case) of a response."""
    status_line = (await reader.readuntil(b"\r\n")).decode("latin-1")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ValueError(f"not an HTTP response: {status_line.strip()[:80]!r}")
    status = int(parts[1])
    headers: Dict[str, str] = {}
    for _ in range(MAX_HEADERS):
        line = (await reader.readuntil(b"\r\n")).decode("latin-1").strip()
        if not line:
            break
        key, _sep, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    else:
        raise ValueError("too many response headers")
    return status, headers


async def _read_body(
    reader: asyncio.StreamReader, status: int, headers: Dict[str, str]
) -> bytes:
    """A whole body framed by chunked encoding, Content-Length, or the end of the
    connection; raises :class:`LockBrokerError` (``bad_response``) as soon as it
    is known to exceed :data:`MAX_BODY`, without reading the rest."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # end of (empty) trailers
                break
            if len(body) + size > MAX_BODY:
                raise _too_large(status)
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        return bytes(body)
    if "content-length" in headers:
        length = int(headers["content-length"])
        if length > MAX_BODY:
            raise _too_large(status)
        return await reader.readexactly(length)
    body = bytearray()
    while True:
        piece = await reader.read(READ_SIZE)
        if not piece:
            return bytes(body)
        body += piece
        if len(body) > MAX_BODY:
            raise _too_large(status)


def _read_capped(response: http.client.HTTPResponse) -> bytes:
    """A whole body, however framed, or :class:`LockBrokerError`
    (``bad_response``) once it is known to exceed :data:`MAX_BODY`, without
    reading the rest; the connection is not used again then."""
    length = response.getheader("Content-Length")
    if length is not None and length.strip().isdigit() and int(length) > MAX_BODY:
        response.close()
        raise _too_large(response.status)
    body = bytearray()
    while len(body) <= MAX_BODY:
        piece = response.read(min(READ_SIZE, MAX_BODY + 1 - len(body)))
        if not piece:
            return bytes(body)
        body += piece
    response.close()
    raise _too_large(response.status)


def _too_large(status: int) -> LockBrokerError:
    return LockBrokerError(
        f"the broker answered with a body over {MAX_BODY} bytes, larger than any "
        "answer it sends",
        code="bad_response",
        status=status,
    )
