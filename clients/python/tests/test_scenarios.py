"""The shared scenarios (``clients/scenarios/*.json``, described in its README)
replayed through the blocking client's public API against the real broker. Every
file runs; a step this client cannot express fails the test, as does a malformed
one."""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from conftest import REPO
from lockbroker import (
    AuthError,
    BrokerUnavailable,
    Client,
    FenceCheck,
    InvalidRequest,
    Lagged,
    Leader,
    Lease,
    LeaseLost,
    LimitConflict,
    LockBusy,
    LockEvent,
    LockState,
    MaxHoldExceeded,
    Permit,
    Session,
    SessionLost,
    StateComplete,
    Watch,
)

SCENARIOS = REPO / "clients" / "scenarios"
FILES = sorted(SCENARIOS.glob("*.json"))

#: Every operation this runner knows, and the arguments it takes.
STEP_ARGS: Dict[str, Tuple[str, ...]] = {
    "acquire": ("lock", "ttl_ms", "wait_ms", "owner", "shared", "request_id"),
    "acquire_permit": ("semaphore", "limit", "ttl_ms", "wait_ms", "owner"),
    "lock": ("lock", "ttl_ms", "owner", "shared"),
    "await": ("step",),
    "extend": ("lease", "ttl_ms"),
    "extend_token": ("lease", "ttl_ms"),
    "release": ("lease",),
    "lease_state": ("lease",),
    "status": ("lock",),
    "semaphore_status": ("semaphore",),
    "check_fence": ("lock", "fence"),
    "check_semaphore_fence": ("semaphore", "fence"),
    "lease_check_fence": ("lease",),
    "watch": ("lock",),
    "next_event": ("watch",),
    "sleep": ("ms",),
    "open_session": ("ttl_ms", "owner", "lock_delay_ms"),
    "session_acquire": ("session", "lock", "shared", "wait_ms", "owner"),
    "session_acquire_permit": ("session", "semaphore", "limit", "wait_ms", "owner"),
    "session_status": ("session",),
    "session_state": ("session",),
    "close_session": ("session",),
    "end_session_elsewhere": ("session",),
    "campaign": ("lock", "ttl_ms", "max_hold_ms", "owner"),
    "leader_state": ("candidate",),
    "resign": ("candidate",),
}
#: Keys every step may have, besides its operation's arguments.
COMMON_KEYS = ("do", "as", "expect", "within_ms", "async", "note")
#: Reads, which within_ms may repeat; and the grants (and campaigns) async may start.
READ_STEPS = ("status", "semaphore_status", "check_fence", "check_semaphore_fence",
              "lease_check_fence", "lease_state", "leader_state", "session_status",
              "session_state")
ASYNC_STEPS = ("acquire", "acquire_permit", "lock", "campaign")
#: How long a campaign or an awaited async step may take.
AWAIT_LIMIT = 30.0
COMPARISONS = {
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
}


class Malformed(Exception):
    """A scenario that cannot run as written (or a step this client cannot
    express): fails the test whatever the expectations say."""


class Outcome:
    """What a step (or an async one, once awaited) came to."""

    def __init__(self, result: Optional[Dict[str, Any]] = None, lease: Optional[Lease] = None,
                 error: Optional[BaseException] = None) -> None:
        self.result = result if result is not None else {}
        self.lease = lease
        self.error = error


def test_the_scenario_folder_has_scenarios():
    assert FILES, f"no scenario in {SCENARIOS}"


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_scenario(path: Path, client: Client):
    scenario = json.loads(path.read_text())
    assert set(scenario) == {"about", "steps"}, f"{path.name}: a scenario has about and steps only"
    assert isinstance(scenario["about"], str) and scenario["steps"], f"{path.name}: empty"
    with Replay(client) as replay:
        replay.run(scenario["steps"])


class Replay:
    """One scenario's run: its names' prefix, and what its steps kept."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.prefix = f"scn-{uuid.uuid4().hex[:8]}-"
        self.results: Dict[str, Dict[str, Any]] = {}
        self.leases: Dict[str, Lease] = {}
        self.watches: Dict[str, Tuple[Watch, "queue.Queue[Any]"]] = {}
        self.pending: Dict[str, "Future[Outcome]"] = {}
        self.candidates: Dict[str, Leader] = {}
        self.sessions: Dict[str, Session] = {}
        self.closing = threading.Event()
        self.managed = ExitStack()  # the with blocks of lock()
        self.background = ThreadPoolExecutor(max_workers=4, thread_name_prefix="scenario")

    def __enter__(self) -> "Replay":
        return self

    def __exit__(self, *exc: Any) -> None:
        """Releases what the scenario still holds and closes its watches."""
        for watch, _ in self.watches.values():
            watch.close()
        self.closing.set()
        for leader in self.candidates.values():
            leader.stop()
        for future in self.pending.values():
            done = future.result(timeout=AWAIT_LIMIT)
            if done.lease is not None:
                self.leases[f"{len(self.leases)} (async)"] = done.lease
        self.background.shutdown(wait=True)
        for lease in self.leases.values():
            if not lease.released:
                try:
                    lease.release()
                except Exception:
                    pass
        try:
            self.managed.close()
        except LeaseLost:
            pass
        for session in self.sessions.values():
            try:
                session.close()
            except Exception:
                pass  # lost, or closed elsewhere: nothing is left to end

    def run(self, steps: List[Dict[str, Any]]) -> None:
        for i, step in enumerate(steps):
            op = self.validate(i, step)
            label = f"step {i + 1} ({op})"
            name = step.get("as")
            if step.get("async") is True:
                if op == "campaign":
                    # The candidate exists from this step on; only its election is awaited.
                    leader = self.campaign(label, step)
                    self.pending[name] = self.background.submit(self.elected, leader)
                else:
                    self.pending[name] = self.background.submit(self.do, label, op, step)
                continue
            expect = step.get("expect", {})
            deadline = time.monotonic() + self.whole(label, step.get("within_ms", 0)) / 1000
            while True:
                done = self.do(label, op, step)
                problem = self.check(expect, done)
                if problem is None:
                    self.keep(name, done)
                    break
                if time.monotonic() > deadline:
                    pytest.fail(f"{label}: {problem}")
                time.sleep(0.05)

    def validate(self, i: int, step: Dict[str, Any]) -> str:
        """Checks a step's keys against the vocabulary; returns its operation."""
        op = step.get("do")
        if op not in STEP_ARGS:
            raise Malformed(f"step {i + 1}: this client cannot express the operation {op!r}")
        unknown = set(step) - set(COMMON_KEYS) - set(STEP_ARGS[op])
        if unknown:
            raise Malformed(f"step {i + 1} ({op}): unknown keys {sorted(unknown)}")
        if "within_ms" in step and op not in READ_STEPS:
            raise Malformed(f"step {i + 1} ({op}): within_ms repeats reads only")
        if step.get("async") is True and (op not in ASYNC_STEPS or not isinstance(step.get("as"), str)):
            raise Malformed(f"step {i + 1} ({op}): async is for grants kept with as")
        if not isinstance(step.get("expect", {}), dict):
            raise Malformed(f"step {i + 1} ({op}): expect must be an object")
        return op

    def keep(self, name: Optional[str], done: Outcome) -> None:
        if name is None:
            return
        self.results[name] = done.result
        if done.lease is not None:
            self.leases[name] = done.lease

    # -- the operations ------------------------------------------------------------

    def do(self, label: str, op: str, step: Dict[str, Any]) -> Outcome:
        """Runs one operation through the client's public API; the client's
        errors become the outcome."""

        def arg(key: str) -> Any:
            return self.resolve(label, step.get(key))

        def seconds(key: str, default: float = 0.0) -> float:
            return default if key not in step else self.whole(label, arg(key)) / 1000

        def name(key: str) -> str:
            value = arg(key)
            if not isinstance(value, str) or not value:
                raise Malformed(f"{label}: {key} must name a {key}")
            return self.prefix + value

        client = self.client
        try:
            if op == "acquire":
                return self.granted(client.acquire(
                    name("lock"), seconds("ttl_ms", 30.0), wait=seconds("wait_ms"),
                    owner=arg("owner"), shared=arg("shared") is True, request_id=arg("request_id")))
            if op == "acquire_permit":
                return self.granted(client.acquire_permit(
                    name("semaphore"), self.whole(label, arg("limit")), seconds("ttl_ms", 30.0),
                    wait=seconds("wait_ms"), owner=arg("owner")))
            if op == "lock":
                return self.granted(self.managed.enter_context(client.lock(
                    name("lock"), ttl=seconds("ttl_ms", 30.0), owner=arg("owner"),
                    shared=arg("shared") is True)))
            if op == "await":
                step_name = arg("step")
                if step_name not in self.pending:
                    raise Malformed(f"{label}: no async step {step_name!r} to await")
                done = self.pending.pop(step_name).result(timeout=AWAIT_LIMIT)
                if done.lease is not None:
                    self.leases[step_name] = done.lease
                self.results[step_name] = done.result
                return done
            if op == "extend":
                self.lease(label, arg("lease")).extend(seconds("ttl_ms") if "ttl_ms" in step else None)
                return Outcome()
            if op == "extend_token":
                lease = self.lease(label, arg("lease"))
                extend = client.extend_permit if isinstance(lease, Permit) else client.extend
                renewal = extend(lease.name, lease.token, seconds("ttl_ms"))
                return Outcome({"fence": renewal.fence, "ttl_ms": round(renewal.ttl * 1000)})
            if op == "release":
                self.lease(label, arg("lease")).release()
                return Outcome()
            if op == "lease_state":
                return Outcome(lease_state(label, self.lease(label, arg("lease"))))
            if op == "status":
                s = client.status(name("lock"))
                return Outcome({"held": s.held, "owner": s.owner, "fence": s.fence, "mode": s.mode,
                                "holder_count": s.holder_count, "waiting": s.waiting})
            if op == "semaphore_status":
                m = client.semaphore_status(name("semaphore"))
                return Outcome({"limit": m.limit, "held": m.held, "available": m.available,
                                "fence": m.fence})
            if op == "check_fence":
                return self.fence(client.check_fence(name("lock"), self.whole(label, arg("fence"))))
            if op == "check_semaphore_fence":
                return self.fence(client.check_semaphore_fence(
                    name("semaphore"), self.whole(label, arg("fence"))))
            if op == "lease_check_fence":
                return self.fence(self.lease(label, arg("lease")).check_fence())
            if op == "watch":
                self.open_watch(label, step.get("as"), name("lock"))
                return Outcome()
            if op == "next_event":
                return Outcome(self.next_event(label, arg("watch")))
            if op == "sleep":
                time.sleep(seconds("ms"))
                return Outcome()
            if op == "open_session":
                return self.open_session(label, step)
            if op == "session_acquire":
                return self.granted(self.session(label, arg("session")).acquire(
                    name("lock"), wait=seconds("wait_ms"), owner=arg("owner"),
                    shared=arg("shared") is True))
            if op == "session_acquire_permit":
                return self.granted(self.session(label, arg("session")).acquire_permit(
                    name("semaphore"), self.whole(label, arg("limit")), wait=seconds("wait_ms"),
                    owner=arg("owner")))
            if op == "session_status":
                t = self.session(label, arg("session")).status()
                return Outcome({"open": t.open, "owner": t.owner, "leases": t.leases,
                                "ttl_ms": None if t.ttl is None else round(t.ttl * 1000)})
            if op == "session_state":
                return Outcome({"state": self.session(label, arg("session")).state})
            if op == "close_session":
                return Outcome({"leases_released": self.session(label, arg("session")).close()})
            if op == "end_session_elsewhere":
                session = self.session(label, arg("session"))
                assert session.id is not None
                client.close_session(session.id, session.token)
                return Outcome()
            if op == "campaign":
                return self.elected(self.campaign(label, step))
            if op == "leader_state":
                return Outcome(leader_state(self.candidate(label, arg("candidate"))))
            if op == "resign":
                self.candidate(label, arg("candidate")).resign()
                return Outcome()
        except (Malformed, pytest.fail.Exception):
            raise
        except Exception as error:  # the client's answer, to compare with expect
            return Outcome(error=error)
        raise Malformed(f"{label}: this client cannot express the operation")

    def campaign(self, label: str, step: Dict[str, Any]) -> Leader:
        """A started candidate, kept under the step's ``as``."""
        name = step.get("as")
        if not isinstance(name, str):
            raise Malformed(f"{label}: a candidate needs as")
        lock = self.resolve(label, step.get("lock"))
        if not isinstance(lock, str) or not lock:
            raise Malformed(f"{label}: lock must name a lock")
        options: Dict[str, Any] = {"owner": self.resolve(label, step.get("owner"))}
        if "ttl_ms" in step:
            options["ttl"] = self.whole(label, self.resolve(label, step["ttl_ms"])) / 1000
        if "max_hold_ms" in step:
            options["max_hold"] = self.whole(label, self.resolve(label, step["max_hold_ms"])) / 1000
        leader = self.client.leader(self.prefix + lock, **options)
        self.candidates[name] = leader
        leader.start()
        return leader

    def elected(self, leader: Leader) -> Outcome:
        """Waits until the candidate leads; a campaign that gave up is its error.
        The scenario's end (which stops every candidate) ends the wait too."""
        deadline = time.monotonic() + AWAIT_LIMIT
        while not leader.elected.wait(0.05):
            if leader.error is not None:
                return Outcome(error=leader.error)
            if self.closing.is_set():
                return Outcome(error=RuntimeError("the scenario ended first"))
            if time.monotonic() > deadline:
                return Outcome(error=TimeoutError(f"not elected within {AWAIT_LIMIT:.0f} s"))
        return Outcome({"term": leader.term})

    def open_session(self, label: str, step: Dict[str, Any]) -> Outcome:
        """A session opened with the client's session helper, kept alive in the
        background until the scenario ends, under the step's ``as``."""
        name = step.get("as")
        if not isinstance(name, str):
            raise Malformed(f"{label}: a session needs as")
        options: Dict[str, Any] = {"owner": self.resolve(label, step.get("owner"))}
        if "ttl_ms" in step:
            options["ttl"] = self.whole(label, self.resolve(label, step["ttl_ms"])) / 1000
        if "lock_delay_ms" in step:
            delay = self.resolve(label, step["lock_delay_ms"])
            options["lock_delay"] = self.whole(label, delay) / 1000
        session = self.client.session(**options).open()
        self.sessions[name] = session
        return Outcome({"id": session.id, "ttl_ms": round(session.ttl * 1000),
                        "owner": session.owner,
                        "lock_delay_ms": None if session.lock_delay is None
                        else round(session.lock_delay * 1000)})

    def session(self, label: str, name: Any) -> Session:
        if name not in self.sessions:
            raise Malformed(f"{label}: no session {name!r}")
        return self.sessions[name]

    def candidate(self, label: str, name: Any) -> Leader:
        if name not in self.candidates:
            raise Malformed(f"{label}: no candidate {name!r}")
        return self.candidates[name]

    def granted(self, lease: Lease) -> Outcome:
        result = {"name": self.unprefixed(lease.name), "fence": lease.fence, "owner": lease.owner,
                  "mode": lease.mode}
        if isinstance(lease, Permit):
            result["limit"] = lease.limit
        return Outcome(result, lease)

    def fence(self, check: FenceCheck) -> Outcome:
        return Outcome({"name": self.unprefixed(check.name), "fence": check.fence,
                        "current": check.current, "held": check.held,
                        "expires_in_ms": round(check.expires_in * 1000)})

    def open_watch(self, label: str, as_name: Optional[str], name: str) -> None:
        """Opens a watch whose events a thread hands over through a queue, so a
        step can wait for the next one with a timeout."""
        if not isinstance(as_name, str):
            raise Malformed(f"{label}: a watch needs as")
        watch = self.client.watch(name)
        events: "queue.Queue[Any]" = queue.Queue()

        def pump() -> None:
            try:
                for event in watch:
                    events.put(event)
            except Exception as error:
                events.put(error)

        threading.Thread(target=pump, name=f"scenario-watch:{name}", daemon=True).start()
        self.watches[as_name] = (watch, events)

    def next_event(self, label: str, name: Any) -> Dict[str, Any]:
        if name not in self.watches:
            raise Malformed(f"{label}: no watch {name!r}")
        try:
            event = self.watches[name][1].get(timeout=5)
        except queue.Empty:
            pytest.fail(f"{label}: no event within 5 s")
        if isinstance(event, Exception):
            raise event
        if isinstance(event, LockState):
            return {"type": "state", "held": event.held, "owner": event.owner, "fence": event.fence,
                    "mode": event.mode}
        if isinstance(event, LockEvent):
            return {"type": event.type, "fence": event.fence, "owner": event.owner, "mode": event.mode}
        if isinstance(event, Lagged):
            return {"type": "lagged"}
        if isinstance(event, StateComplete):
            return {"type": "state_complete"}
        raise Malformed(f"{label}: an event of type {type(event).__name__}")

    def lease(self, label: str, name: Any) -> Lease:
        if name not in self.leases:
            raise Malformed(f"{label}: no lease {name!r}")
        return self.leases[name]

    def unprefixed(self, name: str) -> str:
        return name[len(self.prefix):] if name.startswith(self.prefix) else name

    # -- expectations --------------------------------------------------------------

    def check(self, expect: Dict[str, Any], done: Outcome) -> Optional[str]:
        """What is wrong with an outcome given the step's expect; None if nothing."""
        if "error" not in expect:
            if done.error is not None:
                return f"failed: {done.error!r}"
            return self.fields(expect, done.result)
        want = expect["error"]
        if done.error is None:
            return f"succeeded ({done.result}), but the scenario expects the error {want}"
        kind, fields = error_of(done.error)
        if kind not in (want if isinstance(want, list) else [want]):
            return f"failed with {kind} ({done.error!r}), but the scenario expects {want}"
        return self.fields({k: v for k, v in expect.items() if k != "error"}, fields)

    def fields(self, expect: Dict[str, Any], got: Dict[str, Any]) -> Optional[str]:
        for key in sorted(expect):
            if key not in got:
                return f"the result has no field {key!r} (this client cannot express it): {got}"
            problem = self.match(expect[key], got[key])
            if problem is not None:
                return f"{key}: {problem} (result {got})"
        return None

    def match(self, want: Any, got: Any) -> Optional[str]:
        """One field: equal to a value or a $reference, or every comparison of an
        object holds."""
        if not isinstance(want, dict):
            value = self.resolve("expect", want)
            return None if same(value, got) else f"{got!r}, want {value!r}"
        for op, raw in want.items():
            operand = self.resolve("expect", raw)
            if op == "!=":
                if same(operand, got):
                    return f"{got!r}, want != {operand!r}"
                continue
            if op not in COMPARISONS:
                raise Malformed(f"expect: unknown comparison {op!r}")
            if not (is_number(got) and is_number(operand)):
                return f"{got!r} {op} {operand!r} compares numbers only"
            if not COMPARISONS[op](got, operand):
                return f"{got!r}, want {op} {operand!r}"
        return None

    def resolve(self, label: str, value: Any) -> Any:
        """``"$name.field"`` is that field of a kept result."""
        if not isinstance(value, str) or not value.startswith("$"):
            return value
        name, _, field = value[1:].partition(".")
        if name not in self.results or field not in self.results[name]:
            raise Malformed(f"{label}: {value} names no kept result's field")
        return self.results[name][field]

    def whole(self, label: str, value: Any) -> int:
        if not is_number(value) or int(value) != value:
            raise Malformed(f"{label}: {value!r} is not a whole number")
        return int(value)


def lease_state(label: str, lease: Lease) -> Dict[str, Any]:
    """The lease object's own account, with its loss signal (``lease.lost``)
    required to agree: set once the lease is lost, not while held."""
    state = "held"
    if lease.released:
        state = "released"
    else:
        try:
            lease.raise_if_lost()
        except LeaseLost:
            state = "lost"
    assert lease.lost.is_set() == (state == "lost"), (
        f"{label}: the lease is {state} but lease.lost is {lease.lost.is_set()}")
    return {"state": state, "lost_reason": lease.lost_reason if state == "lost" else None}


def leader_state(leader: Leader) -> Dict[str, Any]:
    """The candidate's own account: its term while it leads, whether its term
    was lost, and who leads as the lock's events show it."""
    return {"is_leader": leader.is_leader, "term": leader.term, "lost": leader.lost.is_set(),
            "lost_reason": leader.lost_reason, "leader": leader.leader,
            "leader_term": leader.leader_term}


def error_of(error: BaseException) -> Tuple[str, Dict[str, Any]]:
    """An error's kind in the scenarios' words, and its fields."""
    if isinstance(error, LockBusy):
        holders = error.holders
        holder = next((h for h in holders if h.fence == error.fence), holders[0] if holders else None)
        return "busy", {"owner": error.owner, "fence": error.fence,
                        "mode": holder.mode if holder else None,
                        "holder_count": len(holders), "limit": error.limit}
    if isinstance(error, SessionLost):  # a kind of LeaseLost: asked first
        return "session_lost", {}
    if isinstance(error, LeaseLost):
        return "lease_lost", {}
    if isinstance(error, LimitConflict):
        return "limit_conflict", {"limit": error.limit}
    if isinstance(error, MaxHoldExceeded):
        return "max_hold_exceeded", {}
    if isinstance(error, InvalidRequest):
        return "invalid_request", {"field": error.field}
    if isinstance(error, BrokerUnavailable):
        return "unavailable", {}
    if isinstance(error, AuthError):
        return "auth", {}
    return "other", {}


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values: numbers by value, but ``true`` is not ``1``."""
    if is_number(a) or is_number(b):
        return is_number(a) and is_number(b) and a == b
    return type(a) is type(b) and a == b
