"""Watching locks and electing a leader, without I/O: the Server-Sent Events parser,
the typed events, the rules of a watch (what to send on reconnecting, which
events a resumed stream must not repeat, how long to pause), and the state of a
leader helper. :mod:`lockbroker.client` and :mod:`lockbroker.aio` add the
blocking and the awaited I/O, as they do for the rules of a lease.

The wire contract: ``GET /v1/locks/{name}/events`` and ``GET /v1/events?prefix=``
answer ``text/event-stream``; every message has ``event:``, ``id:`` (a decimal
number that grows, per broker) and ``data:`` (one JSON object). A stream starts
with ``state``; then come ``acquired``, ``extended``, ``released``, ``expired``
and ``force_released``, one per change; ``lagged`` says the reader fell behind
and a fresh ``state`` follows. ``Last-Event-ID`` resumes after an event the
broker still has; otherwise the stream starts again with ``state``."""

from __future__ import annotations

import json
import logging
import random
import re
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Optional, Union, cast
from urllib.parse import quote

from ._options import Duration, LockOptions, default_owner, seconds
from ._wire import EXCLUSIVE, LockStatus, lock_path
from .errors import BrokerUnavailable, LeaseLost, LockBrokerError, LockBusy

log = logging.getLogger("lockbroker")

#: The broker sends a ``: keep-alive`` comment every 15 s; a stream silent for
#: this long is taken for dead and opened again.
DEFAULT_IDLE_TIMEOUT = 45.0
#: Longest line, and longest ``data`` of one message, the parser accepts.
MAX_EVENT_BYTES = 1024 * 1024
#: Pauses before reconnecting a dropped stream: the first (unless the broker
#: named another with ``retry:``), doubling up to the longest, each with jitter.
RECONNECT_FIRST = 0.25
RECONNECT_LONGEST = 15.0
#: How long one waiting acquire of a campaign asks to wait. The broker holds a
#: request for at most its ``locks.max_wait_ms`` (60 s by default); the client
#: sends it again, with the same ``request_id``, until this is over.
CAMPAIGN_WAIT = 300.0
#: How long a :class:`lockbroker.Leader` renews its lease at most: a term ends
#: after this (the lease runs out and ``lost`` is set), so a process whose work
#: hung while its renewer ran cannot lead for ever.
DEFAULT_LEADER_MAX_HOLD = 24 * 3600.0
#: The change events of a lock (or a semaphore's permit).
CHANGE_TYPES = ("acquired", "extended", "released", "expired", "force_released")

_EOL = re.compile(rb"\r\n|\r|\n")
_DIGITS = re.compile(r"[0-9]+")
_BOM = b"\xef\xbb\xbf"


# -- Server-Sent Events ----------------------------------------------------------


@dataclass(frozen=True)
class SSEMessage:
    """One dispatched Server-Sent Events message."""

    #: The ``event:`` field (``"message"`` when the message named none).
    event: str
    #: The ``data:`` lines, joined with ``"\\n"``.
    data: str
    #: The message's own ``id:`` field (``None`` when it had none).
    id: Optional[str]
    #: The last event id in effect when the message was dispatched: its own, or
    #: one an earlier message set (``""``: none). What a reconnect sends back.
    last_event_id: str


class SSEParser:
    """An incremental ``text/event-stream`` parser, as the HTML standard defines it.

    :meth:`feed` takes the body in pieces of any size (a piece may end in the
    middle of a line, of a ``\\r\\n``, or of a UTF-8 character) and returns the
    messages each piece completed. Lines end with ``\\r\\n``, ``\\n`` or ``\\r``; a
    blank line ends a message; lines starting with ``:`` are comments
    (keep-alives), counted and otherwise ignored; a message without ``data`` is
    not dispatched. ``id`` persists from message to message (an id containing
    NUL is ignored), and ``retry`` (whole milliseconds) is kept in :attr:`retry`.
    A line or a message longer than ``max_bytes`` raises :class:`ValueError`."""

    def __init__(self, last_event_id: str = "", max_bytes: int = MAX_EVENT_BYTES) -> None:
        #: The last event id buffer: sent back as ``Last-Event-ID`` on reconnecting.
        self.last_event_id = last_event_id
        #: The reconnection time the stream asked for, in milliseconds.
        self.retry: Optional[int] = None
        #: How many comment lines (keep-alives) arrived.
        self.comments = 0
        self._max = max_bytes
        self._buffer = bytearray()
        self._after_cr = False
        self._at_start = True
        self._event = ""
        self._data: List[str] = []
        self._data_size = 0
        self._id: Optional[str] = None

    def feed(self, piece: bytes) -> List[SSEMessage]:
        """Parses the next piece of the body; returns the messages it completed."""
        out: List[SSEMessage] = []
        if not piece:
            return out
        if self._after_cr:
            # The previous piece ended with "\r": a "\n" opening this one belongs to it.
            self._after_cr = False
            if piece[:1] == b"\n":
                piece = piece[1:]
        buffer = self._buffer
        buffer += piece
        if self._at_start:
            if len(buffer) < len(_BOM) and _BOM.startswith(bytes(buffer)):
                return out  # a byte order mark may still be arriving
            self._at_start = False
            if buffer.startswith(_BOM):
                del buffer[: len(_BOM)]
        start = 0
        while True:
            match = _EOL.search(buffer, start)
            if match is None:
                break
            line = bytes(buffer[start : match.start()])
            if match.group() == b"\r" and match.end() == len(buffer):
                self._after_cr = True
            start = match.end()
            self._line(line, out)
        del buffer[:start]
        if len(buffer) > self._max:
            raise ValueError(f"an event-stream line longer than {self._max} bytes")
        return out

    def _line(self, raw: bytes, out: List[SSEMessage]) -> None:
        if not raw:
            self._dispatch(out)
            return
        line = raw.decode("utf-8", "replace")
        if line[0] == ":":
            self.comments += 1
            return
        field, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._data_size += len(value) + 1
            if self._data_size > self._max:
                raise ValueError(f"an event-stream message longer than {self._max} bytes")
            self._data.append(value)
        elif field == "id":
            if "\0" not in value:
                self.last_event_id = self._id = value
        elif field == "retry":
            if _DIGITS.fullmatch(value):
                self.retry = int(value)
        # Any other field is ignored, as the standard says.

    def _dispatch(self, out: List[SSEMessage]) -> None:
        if self._data:
            out.append(SSEMessage(self._event or "message", "\n".join(self._data),
                                  self._id, self.last_event_id))
        self._event = ""
        self._data = []
        self._data_size = 0
        self._id = None


# -- the events --------------------------------------------------------------------


def numeric_id(value: Optional[str]) -> Optional[int]:
    """An event id as a number (ids compare as numbers), ``None`` if it is none."""
    if value and _DIGITS.fullmatch(value):
        return int(value)
    return None


@dataclass(frozen=True)
class LockEvent:
    """One change of a lock (or a semaphore's permit): ``type`` is ``acquired``,
    ``extended``, ``released``, ``expired`` or ``force_released``, one per holder
    for shared leases and permits. Never a token."""

    type: str
    name: str
    #: ``"exclusive"``, ``"shared"`` or ``"permit"``.
    mode: str
    #: The lease's fence: a leader's term.
    fence: int
    owner: Optional[str]
    #: Seconds the lease had left when the event was sent (0 once it ended).
    expires_in: float
    #: The lease's expiry in Unix milliseconds of the Redis clock, if known.
    expires_at_ms: Optional[int]
    #: The event's id (``None`` if the broker sent none).
    id: Optional[int]

    @classmethod
    def from_json(cls, kind: str, data: Dict[str, Any], id: Optional[int]) -> "LockEvent":
        expires_at = data.get("expires_at_ms")
        return cls(
            type=kind,
            name=data["name"],
            mode=data.get("mode") or EXCLUSIVE,
            fence=int(data["fence"]),
            owner=data.get("owner"),
            expires_in=(data.get("expires_in_ms") or 0) / 1000.0,
            expires_at_ms=None if expires_at is None else int(expires_at),
            id=id,
        )


@dataclass(frozen=True)
class LockState(LockStatus):
    """A ``state`` event: a :class:`LockStatus` (what ``GET /v1/locks/{name}``
    says, never a token) as the stream starts, or starts again after ``lagged``
    or a resume the broker could not serve. A prefix stream sends one for each
    held lock under the prefix, then a :class:`StateComplete`."""

    type: str = "state"
    id: Optional[int] = None

    @classmethod
    def from_event(cls, data: Dict[str, Any], id: Optional[int]) -> "LockState":
        status = LockStatus.from_json(data)
        values = {f.name: getattr(status, f.name) for f in fields(LockStatus)}
        return cls(**values, id=id)


@dataclass(frozen=True)
class StateComplete:
    """The ``state`` marker that ends a prefix stream's snapshot: every lock held
    under ``prefix`` has had its :class:`LockState` by now."""

    prefix: str
    type: str = "state"
    complete: bool = True
    id: Optional[int] = None


@dataclass(frozen=True)
class Lagged:
    """The watcher fell too far behind: ``missed`` events were dropped, and a
    fresh ``state`` follows."""

    missed: int
    type: str = "lagged"
    id: Optional[int] = None


#: What iterating a watch yields.
WatchEvent = Union[LockEvent, LockState, StateComplete, Lagged]


def event_from_message(message: SSEMessage) -> Optional[WatchEvent]:
    """The typed event of a message, or ``None`` for a type this client does not
    know (a newer broker's) or a message it cannot read, which is logged. Its
    ``id`` is the message's own (``None`` for a message without ``id:``)."""
    kind = message.event
    id = numeric_id(message.id)
    try:
        data = json.loads(message.data)
        if not isinstance(data, dict):
            raise ValueError("data is not a JSON object")
        if kind == "state":
            if data.get("complete") and "prefix" in data:
                return StateComplete(prefix=str(data["prefix"]), id=id)
            return LockState.from_event(data, id)
        if kind in CHANGE_TYPES:
            return LockEvent.from_json(kind, data, id)
        if kind == "lagged":
            return Lagged(missed=int(data.get("missed") or 0), id=id)
    except (ValueError, KeyError, TypeError) as error:
        log.warning("skipping an unreadable %r event (id %s): %s", kind, message.id, error)
        return None
    log.debug("skipping an event of unknown type %r (id %s)", kind, message.id)
    return None


# -- the watch ---------------------------------------------------------------------


def events_path(name: str) -> str:
    """``/v1/locks/{name}/events``."""
    return lock_path(name, "events")


def prefix_events_path(prefix: str) -> str:
    """``/v1/events?prefix=...`` (an empty prefix watches every lock)."""
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a string, not {prefix!r}")
    return "/v1/events?prefix=" + quote(prefix, safe="")


class Backoff:
    """Pauses that double from ``first`` up to ``longest``, each between half and
    all of its step (so watchers dropped together do not return together)."""

    def __init__(self, first: float = RECONNECT_FIRST, longest: float = RECONNECT_LONGEST) -> None:
        self.first = first
        self.longest = longest
        self._step = 0

    def reset(self) -> None:
        self._step = 0

    def next(self, at_least: Optional[float] = None) -> float:
        """The next pause; never shorter than ``at_least`` (a ``Retry-After``)."""
        ceiling = min(self.longest, self.first * (2 ** min(self._step, 30)))
        self._step += 1
        pause = ceiling * random.uniform(0.5, 1.0)
        return max(pause, at_least or 0.0)


def retryable(error: LockBrokerError) -> bool:
    """Whether opening the stream again may help: the broker was unreachable, busy
    (``too_many_streams``, 503) or shutting down; not a refusal of the request, the
    key, or a certificate."""
    return isinstance(error, BrokerUnavailable) and error.code != "tls"


class WatchCursor:
    """Where a watch stands, across its connections: the last event id (sent back
    as ``Last-Event-ID``), the parser of the current connection, and the pause
    before the next one.

    A resumed stream must not repeat what the caller already has: until a
    ``state`` arrives (a fresh start, which a broker that cannot resume sends
    first), change events whose id is not above the one resumed after are
    dropped."""

    def __init__(self, path: str, last_event_id: Optional[str], idle_timeout: Duration) -> None:
        self.path = path
        self.idle_timeout = seconds(idle_timeout, "idle_timeout")
        self._last_id = last_event_id or ""
        self._resume_after: Optional[int] = None
        self._parser = SSEParser(self._last_id)
        self._backoff = Backoff()
        self._delivered = False
        self._pause = 0.0

    @property
    def last_event_id(self) -> Optional[str]:
        """The id of the last event received (or resumed after), ``None`` before any."""
        return self._last_id or None

    def connecting(self) -> Dict[str, str]:
        """Called before each connection: starts a fresh parser and returns the
        request headers (with ``Last-Event-ID`` once there is one)."""
        self._parser = SSEParser(self._last_id)
        self._resume_after = numeric_id(self._last_id)
        self._delivered = False
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self._last_id:
            headers["Last-Event-ID"] = self._last_id
        return headers

    def take_pause(self) -> float:
        """The pause due before the next connection (0 for the first); once."""
        pause, self._pause = self._pause, 0.0
        return pause

    def feed(self, piece: bytes) -> List[WatchEvent]:
        """The events a piece of the body completed, duplicates of a resume left out."""
        events: List[WatchEvent] = []
        for message in self._parser.feed(piece):
            self._delivered = True
            event = event_from_message(message)
            if event is not None and event.type == "state":
                self._resume_after = None  # a fresh start: nothing here repeats
            elif self._repeats(message.id):
                log.debug("dropping event %s, already seen before resuming", message.id)
                continue
            self._last_id = message.last_event_id
            if event is not None:
                events.append(event)
        # An id in a block without data moves the last event id too.
        tail = self._parser.last_event_id
        if tail != self._last_id and not self._repeats(tail):
            self._last_id = tail
        retry = self._parser.retry
        if retry is not None:
            self._backoff.first = max(0.001, retry / 1000.0)
        return events

    def _repeats(self, id: Optional[str]) -> bool:
        """Whether ``id`` is one a resumed stream must not deliver again."""
        number = numeric_id(id)
        after = self._resume_after
        return after is not None and number is not None and number <= after

    def dropped(self, error: Optional[LockBrokerError] = None) -> None:
        """The connection ended (``error`` ``None``: the broker closed the stream) or
        could not be opened: sets the pause before the next. Raises ``error`` when
        opening it again cannot help."""
        if error is not None and not retryable(error):
            raise error
        if self._delivered:
            self._backoff.reset()
        self._delivered = False
        self._pause = self._backoff.next(error.retry_after if error is not None else None)
        if error is not None:
            log.info("event stream %s: %s; reconnecting in %.2fs", self.path, error, self._pause)
        else:
            log.debug("event stream %s ended; reconnecting in %.2fs", self.path, self._pause)


# -- leader election ---------------------------------------------------------------


class LeaderView:
    """Who leads, as a lock's event stream shows it: the exclusive holder's owner
    and fence (its term), or nobody. Terms only move forward: an event about an
    older lease than the one known changes nothing."""

    def __init__(self) -> None:
        self.owner: Optional[str] = None
        self.term: Optional[int] = None
        self.held = False

    def apply(self, event: WatchEvent) -> None:
        if isinstance(event, LockState):
            holder = next((h for h in event.holders if h.mode == EXCLUSIVE), None)
            if event.held and event.mode == EXCLUSIVE:
                self.held = True
                self.owner = holder.owner if holder is not None else event.owner
                self.term = holder.fence if holder is not None else event.fence
            else:
                self.held, self.owner = False, None
        elif isinstance(event, LockEvent) and event.mode == EXCLUSIVE:
            newer = self.term is None or event.fence >= self.term
            if event.type in ("acquired", "extended") and newer:
                self.held, self.owner, self.term = True, event.owner, event.fence
            elif event.type not in ("acquired", "extended") and event.fence == self.term:
                self.held, self.owner = False, None  # released, expired, force_released

    @property
    def leader(self) -> Optional[str]:
        return self.owner if self.held else None

    @property
    def leader_term(self) -> Optional[int]:
        return self.term if self.held else None


#: What a campaign's waiting acquire may raise and still be sent again (a
#: ``LeaseLost``: the grant was gone before the extend that follows a long wait).
CAMPAIGN_RETRIES = (LockBusy, BrokerUnavailable, LeaseLost)


class CampaignPauses:
    """How long a campaign pauses before its next waiting acquire: not at all after
    a wait that ran its course, a little after a busy answer that came at once (or
    a grant lost at once), and with growing pauses (at least the ``Retry-After``)
    while the broker is unavailable. ``None``: retrying cannot help (a refused
    key or request, an untrusted certificate)."""

    def __init__(self) -> None:
        self._backoff = Backoff(first=0.1, longest=RECONNECT_LONGEST)

    def after(self, error: LockBrokerError, took: float) -> Optional[float]:
        if isinstance(error, LockBusy):
            if took >= 1.0:
                self._backoff.reset()
                return 0.0
            return self._backoff.next()
        if isinstance(error, LeaseLost):
            return self._backoff.next()
        if retryable(error):
            return self._backoff.next(error.retry_after)
        return None


class LeaderBase:
    """What :class:`lockbroker.Leader` and :class:`lockbroker.AsyncLeader` share:
    the checked options, the term held (the lease), and who leads as the event
    stream shows it. One helper campaigns for one term: once it resigned, stopped
    or lost the lease, it is done (make another to campaign again)."""

    #: Set when the lease of this helper's term was lost (expired unrenewed, or
    #: taken): a threading.Event or an asyncio.Event in the subclasses.
    lost: Any
    #: Set once this helper won its term: a threading.Event or an asyncio.Event.
    elected: Any

    def __init__(
        self,
        client: Any,
        name: str,
        *,
        ttl: Duration,
        owner: Optional[str],
        max_hold: Duration,
    ) -> None:
        self.client = client
        self.name = name
        lock_path(name)  # a bad name fails here, not in a background campaign
        self.owner: str = owner if owner is not None else default_owner()
        self.options = LockOptions.check(
            ttl=ttl, wait=CAMPAIGN_WAIT, owner=self.owner, lock_delay=None, fair=False,
            max_hold=max_hold,
        )
        self.ttl = self.options.ttl
        self.max_hold = cast(float, self.options.max_hold)  # always set here
        #: Why campaigning ended early, if it did: a refusal retrying cannot fix.
        self.error: Optional[BaseException] = None
        self._view = LeaderView()
        self._lease: Any = None
        self._started = False
        #: Set as a resign begins: from then on this helper does not lead.
        self._resigned = False

    def _check_unstarted(self) -> None:
        if self._started:
            raise RuntimeError("a leader helper campaigns once; call client.leader() again")
        self._started = True

    @property
    def is_leader(self) -> bool:
        """Whether this helper leads now: it holds the lease, has not resigned, has
        not lost it, and its local deadline (never later than the broker's) is
        still ahead."""
        lease = self._lease
        return (
            lease is not None
            and not self._resigned
            and not lease.releasing
            and not self.lost.is_set()
            and lease.remaining() > 0
        )

    @property
    def lost_reason(self) -> Optional[str]:
        """Why ``lost`` was set (as :attr:`lockbroker.Lease.lost_reason`), else ``None``."""
        return self._lease.lost_reason if self._lease is not None else None

    @property
    def term(self) -> Optional[int]:
        """The fence of this helper's lease while it leads, else ``None``: pass it to
        what the leader writes to, which refuses smaller ones."""
        return self._lease.fence if self.is_leader else None

    @property
    def leader(self) -> Optional[str]:
        """The current leader's owner as the event stream shows it (this helper's
        own while it leads), or ``None`` when nobody leads."""
        return self.owner if self.is_leader else self._view.leader

    @property
    def leader_term(self) -> Optional[int]:
        """The current leader's term as the event stream shows it, or ``None``."""
        return self._lease.fence if self.is_leader else self._view.leader_term

    def _campaign_failed(self, error: BaseException) -> None:
        self.error = error
        log.error("campaign for leader of %r ended: %s", self.name, error)

    def __repr__(self) -> str:
        state = "leading" if self.is_leader else ("lost" if self.lost.is_set() else "following")
        return (
            f"<{type(self).__name__} name={self.name!r} owner={self.owner!r} {state} "
            f"term={self.term} leader={self.leader!r}>"
        )
