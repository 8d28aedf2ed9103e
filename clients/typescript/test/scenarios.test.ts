/**
 * The shared scenarios (clients/scenarios/*.json, described in its README)
 * replayed through this client's public API against the real broker. Every file
 * runs; a step this client cannot express fails the test, as does a malformed one.
 */

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import {
  AuthError,
  BrokerUnavailable,
  InvalidRequest,
  LeaseLost,
  LimitConflict,
  LockBrokerError,
  LockBusy,
  MaxHoldExceeded,
  SessionLost,
  type FenceCheck,
  type Leader,
  type Lease,
  type Session,
  type Watch,
  type WatchEvent,
} from "lockbroker";
import { REPO, brokerForFile, sleep } from "./harness.js";

type Json = Record<string, unknown>;

const SCENARIOS = join(REPO, "clients", "scenarios");

/** Every operation this runner knows, and the arguments it takes. */
const STEP_ARGS: Record<string, string[]> = {
  acquire: ["lock", "ttl_ms", "wait_ms", "owner", "shared", "request_id"],
  acquire_permit: ["semaphore", "limit", "ttl_ms", "wait_ms", "owner"],
  lock: ["lock", "ttl_ms", "owner", "shared"],
  await: ["step"],
  extend: ["lease", "ttl_ms"],
  extend_token: ["lease", "ttl_ms"],
  release: ["lease"],
  lease_state: ["lease"],
  status: ["lock"],
  semaphore_status: ["semaphore"],
  check_fence: ["lock", "fence"],
  check_semaphore_fence: ["semaphore", "fence"],
  lease_check_fence: ["lease"],
  watch: ["lock"],
  next_event: ["watch"],
  sleep: ["ms"],
  campaign: ["lock", "ttl_ms", "max_hold_ms", "owner"],
  leader_state: ["candidate"],
  resign: ["candidate"],
  open_session: ["ttl_ms", "owner", "lock_delay_ms"],
  session_acquire: ["session", "lock", "shared", "wait_ms", "owner"],
  session_acquire_permit: ["session", "semaphore", "limit", "wait_ms", "owner"],
  session_status: ["session"],
  session_state: ["session"],
  close_session: ["session"],
  end_session_elsewhere: ["session"],
};
/** Keys every step may have, besides its operation's arguments. */
const COMMON_KEYS = ["do", "as", "expect", "within_ms", "async", "note"];
/** Reads, which within_ms may repeat; and the grants (and campaigns) async may start. */
const READ_STEPS = [
  "status",
  "semaphore_status",
  "check_fence",
  "check_semaphore_fence",
  "lease_check_fence",
  "lease_state",
  "leader_state",
  "session_status",
  "session_state",
];
const ASYNC_STEPS = ["acquire", "acquire_permit", "lock", "campaign"];
/** How long a campaign or an awaited async step may take. */
const AWAIT_LIMIT_MS = 30_000;

const { client } = await brokerForFile();

const files = readdirSync(SCENARIOS)
  .filter((file) => file.endsWith(".json"))
  .sort();

test("the scenario folder has scenarios", () => {
  assert.ok(files.length > 0, `no scenario in ${SCENARIOS}`);
});

for (const file of files) {
  test(`scenario ${file.replace(/\.json$/, "")}`, async () => {
    const scenario = JSON.parse(readFileSync(join(SCENARIOS, file), "utf8")) as Json;
    const extra = Object.keys(scenario).filter((key) => key !== "about" && key !== "steps");
    assert.deepEqual(extra, [], `${file}: unknown keys`);
    assert.ok(typeof scenario["about"] === "string" && Array.isArray(scenario["steps"]), `${file}: needs about and steps`);
    const replay = new Replay();
    try {
      await replay.run(scenario["steps"] as Json[]);
    } finally {
      await replay.cleanup();
    }
  });
}

/** What a step (or an async one, once awaited) came to. */
interface Outcome {
  result?: Json;
  lease?: Lease;
  error?: unknown;
}

/** A scenario that cannot run as written: fails the test whatever the expectations. */
class Malformed extends Error {}

/** One scenario's run: its names' prefix, and what its steps kept. */
class Replay {
  readonly prefix = `scn-${randomBytes(4).toString("hex")}-`;
  readonly results = new Map<string, Json>();
  readonly leases = new Map<string, Lease>();
  readonly watches = new Map<string, { watch: Watch; events: AsyncIterator<WatchEvent> }>();
  readonly pending = new Map<string, Promise<Outcome>>();
  readonly candidates = new Map<string, Leader>();
  readonly sessions = new Map<string, Session>();
  /** Set as the scenario ends, which stops every candidate: an election still awaited is over. */
  closing = false;

  async run(steps: Json[]): Promise<void> {
    for (const [i, step] of steps.entries()) {
      const op = this.validate(i, step);
      const label = `step ${i + 1} (${op})`;
      const as = step["as"] as string | undefined;
      if (step["async"] === true) {
        this.pending.set(as!, this.do(label, op, step));
        continue;
      }
      const expect = (step["expect"] as Json | undefined) ?? {};
      const deadline = Date.now() + (step["within_ms"] === undefined ? 0 : this.int(label, step["within_ms"]));
      for (;;) {
        const done = await this.do(label, op, step);
        const problem = this.check(expect, done);
        if (problem === undefined) {
          this.keep(as, done);
          break;
        }
        if (Date.now() > deadline) assert.fail(`${label}: ${problem}`);
        await sleep(50);
      }
    }
  }

  /** Releases what the scenario still holds and closes its watches. */
  async cleanup(): Promise<void> {
    for (const { watch } of this.watches.values()) watch.close();
    this.closing = true;
    for (const leader of this.candidates.values()) await leader.stop();
    for (const pending of this.pending.values()) {
      const done = await pending;
      if (done.lease) this.leases.set(`${this.leases.size} (async)`, done.lease);
    }
    for (const lease of this.leases.values()) await lease.release().catch(() => undefined);
    for (const session of this.sessions.values()) await session.close().catch(() => undefined);
  }

  /** Checks a step's keys against the vocabulary; returns its operation. */
  validate(i: number, step: Json): string {
    const op = step["do"];
    const args = typeof op === "string" ? STEP_ARGS[op] : undefined;
    if (args === undefined) throw new Malformed(`step ${i + 1}: this client cannot express the operation ${String(op)}`);
    for (const key of Object.keys(step)) {
      if (!COMMON_KEYS.includes(key) && !args.includes(key)) throw new Malformed(`step ${i + 1} (${op}): unknown key ${key}`);
    }
    if ("within_ms" in step && !READ_STEPS.includes(op as string)) {
      throw new Malformed(`step ${i + 1} (${op}): within_ms repeats reads only`);
    }
    if (step["async"] === true && (!ASYNC_STEPS.includes(op as string) || typeof step["as"] !== "string")) {
      throw new Malformed(`step ${i + 1} (${op}): async is for grants kept with as`);
    }
    const expect = step["expect"];
    if (expect !== undefined && (expect === null || typeof expect !== "object" || Array.isArray(expect))) {
      throw new Malformed(`step ${i + 1} (${op}): expect must be an object`);
    }
    return op as string;
  }

  keep(as: string | undefined, done: Outcome): void {
    if (as === undefined) return;
    this.results.set(as, done.result ?? {});
    if (done.lease) this.leases.set(as, done.lease);
  }

  /** Runs one operation through the client's public API; the client's errors become the outcome. */
  async do(label: string, op: string, step: Json): Promise<Outcome> {
    const arg = (key: string): unknown => this.resolve(label, step[key]);
    const ms = (key: string): number | undefined => (step[key] === undefined ? undefined : this.int(label, arg(key)));
    const str = (key: string): string | undefined => arg(key) as string | undefined;
    const name = (key: string): string => {
      const value = arg(key);
      if (typeof value !== "string" || value === "") throw new Malformed(`${label}: ${key} must name a ${key}`);
      return this.prefix + value;
    };
    try {
      switch (op) {
        case "acquire":
          return this.granted(
            await client.acquire(name("lock"), {
              ttlMs: ms("ttl_ms"),
              waitMs: ms("wait_ms"),
              owner: str("owner"),
              shared: arg("shared") === true,
              requestId: str("request_id"),
            }),
          );
        case "acquire_permit":
          return this.granted(
            await client.acquirePermit(name("semaphore"), this.int(label, arg("limit")), {
              ttlMs: ms("ttl_ms"),
              waitMs: ms("wait_ms"),
              owner: str("owner"),
            }),
          );
        case "lock":
          return this.granted(
            await client.lock(name("lock"), { ttlMs: ms("ttl_ms"), owner: str("owner"), shared: arg("shared") === true }),
          );
        case "await": {
          const step = str("step")!;
          const pending = this.pending.get(step);
          if (!pending) throw new Malformed(`${label}: no async step ${step} to await`);
          this.pending.delete(step);
          const done = await withinMs(pending, AWAIT_LIMIT_MS, `${label}: the async step did not finish`);
          if (done.lease) this.leases.set(step, done.lease);
          this.results.set(step, done.result ?? {});
          return done;
        }
        case "extend":
          await this.lease(label, str("lease")).extend(ms("ttl_ms"));
          return { result: {} };
        case "extend_token": {
          const lease = this.lease(label, str("lease"));
          const renewal =
            lease.mode === "permit"
              ? await client.extendPermit(lease.name, lease.token, ms("ttl_ms")!)
              : await client.extend(lease.name, lease.token, ms("ttl_ms")!);
          return { result: { fence: renewal.fence, ttl_ms: renewal.ttlMs } };
        }
        case "release":
          await this.lease(label, str("lease")).release();
          return { result: {} };
        case "lease_state":
          return { result: leaseState(label, this.lease(label, str("lease"))) };
        case "status": {
          const s = await client.status(name("lock"));
          return {
            result: {
              held: s.held,
              owner: s.owner,
              fence: s.fence,
              mode: s.mode,
              holder_count: s.holderCount,
              waiting: s.waiting,
            },
          };
        }
        case "semaphore_status": {
          const s = await client.semaphoreStatus(name("semaphore"));
          return { result: { limit: s.limit, held: s.held, available: s.available, fence: s.fence } };
        }
        case "check_fence":
          return this.fence(await client.checkFence(name("lock"), this.int(label, arg("fence"))));
        case "check_semaphore_fence":
          return this.fence(await client.checkSemaphoreFence(name("semaphore"), this.int(label, arg("fence"))));
        case "lease_check_fence":
          return this.fence(await this.lease(label, str("lease")).checkFence());
        case "watch": {
          const watch = client.watch(name("lock"));
          this.watches.set(step["as"] as string, { watch, events: watch[Symbol.asyncIterator]() });
          return { result: {} };
        }
        case "next_event":
          return { result: await this.nextEvent(label, str("watch")!) };
        case "sleep":
          await sleep(ms("ms")!);
          return { result: {} };
        case "campaign": {
          if (typeof step["as"] !== "string") throw new Malformed(`${label}: a candidate needs as`);
          // The candidate is kept before anything is awaited, so an async campaign exists from its step on.
          const leader = client.leader(name("lock"), { ttlMs: ms("ttl_ms"), maxHoldMs: ms("max_hold_ms"), owner: str("owner") });
          this.candidates.set(step["as"] as string, leader.start());
          return await this.elected(leader);
        }
        case "leader_state":
          return { result: leaderState(this.candidate(label, str("candidate"))) };
        case "resign":
          await this.candidate(label, str("candidate")).resign();
          return { result: {} };
        case "open_session": {
          if (typeof step["as"] !== "string") throw new Malformed(`${label}: a session needs as`);
          const session = await client.session({ ttlMs: ms("ttl_ms"), owner: str("owner"), lockDelayMs: ms("lock_delay_ms") });
          this.sessions.set(step["as"] as string, session);
          return {
            result: { id: session.id, ttl_ms: session.ttlMs, owner: session.owner, lock_delay_ms: session.lockDelayMs },
          };
        }
        case "session_acquire":
          return this.granted(
            await this.session(label, str("session")).acquire(name("lock"), {
              shared: arg("shared") === true,
              waitMs: ms("wait_ms"),
              owner: str("owner"),
            }),
          );
        case "session_acquire_permit":
          return this.granted(
            await this.session(label, str("session")).acquirePermit(name("semaphore"), this.int(label, arg("limit")), {
              waitMs: ms("wait_ms"),
              owner: str("owner"),
            }),
          );
        case "session_status": {
          const s = await client.sessionStatus(this.session(label, str("session")).id);
          return { result: { open: s.open, owner: s.owner, leases: s.leases, ttl_ms: s.ttlMs } };
        }
        case "session_state":
          return { result: sessionState(label, this.session(label, str("session"))) };
        case "close_session":
          return { result: { leases_released: await this.session(label, str("session")).close() } };
        case "end_session_elsewhere": {
          const session = this.session(label, str("session"));
          await client.closeSession(session.id, session.token);
          return { result: {} };
        }
      }
    } catch (error) {
      if (error instanceof Malformed || error instanceof assert.AssertionError) throw error;
      return { error };
    }
    throw new Malformed(`${label}: this client cannot express the operation`);
  }

  /** Waits until the candidate leads; a campaign that gave up is its error. */
  async elected(leader: Leader): Promise<Outcome> {
    let won = false;
    void leader.elected.then(() => (won = true));
    const deadline = Date.now() + AWAIT_LIMIT_MS;
    while (!won) {
      if (leader.error !== undefined) return { error: leader.error };
      if (this.closing) return { error: new Error("the scenario ended first") };
      if (Date.now() > deadline) return { error: new Error(`not elected within ${AWAIT_LIMIT_MS} ms`) };
      await sleep(50);
    }
    return { result: { term: leader.term } };
  }

  session(label: string, name: string | undefined): Session {
    const session = name === undefined ? undefined : this.sessions.get(name);
    if (!session) throw new Malformed(`${label}: no session ${String(name)}`);
    return session;
  }

  candidate(label: string, name: string | undefined): Leader {
    const leader = name === undefined ? undefined : this.candidates.get(name);
    if (!leader) throw new Malformed(`${label}: no candidate ${String(name)}`);
    return leader;
  }

  granted(lease: Lease): Outcome {
    const result: Json = { name: this.unprefixed(lease.name), fence: lease.fence, owner: lease.owner, mode: lease.mode };
    if (lease.mode === "permit") result["limit"] = lease.limit ?? null;
    return { result, lease };
  }

  fence(check: FenceCheck): Outcome {
    return {
      result: {
        name: this.unprefixed(check.name),
        fence: check.fence,
        current: check.current,
        held: check.held,
        expires_in_ms: check.expiresInMs,
      },
    };
  }

  async nextEvent(label: string, name: string): Promise<Json> {
    const watched = this.watches.get(name);
    if (!watched) throw new Malformed(`${label}: no watch ${name}`);
    const step = await withinMs(watched.events.next(), 5000, `${label}: no event within 5 s`);
    if (step.done) throw new Error("the watch ended");
    const event = step.value;
    if (event.type === "state") {
      if (event.complete) return { type: "state_complete" };
      const s = event.status;
      if (!s) throw new Error("a state event without a lock's status");
      return { type: "state", held: s.held, owner: s.owner, fence: s.fence, mode: s.mode };
    }
    if (event.type === "lagged") return { type: "lagged" };
    return { type: event.type, fence: event.fence, owner: event.owner, mode: event.mode };
  }

  lease(label: string, name: string | undefined): Lease {
    const lease = name === undefined ? undefined : this.leases.get(name);
    if (!lease) throw new Malformed(`${label}: no lease ${String(name)}`);
    return lease;
  }

  unprefixed(name: string): string {
    return name.startsWith(this.prefix) ? name.slice(this.prefix.length) : name;
  }

  /** What is wrong with an outcome given the step's expect; undefined if nothing. */
  check(expect: Json, done: Outcome): string | undefined {
    if (!("error" in expect)) {
      if (done.error !== undefined) return `failed: ${String(done.error)}`;
      return this.fields(expect, done.result ?? {});
    }
    const want = expect["error"];
    if (done.error === undefined) return `succeeded (${JSON.stringify(done.result)}), but the scenario expects the error ${JSON.stringify(want)}`;
    const [kind, fields] = errorOf(done.error);
    const kinds = Array.isArray(want) ? want : [want];
    if (!kinds.includes(kind)) return `failed with ${kind} (${String(done.error)}), but the scenario expects ${JSON.stringify(want)}`;
    const rest = Object.fromEntries(Object.entries(expect).filter(([key]) => key !== "error"));
    return this.fields(rest, fields);
  }

  fields(expect: Json, got: Json): string | undefined {
    for (const key of Object.keys(expect).sort()) {
      if (!(key in got)) return `the result has no field ${key} (this client cannot express it): ${JSON.stringify(got)}`;
      const problem = this.match(expect[key], got[key]);
      if (problem !== undefined) return `${key}: ${problem} (result ${JSON.stringify(got)})`;
    }
    return undefined;
  }

  /** One field: equal to a value or a $reference, or every comparison of an object holds. */
  match(want: unknown, got: unknown): string | undefined {
    if (want === null || typeof want !== "object") {
      const value = this.resolve("expect", want);
      return value === got ? undefined : `${JSON.stringify(got)}, want ${JSON.stringify(value)}`;
    }
    for (const [op, raw] of Object.entries(want as Json)) {
      const operand = this.resolve("expect", raw);
      if (op === "!=") {
        if (operand === got) return `${JSON.stringify(got)}, want != ${JSON.stringify(operand)}`;
        continue;
      }
      if (typeof got !== "number" || typeof operand !== "number") return `${String(got)} ${op} ${String(operand)} compares numbers only`;
      const holds: Record<string, boolean> = { ">": got > operand, ">=": got >= operand, "<": got < operand, "<=": got <= operand };
      if (!(op in holds)) throw new Malformed(`expect: unknown comparison ${op}`);
      if (!holds[op]) return `${got}, want ${op} ${operand}`;
    }
    return undefined;
  }

  /** "$name.field" is that field of a kept result. */
  resolve(label: string, value: unknown): unknown {
    if (typeof value !== "string" || !value.startsWith("$")) return value;
    const dot = value.indexOf(".");
    const result = dot < 0 ? undefined : this.results.get(value.slice(1, dot));
    if (!result || !(value.slice(dot + 1) in result)) throw new Malformed(`${label}: ${value} names no kept result's field`);
    return result[value.slice(dot + 1)];
  }

  int(label: string, value: unknown): number {
    if (typeof value !== "number" || !Number.isInteger(value)) throw new Malformed(`${label}: ${String(value)} is not a whole number`);
    return value;
  }
}

/** The lease object's own account, with its loss signal required to agree: aborted once lost or released, not before. */
function leaseState(label: string, lease: Lease): Json {
  let state = "held";
  if (lease.released) state = "released";
  else {
    try {
      lease.throwIfLost();
    } catch (error) {
      if (!(error instanceof LeaseLost)) throw error;
      state = "lost";
    }
  }
  assert.equal(lease.signal.aborted, state !== "held", `${label}: the lease is ${state} but signal.aborted is ${lease.signal.aborted}`);
  return { state, lost_reason: state === "lost" ? (lease.lostReason ?? null) : null };
}

/** The session helper's own account, with its signal required to agree: aborted once lost or closed, not before. */
function sessionState(label: string, session: Session): Json {
  let state = session.closed ? "closed" : "open";
  try {
    session.throwIfLost();
  } catch (error) {
    if (!(error instanceof SessionLost)) throw error;
    state = "lost";
  }
  assert.equal(session.signal.aborted, state !== "open", `${label}: the session is ${state} but signal.aborted is ${session.signal.aborted}`);
  return { state };
}

/** The candidate's own account: its term while it leads, whether its term was lost, and who leads as the lock's events show it. */
function leaderState(leader: Leader): Json {
  return {
    is_leader: leader.isLeader,
    term: leader.term,
    lost: leader.lost.aborted,
    lost_reason: leader.lostReason ?? null,
    leader: leader.leader,
    leader_term: leader.leaderTerm,
  };
}

/** An error's kind in the scenarios' words, and its fields. */
function errorOf(error: unknown): [string, Json] {
  if (error instanceof LockBusy) {
    const holders = error.holders;
    const holder = holders.find((h) => h.fence === error.fence) ?? holders[0];
    return [
      "busy",
      {
        owner: error.owner ?? null,
        fence: error.fence ?? null,
        mode: holder?.mode ?? null,
        holder_count: holders.length,
        limit: error.limit ?? null,
      },
    ];
  }
  if (error instanceof SessionLost) return ["session_lost", {}];
  if (error instanceof LeaseLost) return ["lease_lost", {}];
  if (error instanceof LimitConflict) return ["limit_conflict", { limit: error.limit ?? null }];
  if (error instanceof MaxHoldExceeded) return ["max_hold_exceeded", {}];
  if (error instanceof InvalidRequest) return ["invalid_request", { field: error.field ?? null }];
  if (error instanceof BrokerUnavailable) return ["unavailable", {}];
  if (error instanceof AuthError) return ["auth", {}];
  if (error instanceof LockBrokerError && error.code === "released") return ["released", {}];
  return ["other", {}];
}

/** `promise`, or a failure after `limitMs`. */
async function withinMs<T>(promise: Promise<T>, limitMs: number, message: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, fail) => {
    timer = setTimeout(() => fail(new assert.AssertionError({ message })), limitMs);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}
