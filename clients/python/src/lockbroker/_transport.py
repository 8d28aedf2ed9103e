"""HTTP/1.1 exchanges with the broker on the standard library only: a small pool of
keep-alive ``http.client`` connections for the sync client, one connection per
request over ``asyncio`` streams for the async one. Both return the decoded JSON of
a 2xx answer and raise a :mod:`lockbroker.errors` exception for anything else."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import ssl
import threading
from typing import Any, Awaitable, Dict, Generic, List, Optional, Tuple, TypeVar
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
        raw = response.read()
        keep = not response.will_close
        return response.status, raw, response.getheader("Retry-After"), keep

    def _take(self, timeout: float) -> Tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is not None:
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            return conn, True
        if self.endpoint.tls:
            conn = http.client.HTTPSConnection(
                self.endpoint.host, self.endpoint.port, timeout=timeout, context=self._ssl
            )
        else:
            conn = http.client.HTTPConnection(
                self.endpoint.host, self.endpoint.port, timeout=timeout
            )
        return conn, False

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
            writer.close()
            try:
                await writer.wait_closed()
            except (OSError, ssl.SSLError):
                pass


async def _read_response(reader: asyncio.StreamReader) -> Tuple[int, bytes, Optional[str]]:
    """Reads one HTTP/1.1 response: status, headers, and a body framed by
    Content-Length, chunked encoding, or the end of the connection."""
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
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # end of (empty) trailers
                break
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        raw = bytes(body)
    elif "content-length" in headers:
        raw = await reader.readexactly(int(headers["content-length"]))
    else:
        raw = await reader.read()
    return status, raw, headers.get("retry-after")
