"""Test harness: a real ``redis-server`` and a real ``lockbroker`` binary, each
started by the tests on a free loopback port and stopped afterwards.

The broker binary is ``$LOCKBROKER_BIN`` or ``<repo>/target/debug/lockbroker``
(``cargo build -p lockbroker-server``).

With ``LOCKBROKER_TEST_MODE=quorum`` every broker started here runs in quorum
mode, over its Redis and two more that the harness starts for that Redis: so
the same tests check a client against quorum mode's answers.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, TypeVar

import pytest

from lockbroker import Client

REPO = Path(__file__).resolve().parents[3]
#: ``quorum``: brokers run in quorum mode (see the module's docstring).
TEST_MODE = os.environ.get("LOCKBROKER_TEST_MODE", "")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise TimeoutError(f"{what} within {timeout}s")


def stop_process(process: Optional[subprocess.Popen], grace: float) -> None:
    """Terminates ``process`` if it still runs, killing it after ``grace`` seconds."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Paused:
    """A child process a test may freeze (SIGSTOP) and thaw (SIGCONT): its port
    stays open but nothing answers, nor acknowledges, while it is frozen."""

    process: Optional[subprocess.Popen] = None
    paused = False

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
        self.paused = False


class RedisServer(Paused):
    """A ``redis-server`` that keeps nothing on disk, plus a tiny RESP client; a
    replica of ``replica_of`` when given. In quorum mode it has two peers, the
    other nodes of its brokers' quorum, which stop and start with it."""

    def __init__(self, workdir: Path, replica_of: Optional["RedisServer"] = None) -> None:
        if shutil.which("redis-server") is None:
            pytest.fail("redis-server is not installed (apt-get install redis-server)")
        self.port = free_port()
        self.dir = workdir / f"redis-{self.port}"
        self.dir.mkdir(parents=True)
        self.replica_of = replica_of
        self.workdir = workdir
        self.peers: List[RedisServer] = []
        self.process: Optional[subprocess.Popen] = None
        self.paused = False
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def quorum_nodes(self) -> List[str]:
        """This server and its two peers (started on the first call), as quorum
        mode's ``redis.nodes``."""
        if not self.peers:
            self.peers = [RedisServer(self.workdir), RedisServer(self.workdir)]
        return [self.url] + [peer.url for peer in self.peers]

    def start(self) -> None:
        for peer in self.peers:
            peer.start()
        replica: List[str] = []
        if self.replica_of is not None:
            # The primary would otherwise wait 5 s for more replicas before a sync.
            self.replica_of.command("CONFIG", "SET", "repl-diskless-sync-delay", "0")
            replica = ["--replicaof", "127.0.0.1", str(self.replica_of.port)]
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.dir), *replica],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_until(self._pings, 10, f"redis-server did not answer on {self.port}")
        if self.replica_of is not None:
            wait_until(self._synced, 10, f"the replica on {self.port} did not sync")

    def stop(self) -> None:
        if self.paused:
            self.resume()
        stop_process(self.process, 5)
        self.process = None
        for peer in self.peers:
            peer.stop()

    def _synced(self) -> bool:
        """Whether this replica's link is up and the primary counts it: for up to a
        second after the link is up, a ``WAIT`` on the primary may not."""
        assert self.replica_of is not None
        if "master_link_status:up" not in self.command("INFO", "replication"):
            return False
        probe = "lockbroker-pytest:probe"
        *_, acked = self.replica_of.pipeline(
            ("SET", probe, "1"), ("DEL", probe), ("WAIT", "1", "100"))
        return acked == 1

    def _pings(self) -> bool:
        try:
            return self.command("PING") == "PONG"
        except OSError:
            return False

    def command(self, *args: str):
        """Sends one command; returns a str, int, list or None."""
        return self.pipeline(args)[0]

    def pipeline(self, *commands: Sequence[str]) -> list:
        """Sends commands on one connection; returns their replies."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
            wire = "".join(
                f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
                for args in commands
            )
            sock.sendall(wire.encode())
            stream = sock.makefile("rb")
            return [_read_reply(stream) for _ in commands]


def _read_reply(stream):
    line = stream.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:].decode()
    if kind == b"+":
        return rest
    if kind == b"-":
        raise RuntimeError(f"redis error: {rest}")
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        if size < 0:
            return None
        data = stream.read(size + 2)[:-2]
        return data.decode()
    if kind == b"*":
        return [_read_reply(stream) for _ in range(int(rest))]
    raise RuntimeError(f"unexpected redis reply {line!r}")


class TlsFiles(NamedTuple):
    """A server certificate and its key, and the certificate a client must trust
    for it (here the certificate itself: it is self-signed)."""

    cert: Path
    key: Path
    ca: Path


class Broker(Paused):
    """A ``lockbroker`` process on a free port, pointed at ``redis``; serving HTTPS
    with ``tls`` (its certificate and key), trusted through ``tls.ca``."""

    def __init__(self, binary: Path, redis: RedisServer, workdir: Path,
                 env: Optional[Dict[str, str]] = None,
                 tls: Optional[TlsFiles] = None) -> None:
        self.binary = binary
        self.redis = redis
        self.tls = tls
        self.extra_env = dict(env or {})
        if tls is not None:
            self.extra_env["LOCKBROKER_HTTP_TLS_CERT_PATH"] = str(tls.cert)
            self.extra_env["LOCKBROKER_HTTP_TLS_KEY_PATH"] = str(tls.key)
        self.log_path = workdir / f"broker-{uuid.uuid4().hex[:8]}.log"
        self.process: Optional[subprocess.Popen] = None
        self.port = 0
        self.paused = False
        self.start()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> None:
        for _ in range(3):  # a free port can be taken between probe and bind
            self.port = free_port()
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "LOCKBROKER_LISTEN": f"127.0.0.1:{self.port}",
                "LOCKBROKER_REDIS_URL": self.redis.url,
                "LOCKBROKER_LOG_LEVEL": "info",
                **self._mode_env(),
                **self.extra_env,
            }
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(
                    [str(self.binary)], env=env, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            try:
                wait_until(self._ready, 15, "the broker did not become ready")
                return
            except TimeoutError:
                self.stop()
        pytest.fail(f"lockbroker did not start; its log:\n{self.log_path.read_text()[-3000:]}")

    def _mode_env(self) -> Dict[str, str]:
        """Quorum mode's settings over this broker's Redis and its peers, as the
        Rust harness sets them (each node's timeout the command timeout, 1000 ms
        unless the test sets one), unless the test chose a mode of its own."""
        if TEST_MODE != "quorum" or "LOCKBROKER_REDIS_MODE" in self.extra_env:
            return {}
        return {
            "LOCKBROKER_REDIS_MODE": "quorum",
            "LOCKBROKER_REDIS_NODES": ",".join(self.redis.quorum_nodes()),
            "LOCKBROKER_REDIS_NODE_TIMEOUT_MS":
                self.extra_env.get("LOCKBROKER_REDIS_COMMAND_TIMEOUT_MS", "1000"),
        }

    def _ready(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise TimeoutError("the broker exited")
        context = ssl.create_default_context(cafile=str(self.tls.ca)) if self.tls else None
        try:
            with urllib.request.urlopen(self.url + "/readyz", timeout=1,
                                        context=context) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is None:
            return
        if self.paused:
            self.resume()
        stop_process(self.process, 10)
        self.process = None


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="lockbroker-pytest-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def broker_bin() -> Path:
    path = Path(os.environ.get("LOCKBROKER_BIN") or REPO / "target" / "debug" / "lockbroker")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no broker binary at {path}: run `cargo build -p lockbroker-server` "
                    "or set LOCKBROKER_BIN")
    return path


Server = TypeVar("Server", RedisServer, Broker)


def stopped_after(start: Callable[..., Server]) -> Iterator[Callable[..., Server]]:
    """For a fixture to ``yield from``: ``start`` wrapped so that every server it
    starts is stopped when the fixture ends."""
    started: List[Server] = []

    def make(*args, **kwargs) -> Server:
        server = start(*args, **kwargs)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def redis(workdir: Path) -> Iterator[RedisServer]:
    server = RedisServer(workdir)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def broker(broker_bin: Path, redis: RedisServer, workdir: Path) -> Iterator[Broker]:
    """The shared broker with default settings. Tests must not pause or stop it."""
    server = Broker(broker_bin, redis, workdir)
    yield server
    server.stop()


@pytest.fixture
def make_broker(broker_bin: Path, redis: RedisServer, workdir: Path):
    """Starts brokers of the test's own (to pause, stop or configure); stops them after."""

    def start(env: Optional[Dict[str, str]] = None,
              redis_server: Optional[RedisServer] = None,
              tls: Optional[TlsFiles] = None) -> Broker:
        return Broker(broker_bin, redis_server or redis, workdir, env, tls)

    yield from stopped_after(start)


@pytest.fixture
def make_redis(workdir: Path):
    """Starts Redis servers of the test's own (``replica_of=`` another for a
    replica, once in sync); stops them after."""
    yield from stopped_after(lambda replica_of=None: RedisServer(workdir, replica_of))


@pytest.fixture(scope="session")
def tls_files(workdir: Path) -> TlsFiles:
    """A self-signed certificate for 127.0.0.1 and localhost, made now with the
    usual ``openssl req -x509``."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is not installed (apt-get install openssl)")
    cert, key = workdir / "server.pem", workdir / "server.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "2", "-subj", "/CN=lockbroker test",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return TlsFiles(cert, key, cert)


@pytest.fixture
def client(broker: Broker) -> Iterator[Client]:
    with Client(broker.url, timeout=5) as c:
        yield c


@pytest.fixture
def name(request) -> str:
    """A lock name of the test's own."""
    base = re.sub(r"[^A-Za-z0-9._:-]", "-", request.node.name)[:60]
    return f"{base}-{uuid.uuid4().hex[:8]}"


def lease_key(lock: str) -> str:
    """Where the broker keeps a lock's lease (default key prefix)."""
    return f"lockbroker:{{{lock}}}:lease"


def force_release(broker: Broker, lock: str) -> None:
    """Ends whatever lease holds ``lock``, as an operator would
    (``DELETE /v1/locks/{name}``; the test broker has no API keys)."""
    request = urllib.request.Request(
        f"{broker.url}/v1/locks/{urllib.parse.quote(lock, safe='')}", method="DELETE"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200, response.status
