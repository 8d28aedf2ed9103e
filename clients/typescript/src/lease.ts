/**
 * A granted lease: its fence and secret token, the local deadline that is never
 * later than the broker's, the signal that aborts when the lease is gone, and
 * the renewer that `client.lock()` starts.
 */

import type { Client } from "./client.js";
import { now } from "./clock.js";
import { BrokerUnavailable, LeaseLost, LockBrokerError, MaxHoldExceeded } from "./errors.js";
import type { FenceCheck, LeaseMode } from "./status.js";
import type { Kind } from "./util.js";

/** @internal The JSON of a grant, and (without the token) of a renewal. */
export interface LeaseAnswer {
  name: string;
  token?: string;
  fence: number;
  ttl_ms: number;
  expires_at_ms: number;
  owner?: string | null;
  mode?: LeaseMode;
  /** A permit's: the semaphore's limit it was granted under. */
  limit?: number;
}

/**
 * @internal The JSON of a release. `acknowledged` is present only when the
 * broker waits for Redis replicas (`redis.min_replicas_acked` above 0).
 */
export interface ReleaseAnswer {
  name: string;
  released: boolean;
  fence: number;
  acknowledged?: boolean;
}

/** Longest pause between renewal retries while the broker cannot be reached. */
export const RETRY_PAUSE_MS = 1000;

/**
 * @internal What a lease held under a session helper asks of the session:
 * the lease's deadline is the session's, so a lease that finds it passed has
 * the session check its own (and end every lease under it).
 */
export interface SessionHold {
  _lapse(): void;
}

/**
 * A granted lease: `fence` for the protected resource, `token` (secret) to
 * extend and release it, and `signal`, which aborts once the lease is lost or
 * released. Release it with {@link Lease.release}, `await using`, or
 * `try … finally`.
 */
export class Lease {
  /** The lock's name. */
  readonly name: string;
  /** Larger than every fence issued before for this lock: pass it to what you write to. */
  readonly fence: number;
  /** The holder's label. */
  readonly owner: string | null;
  /** The validity asked for at each renewal, in ms. */
  readonly ttlMs: number;
  /** `"exclusive"` or `"shared"` for a lock's lease, `"permit"` for a semaphore's. */
  readonly mode: LeaseMode;
  /** A permit's: the semaphore's limit it was granted under; undefined for a lock's lease. */
  readonly limit: number | undefined;

  readonly #client: Client;
  readonly #kind: Kind;
  readonly #token: string;
  readonly #grantedAt: number;
  readonly #controller = new AbortController();
  #deadline: number;
  #expiresAtMs: number;
  #lastSent: number;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #armed = false;
  #lost: LeaseLost | undefined;
  #released = false;
  #releaseAcknowledged: boolean | undefined;
  // The renewer.
  #renewing: Promise<void> | undefined;
  #stopped = false;
  #wake: (() => void) | undefined;
  #release: Promise<void> | undefined;
  // Whether the loss already reached the work (throwIfLost threw it).
  #lossThrown = false;
  // Held under a session: never extended on its own.
  #underSession = false;
  // The session helper keeping it, whose deadline is the lease's.
  #session: SessionHold | undefined;

  /** @internal */
  constructor(client: Client, kind: Kind, answer: LeaseAnswer, sent: number, ttlMs: number) {
    this.#kind = kind;
    this.mode = answer.mode ?? (kind === "semaphores" ? "permit" : "exclusive");
    this.name = answer.name;
    this.fence = answer.fence;
    this.owner = answer.owner ?? null;
    this.limit = kind === "semaphores" ? answer.limit : undefined;
    this.ttlMs = ttlMs;
    this.#client = client;
    this.#token = answer.token ?? "";
    this.#grantedAt = sent;
    this.#deadline = sent + answer.ttl_ms;
    this.#expiresAtMs = answer.expires_at_ms;
    this.#lastSent = sent;
  }

  /** The secret that extends and releases the lease. Keep it out of logs and URLs. */
  get token(): string {
    return this.#token;
  }

  /**
   * Aborts the moment the lease is lost (the broker said so, or it ran out
   * without a renewal; the reason is a {@link LeaseLost}) or released. Pass it
   * to the work that needs the lock, so that work stops when the lock is gone.
   */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Whether the lease is lost (or may be). */
  get lost(): boolean {
    return this.#lost !== undefined;
  }

  /**
   * Why the lease was lost: `"lease_lost"` (the broker said so), `"expired"`,
   * or `"session_lost"` (the session it was held under ended).
   */
  get lostReason(): string | undefined {
    return this.#lost?.reason;
  }

  /** Whether the lease was released. */
  get released(): boolean {
    return this.#released;
  }

  /**
   * After a successful release, whether as many Redis replicas as the broker
   * waits for (`LOCKBROKER_REDIS_MIN_REPLICAS_ACKED` above 0) acknowledged it in
   * time. `false` means the lock is free on the Redis primary, but a failover
   * could bring the lease back until its TTL. `undefined` before the release,
   * and when the broker waits for no replicas.
   */
  get releaseAcknowledged(): boolean | undefined {
    return this.#releaseAcknowledged;
  }

  /** The broker's expiry, in Unix milliseconds of its clock. */
  get expiresAtMs(): number {
    return this.#expiresAtMs;
  }

  /**
   * How long the lease stays valid unless renewed, by the local clock, counted
   * from when the request that granted or last extended it was sent (so never
   * longer than the broker's own count), in whole milliseconds rounded down.
   * 0 once past, lost or released.
   */
  remainingMs(): number {
    if (this.#lost || this.#released) return 0;
    return Math.max(0, Math.floor(this.#deadline - now()));
  }

  /**
   * Throws {@link LeaseLost} if the lease is lost or past its deadline (a
   * {@link SessionLost} for a lease whose session ended).
   */
  throwIfLost(): void {
    if (!this.#lost && !this.#released && this.#deadline - now() <= 0) {
      if (this.#session) this.#session._lapse();
      else this.#markLost(this.#expired());
    }
    if (this.#lost) {
      this.#lossThrown = true;
      throw this.#lost;
    }
  }

  /**
   * Runs `work` while holding the lease, then releases it, and works without
   * `await using` (any Node, any bundler). `work` gets {@link signal}.
   * When `work` throws, that error comes back as it is: the release still
   * runs, and a release failure never replaces it. When `work` returns but the
   * lease was lost meanwhile, the release throws {@link LeaseLost}.
   *
   * ```ts
   * const lease = await client.lock("nightly-report");
   * await lease.run(async (signal) => writeReport({ fence: lease.fence, signal }));
   * ```
   */
  async run<T>(work: (signal: AbortSignal) => Promise<T> | T): Promise<T> {
    return runThenRelease(this, work);
  }

  /**
   * Sets the remaining TTL to `ttlMs` (default: the lease's TTL). A lease
   * already lost or released is never extended: that throws at once. A lease
   * under a session is renewed by the session's keepalives only, and throws
   * `TypeError` here.
   */
  async extend(ttlMs: number = this.ttlMs): Promise<void> {
    if (this.#underSession) {
      throw new TypeError("a lease under a session is kept by the session's keepalives, not extended on its own");
    }
    await this.#extend(ttlMs, undefined);
  }

  /**
   * Gives the lock back, after stopping the renewer and waiting for an extend
   * in flight (so no extend follows the release), and aborts `signal`.
   *
   * Throws {@link LeaseLost} when the lease was lost while held: another holder
   * may have run, so treat the work as possibly duplicated. Throws
   * {@link BrokerUnavailable} when the broker could not be told; the lease then
   * expires on its own, and no one else held the lock meanwhile. Calling it
   * again settles as the first call did. {@link Lease.releaseAcknowledged} then
   * says whether Redis replicas acknowledged the release.
   */
  release(): Promise<void> {
    this.#release ??= this.#releaseOnce();
    return this.#release;
  }

  /**
   * @internal The release of {@link Client.releaseAll}: this lease's own, with
   * `send` (its share of one request for several leases) in place of its own
   * request; a release already started settles as it does.
   */
  _releaseBy(send: () => Promise<ReleaseAnswer>): Promise<void> {
    this.#release ??= this.#releaseOnce(send);
    return this.#release;
  }

  /** @internal Whether a release was started (it then settles as it does). */
  get _releasing(): boolean {
    return this.#release !== undefined;
  }

  /** @internal Stops the renewer and waits for an extend in flight, so no extend follows a release. */
  async _stopRenewing(): Promise<void> {
    this.#stopped = true;
    this.#wake?.();
    await this.#renewing;
  }

  /**
   * @internal Whether the broker has nothing left to release: it said the
   * lease is gone, or the session it was held under ended.
   */
  get _gone(): boolean {
    return this.#lost?.reason === "lease_lost" || this.#lost?.reason === "session_lost";
  }

  /**
   * @internal Holds the lease under a session: it is never extended on its
   * own. With the session's helper, its deadline is the session's from now on.
   */
  _underSession(session: SessionHold | undefined): void {
    this.#underSession = true;
    this.#session = session;
  }

  /** @internal A keepalive of the lease's session renewed it: its new local deadline and broker expiry. */
  _renewedWith(deadline: number, expiresAtMs: number): void {
    if (this.#lost || this.#released) return;
    this.#deadline = deadline;
    this.#expiresAtMs = expiresAtMs;
  }

  /** @internal The lease's session (or the broker, at a keepalive of the session) ended it. */
  _loseWith(error: LeaseLost): void {
    this.#markLost(error);
  }

  /** @internal The session the lease was held under was closed, which released it. */
  _releasedWithSession(): void {
    if (this.#lost || this.#released) return;
    this.#released = true;
    this.#release ??= Promise.resolve();
    this.#end(new LockBrokerError("the lease was released with its session", { code: "released" }));
  }

  /** @internal Where extends and releases of this lease go. */
  get _kind(): Kind {
    return this.#kind;
  }

  async #releaseOnce(
    send: () => Promise<ReleaseAnswer> = () => this.#client._release(this.name, this.#token, this.#kind),
  ): Promise<void> {
    await this._stopRenewing();
    try {
      if (this._gone) throw this.#lost; // nothing left to release
      let answer: ReleaseAnswer;
      try {
        answer = await send();
      } catch (error) {
        if (error instanceof LeaseLost) {
          if (this.#released) return; // its session's close released it meanwhile
          this.#markLost(error);
          throw this.#lost?.reason === "session_lost" ? this.#lost : error;
        }
        throw this.#lost ?? error;
      }
      // The broker still had the lease: even one this client had given up on by
      // its (conservative) clock was never held by anyone else.
      if (typeof answer.acknowledged === "boolean") this.#releaseAcknowledged = answer.acknowledged;
      this.#released = true;
    } finally {
      this.#end(new LockBrokerError("the lease was released", { code: "released" }));
    }
  }

  /**
   * Asks the broker whether this lease's fence is still current (a permit's on
   * its semaphore). A read: it neither renews the lease nor aborts
   * {@link signal}, which only the lease's own calls and its deadline decide.
   */
  checkFence(): Promise<FenceCheck> {
    return this.#client._checkFence(this.#kind, this.name, this.fence);
  }

  /** The lease without its token. */
  toJSON(): Record<string, unknown> {
    const state = this.#lost ? "lost" : this.#released ? "released" : "held";
    return { name: this.name, fence: this.fence, owner: this.owner, state, remainingMs: this.remainingMs() };
  }

  toString(): string {
    const s = this.toJSON();
    return `Lease(${JSON.stringify(this.name)}, fence ${this.fence}, ${String(s["state"])}, ${this.remainingMs()} ms left)`;
  }

  /** @internal After a grant that waited: an extend sent now restarts the local deadline. */
  async _resync(): Promise<void> {
    try {
      await this.#extend(this.ttlMs, undefined);
    } catch (error) {
      // Unreachable, or max hold: the deadline from the acquire stays, and it is conservative.
      if (!(error instanceof BrokerUnavailable || error instanceof MaxHoldExceeded)) throw error;
    }
  }

  /** @internal Starts the timer that marks the lease expired at its deadline. */
  _arm(): void {
    this.#armed = true;
    this.#schedule();
  }

  /** @internal Starts the renewer (for `client.lock()`). */
  _startRenewing(maxHoldMs: number): void {
    this.#renewing = this.#renew(maxHoldMs).catch((error: unknown) => {
      // A bug in the renewer must not leave the work believing it holds the lock.
      this.#markLost(this.#expired(`renewer failed: ${String(error)}`));
    });
  }

  async #extend(ttlMs: number, timeoutMs: number | undefined): Promise<number> {
    if (this.#lost) throw this.#lost;
    if (this.#released) throw new LockBrokerError("the lease was already released", { code: "released" });
    const sent = now();
    let answer: LeaseAnswer;
    try {
      answer = await this.#client._extend(this.name, this.#token, ttlMs, timeoutMs, this.#kind);
    } catch (error) {
      if (error instanceof LeaseLost) this.#markLost(error);
      throw error;
    }
    if (this.#lost) throw this.#lost; // lost while the extend was in flight
    this.#deadline = sent + answer.ttl_ms;
    this.#expiresAtMs = answer.expires_at_ms;
    this.#lastSent = sent;
    this.#schedule();
    return sent;
  }

  /** (Re)sets the deadline timer. */
  #schedule(): void {
    if (!this.#armed || this.#lost || this.#released) return;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = unref(
      setTimeout(() => {
        if (!this.#lost && !this.#released && now() >= this.#deadline) this.#markLost(this.#expired());
        else this.#schedule();
      }, Math.max(0, this.#deadline - now())),
    );
  }

  #expired(why = "expired"): LeaseLost {
    return new LeaseLost(
      `the lease on ${JSON.stringify(this.name)} (fence ${this.fence}) is lost (${why}); another holder ` +
        "may already be running, so stop and treat the work as possibly duplicated",
      { code: "lease_lost", details: { reason: "expired" } },
    );
  }

  #markLost(error: LeaseLost): void {
    if (this.#lost || this.#released) return;
    this.#lost = error;
    this.#end(error);
  }

  #end(reason: unknown): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#wake?.();
    if (!this.#controller.signal.aborted) this.#controller.abort(reason);
  }

  /**
   * The renewer: extends every `ttlMs / 3`, never asking for validity past the
   * grant plus `maxHoldMs`, so a hung worker loses the lock instead of keeping
   * it. It retries an unreachable broker briefly, never past the deadline (the
   * deadline timer then marks the lease lost); it ends at once when the broker
   * says the lease is gone, and stops asking after any other refusal, letting
   * the lease run out.
   */
  async #renew(maxHoldMs: number): Promise<void> {
    const holdDeadline = this.#grantedAt + maxHoldMs;
    const interval = this.ttlMs / 3;
    let next = this.#lastSent + interval;
    for (;;) {
      if (!(await this.#sleepUntil(next))) return;
      const room = holdDeadline - now();
      if (room < 1) return; // max hold: let the lease run out
      const ttlMs = Math.min(this.ttlMs, room);
      const timeoutMs = Math.max(50, Math.min(this.#client.timeoutMs, this.remainingMs()));
      try {
        next = (await this.#extend(ttlMs, timeoutMs)) + interval;
      } catch (error) {
        if (this.#lost || this.#released) return;
        if (!(error instanceof BrokerUnavailable)) return; // max_hold_exceeded, or a refusal that stays
        next = now() + Math.min(RETRY_PAUSE_MS, interval / 2, this.remainingMs());
      }
    }
  }

  /**
   * @internal The release `await using` runs. A dispose that throws while the
   * block's body is throwing wraps both in a `SuppressedError`, hiding the
   * body's error from `instanceof`. So it throws only what the body cannot
   * have seen: a loss it was not already told of by {@link throwIfLost}. A
   * broker it could not reach is not worth throwing over: the lease then
   * expires on its own, and no one else held the lock meanwhile.
   */
  async _dispose(): Promise<void> {
    try {
      await this.release();
    } catch (error) {
      if (error instanceof LeaseLost && !this.#lossThrown) throw error;
    }
  }

  /** Resolves true at `at`, or false as soon as the lease is released or lost. */
  #sleepUntil(at: number): Promise<boolean> {
    if (this.#stopped || this.#lost || this.#released) return Promise.resolve(false);
    return new Promise((resolve) => {
      const timer = unref(
        setTimeout(() => {
          this.#wake = undefined;
          resolve(true);
        }, Math.max(0, at - now())),
      );
      this.#wake = () => {
        clearTimeout(timer);
        this.#wake = undefined;
        resolve(false);
      };
    });
  }
}

// `await using lease = await client.lock(...)` where the runtime knows Symbol.asyncDispose.
declare global {
  interface SymbolConstructor {
    readonly asyncDispose: unique symbol;
  }
}
/**
 * @internal Runs `work` with the holder's signal, then releases: after an
 * error of the work too, which is the one rethrown (a lease, a set of leases).
 */
export async function runThenRelease<T>(
  holder: { readonly signal: AbortSignal; release(): Promise<unknown> },
  work: (signal: AbortSignal) => Promise<T> | T,
): Promise<T> {
  let result: T;
  try {
    result = await work(holder.signal);
  } catch (error) {
    await holder.release().catch(() => undefined); // the work's error is the one to see
    throw error;
  }
  await holder.release();
  return result;
}

/**
 * @internal Gives `prototype` a `Symbol.asyncDispose` that calls its
 * `_dispose()`, where the runtime has the symbol (a lease, a set of leases).
 */
export function makeAsyncDisposable(prototype: { _dispose(): Promise<void> }): void {
  if (typeof Symbol.asyncDispose !== "symbol") return;
  Object.defineProperty(prototype, Symbol.asyncDispose, {
    value(this: { _dispose(): Promise<void> }): Promise<void> {
      return this._dispose();
    },
    writable: true,
    configurable: true,
  });
}
makeAsyncDisposable(Lease.prototype);
export interface Lease {
  /**
   * Releases the lease (see {@link Lease.release}); present where the runtime
   * has `Symbol.asyncDispose`. Throws only a loss the body was not already
   * given by `throwIfLost()`; never an unreachable broker.
   */
  [Symbol.asyncDispose](): Promise<void>;
}

/** Timers of the renewer do not keep a Node process alive (like a daemon thread). */
function unref<T>(timer: T): T {
  (timer as { unref?: () => void }).unref?.();
  return timer;
}
