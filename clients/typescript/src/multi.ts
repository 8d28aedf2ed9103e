/**
 * Several locks at once: {@link Client.acquireAll} takes a lease on every
 * lock named or on none, in one request; {@link Client.releaseAll} gives
 * several leases back in one. Each lease granted is an ordinary {@link Lease}.
 * {@link Client.lockAll} keeps them renewed as a {@link LeaseSet}, with one
 * signal for the set.
 */

import {
  DEFAULT_MAX_HOLD_MS,
  DEFAULT_TTL_MS,
  RESYNC_SHARE,
  pauseAfter,
  type AcquireOptions,
  type Client,
  type LockOptions,
} from "./client.js";
import { now } from "./clock.js";
import { LeaseLost, LockBrokerError, errorFromDetail } from "./errors.js";
import { Lease, makeAsyncDisposable, runThenRelease, type LeaseAnswer, type ReleaseAnswer } from "./lease.js";
import { holdUnder, sessionAsk, sessionRefused } from "./session.js";
import { defaultOwner, duration, newRequestId, resourcePath, sleep, wireMillis } from "./util.js";

const ACQUIRE_ALL = "/v1/locks/acquire-all";
const RELEASE_ALL = "/v1/locks/release-all";

/** One lock of {@link Client.acquireAll}: its name, and whether its lease is shared. */
export interface LockAsk {
  name: string;
  shared?: boolean;
}

/**
 * The optional arguments of {@link Client.acquireAll}: {@link AcquireOptions}
 * for every lease, without `shared` (each {@link LockAsk} says it) and `fair`
 * (the broker has no fair queue over several locks).
 */
export type AcquireAllOptions = Omit<AcquireOptions, "shared" | "fair">;

/**
 * The optional arguments of {@link Client.lockAll}: {@link LockOptions}
 * without `shared` (each {@link LockAsk} says it) and `fair`. (A lease under
 * a session is kept by the session, not renewed on its own.)
 */
export type LockAllOptions = Omit<LockOptions, "shared" | "fair">;

/**
 * What {@link Client.releaseAll} made of one lease: `released` with its
 * `fence`, or not, with the `error` its own release would have thrown
 * ({@link LeaseLost} for a lease that expired or was taken).
 */
export interface ReleaseResult {
  name: string;
  released: boolean;
  fence?: number;
  error?: LockBrokerError;
}

/** One lease's result in a release-all answer. */
interface ReleaseAllResult {
  name: string;
  released: boolean;
  fence?: number;
  error?: Record<string, unknown>;
}

/** @internal {@link Client.acquireAll}. */
export async function acquireAll(
  client: Client,
  locks: ReadonlyArray<string | LockAsk>,
  options: AcquireAllOptions,
): Promise<Lease[]> {
  if (!Array.isArray(locks)) throw new TypeError("acquireAll takes an array of locks");
  const asks = locks.map((lock): LockAsk => (typeof lock === "string" ? { name: lock } : lock));
  asks.forEach((ask, i) => {
    resourcePath("locks", ask.name); // the same check of the name as a single acquire's
    // The broker would answer one lease at both places, which two leases cannot both own.
    if (asks.findIndex((earlier) => earlier.name === ask.name) < i) {
      throw new RangeError(`lock ${JSON.stringify(ask.name)} is named twice (locks[${i}])`);
    }
  });
  const unsupported = options as AcquireOptions;
  if (unsupported.shared !== undefined || unsupported.fair !== undefined) {
    throw new TypeError("acquireAll takes `shared` from each lock, and has no `fair`");
  }
  const session = sessionAsk(options);
  const ttlMs = duration(options.ttlMs ?? DEFAULT_TTL_MS, "ttlMs", false);
  const waitMs = duration(options.waitMs ?? 0, "waitMs", true);
  const lockDelayMs = options.lockDelayMs === undefined ? undefined : duration(options.lockDelayMs, "lockDelayMs", true);
  if (asks.length === 0) return [];
  const owner = options.owner ?? session?.helper?.owner ?? (await defaultOwner());
  const requestId = options.requestId || newRequestId();
  // An exclusive lease is the broker's default: no mode.
  const wireLocks = asks.map((ask) => (ask.shared ? { name: ask.name, mode: "shared" } : { name: ask.name }));
  const giveUpAt = now() + waitMs;
  for (;;) {
    const left = Math.max(0, giveUpAt - now());
    const body: Record<string, unknown> = {
      locks: wireLocks,
      wait_ms: Math.floor(left),
      owner,
      request_id: requestId,
    };
    // Under a session, the leases' TTL and lock-delay are the session's.
    if (session) body["session"] = session.token;
    else body["ttl_ms"] = wireMillis(ttlMs);
    if (lockDelayMs !== undefined) body["lock_delay_ms"] = Math.floor(lockDelayMs);
    const sent = now();
    let answer: { leases?: LeaseAnswer[] };
    try {
      answer = await client._call("POST", ACQUIRE_ALL, body, { extraMs: left, signal: options.signal });
    } catch (error) {
      sessionRefused(session, error);
      const pause = pauseAfter(error, sent, giveUpAt);
      if (pause === undefined) throw error;
      await sleep(pause, options.signal);
      continue;
    }
    const granted = Array.isArray(answer.leases) ? answer.leases : [];
    const leaseTtlMs = (one: LeaseAnswer): number => (session ? (session.helper?.ttlMs ?? one.ttl_ms) : ttlMs);
    if (granted.length !== asks.length || granted.some((one, i) => one?.name !== asks[i]?.name)) {
      // Every grant with a name and a token goes back, rather than held until it expires.
      const held = granted.filter((one) => typeof one?.name === "string" && typeof one.token === "string");
      await giveBack(client, held.map((one) => new Lease(client, "locks", one, sent, leaseTtlMs(one))));
      throw new LockBrokerError("acquire-all answered other locks than asked for", { code: "bad_response", status: 200 });
    }
    const leases = granted.map((one) => new Lease(client, "locks", one, sent, leaseTtlMs(one)));
    if (session) {
      for (const lease of leases) holdUnder(lease, session);
      return leases;
    }
    // A grant that waited: bound each deadline by an extend sent now.
    if (now() - sent > ttlMs * RESYNC_SHARE) {
      try {
        for (const lease of leases) await lease._resync();
      } catch (error) {
        await giveBack(client, leases);
        throw error;
      }
    }
    for (const lease of leases) lease._arm();
    return leases;
  }
}

/** Releases the leases of an acquire-all that cannot be returned; the caller throws why. */
async function giveBack(client: Client, leases: Lease[]): Promise<void> {
  await releaseAll(client, leases).catch(() => undefined);
}

/** @internal {@link Client.lockAll}. */
export async function lockAll(
  client: Client,
  locks: ReadonlyArray<string | LockAsk>,
  options: LockAllOptions,
): Promise<LeaseSet> {
  if ((options as AcquireOptions).session !== undefined) {
    throw new TypeError(
      "renewed leases are not taken under a session: use acquireAll(locks, { session }) or session.acquireAll(locks)",
    );
  }
  const ttlMs = duration(options.ttlMs ?? DEFAULT_TTL_MS, "ttlMs", false);
  const maxHoldMs = duration(options.maxHoldMs ?? DEFAULT_MAX_HOLD_MS, "maxHoldMs", false);
  if (maxHoldMs < ttlMs) throw new RangeError(`maxHoldMs (${maxHoldMs}) must be at least ttlMs (${ttlMs})`);
  const set = new LeaseSet(client, await acquireAll(client, locks, options));
  for (const lease of set.leases) lease._startRenewing(maxHoldMs);
  return set;
}

/**
 * The leases of one {@link Client.lockAll}, in the order asked, each renewed
 * as `client.lock()` renews one, with one `signal` for the set: it aborts the
 * moment any lease is lost (the work no longer holds every lock it asked
 * for), or when the set is released. Release it with {@link LeaseSet.run},
 * {@link LeaseSet.release} or `await using`: one release-all gives every
 * lease back.
 */
export class LeaseSet implements Iterable<Lease> {
  /** The leases, in the order asked: each an ordinary {@link Lease} with its own fence and signal. */
  readonly leases: readonly Lease[];

  readonly #client: Client;
  readonly #controller = new AbortController();
  #lostLease: Lease | undefined;
  #release: Promise<void> | undefined;
  // Whether the loss already reached the work (throwIfLost threw it).
  #lossThrown = false;

  /** @internal */
  constructor(client: Client, leases: readonly Lease[]) {
    this.#client = client;
    this.leases = leases;
    for (const lease of leases) {
      const aborted = (): void => {
        // A lease's signal also aborts when it is released: only a loss is the set's.
        if (lease.signal.reason instanceof LeaseLost) this.#lost(lease, lease.signal.reason);
      };
      if (lease.signal.aborted) aborted();
      else lease.signal.addEventListener("abort", aborted, { once: true });
    }
  }

  /**
   * Aborts the moment any lease of the set is lost (its `reason` is that
   * lease's {@link LeaseLost}, naming the lock), or when the set is released.
   * Pass it to the work that needs every lock.
   */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Whether any lease of the set is lost. */
  get lost(): boolean {
    return this.#lostLease !== undefined;
  }

  /** The first lease of the set that was lost; undefined while every lease is held. */
  get lostLease(): Lease | undefined {
    return this.#lostLease;
  }

  /** Why the first lost lease was lost: `"lease_lost"` (the broker said so) or `"expired"`. */
  get lostReason(): string | undefined {
    return this.#lostLease?.lostReason;
  }

  /** How long the first lease of the set to expire stays valid unless renewed (see {@link Lease.remainingMs}). */
  remainingMs(): number {
    return this.leases.length === 0 ? 0 : Math.min(...this.leases.map((lease) => lease.remainingMs()));
  }

  /** Throws the {@link LeaseLost} of the first lease lost, or past its deadline, if any. */
  throwIfLost(): void {
    try {
      this.#lostLease?.throwIfLost();
      for (const lease of this.leases) lease.throwIfLost();
    } catch (error) {
      this.#lossThrown = true;
      throw error;
    }
  }

  /**
   * Runs `work` while holding every lease, then releases them all, as
   * {@link Lease.run} does for one: `work` gets {@link signal}; when it
   * throws, that error comes back as it is; when it returns but a lease was
   * lost meanwhile, the release throws {@link LeaseLost}.
   *
   * ```ts
   * const leases = await client.lockAll(["account:17", "account:42"]);
   * await leases.run(async (signal) => transfer(leases.leases[0]!.fence, leases.leases[1]!.fence, signal));
   * ```
   */
  async run<T>(work: (signal: AbortSignal) => Promise<T> | T): Promise<T> {
    return runThenRelease(this, work);
  }

  /**
   * Gives every lease back with one {@link Client.releaseAll} (renewing stops
   * first, and no extend follows it) and aborts {@link signal}. Throws the
   * {@link LeaseLost} of the first lease lost while held (another holder may
   * have run: treat the work as possibly duplicated), or
   * {@link BrokerUnavailable} when the broker could not be told (the leases
   * then expire on their own). Calling it again settles as the first call did.
   */
  release(): Promise<void> {
    this.#release ??= this.#releaseOnce();
    return this.#release;
  }

  /** The leases, in the order asked: `const [debit, credit] = leases`. */
  [Symbol.iterator](): Iterator<Lease> {
    return this.leases[Symbol.iterator]();
  }

  toString(): string {
    const state = this.#lostLease ? `lost ${JSON.stringify(this.#lostLease.name)}` : this.#release ? "released" : "held";
    return `LeaseSet(${this.leases.map((lease) => JSON.stringify(lease.name)).join(", ")}, ${state})`;
  }

  async #releaseOnce(): Promise<void> {
    let results: ReleaseResult[];
    try {
      results = await this.#client.releaseAll(this.leases);
    } catch (error) {
      throw this.#lostLease?.signal.reason ?? error;
    } finally {
      this.#end(new LockBrokerError("the leases were released", { code: "released" }));
    }
    const lost = results.find((result) => result.error instanceof LeaseLost);
    if (lost) throw this.#lostLease?.signal.reason ?? lost.error;
    const failed = results.find((result) => result.error !== undefined);
    if (failed) throw failed.error;
  }

  /**
   * @internal The release `await using` runs; as {@link Lease} does, it throws
   * only a loss the body was not already given by {@link throwIfLost}, and
   * never an unreachable broker.
   */
  async _dispose(): Promise<void> {
    try {
      await this.release();
    } catch (error) {
      if (error instanceof LeaseLost && !this.#lossThrown) throw error;
    }
  }

  #lost(lease: Lease, loss: LeaseLost): void {
    this.#lostLease ??= lease;
    this.#end(loss);
  }

  #end(reason: unknown): void {
    if (!this.#controller.signal.aborted) this.#controller.abort(reason);
  }
}

makeAsyncDisposable(LeaseSet.prototype);
export interface LeaseSet {
  /**
   * Releases every lease (see {@link LeaseSet.release}); present where the
   * runtime has `Symbol.asyncDispose`. Throws only a loss the body was not
   * already given by `throwIfLost()`; never an unreachable broker.
   */
  [Symbol.asyncDispose](): Promise<void>;
}

/** @internal {@link Client.releaseAll}. */
export async function releaseAll(client: Client, leases: ReadonlyArray<Lease>): Promise<ReleaseResult[]> {
  for (const lease of leases) {
    if (lease._kind !== "locks") throw new TypeError(`releaseAll gives back lock leases, not ${lease.toString()}`);
  }
  // Asked about: each lease once, unless its release already started or the
  // broker already said it is lost (its own release would not ask either).
  const asked = [...new Set(leases)].filter((lease) => !lease._releasing && !lease._gone);
  await Promise.all(asked.map((lease) => lease._stopRenewing()));
  const answers = asked.length === 0 ? Promise.resolve([]) : requestReleaseAll(client, asked);
  answers.catch(() => undefined); // each lease's release below reports it
  const settled = await Promise.allSettled(
    leases.map((lease) =>
      lease._releaseBy(async () => {
        const answer = (await answers)[asked.indexOf(lease)];
        if (answer === undefined) throw new LockBrokerError("release-all left a lease out", { code: "bad_response" });
        return resultAnswer(answer);
      }),
    ),
  );
  // The request as a whole failed: every lease asked about ended as its own release failing.
  await answers;
  return settled.map((outcome, i) => {
    const lease = leases[i] as Lease;
    if (outcome.status === "fulfilled") return { name: lease.name, released: true, fence: lease.fence };
    const error =
      outcome.reason instanceof LockBrokerError
        ? outcome.reason
        : new LockBrokerError(String(outcome.reason), { code: "error", cause: outcome.reason });
    return { name: lease.name, released: false, error };
  });
}

/** POST /v1/locks/release-all for `leases`, its answer checked to be about them, in order. */
async function requestReleaseAll(client: Client, leases: Lease[]): Promise<ReleaseAllResult[]> {
  const body = { leases: leases.map((lease) => ({ name: lease.name, token: lease.token })) };
  const answer = await client._call<{ results?: ReleaseAllResult[] }>("POST", RELEASE_ALL, body);
  const results = answer.results;
  if (!Array.isArray(results) || results.length !== leases.length || results.some((r, i) => r.name !== leases[i]?.name)) {
    throw new LockBrokerError("release-all answered other leases than asked for", { code: "bad_response", status: 200 });
  }
  return results;
}

/** One lease's result as its own release's answer, or the error its own release would get. */
function resultAnswer(result: ReleaseAllResult): ReleaseAnswer {
  if (result.released) return { name: result.name, released: true, fence: result.fence ?? 0 };
  if (result.error !== null && typeof result.error === "object") throw errorFromDetail(result.error);
  throw new LockBrokerError(`release-all said lock ${JSON.stringify(result.name)} was not released, without why`, {
    code: "bad_response",
  });
}
