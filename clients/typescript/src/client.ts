/**
 * The client: one broker's URL and key, the single calls of the HTTP API, and
 * `lock()`, which returns a lease renewed in the background (`lockAll()`, a
 * set of them).
 *
 * Only `fetch` does the HTTP, so it runs on Node 20+ and in browsers alike.
 */

import { BrokerUnavailable, LockBrokerError, LockBusy, errorFromResponse } from "./errors.js";
import { now } from "./clock.js";
import { Lease, type LeaseAnswer, type ReleaseAnswer } from "./lease.js";
import { Leader, type LeaderOptions } from "./leader.js";
import {
  Session,
  holdUnder,
  openedFromJson,
  renewalFromJson,
  sessionAsk,
  sessionPath,
  sessionRefused,
  sessionStatusFromJson,
  type OpenedSession,
  type SessionOptions,
  type SessionRenewal,
  type SessionStatus,
} from "./session.js";
import {
  acquireAll,
  lockAll,
  releaseAll,
  type AcquireAllOptions,
  type LeaseSet,
  type LockAllOptions,
  type LockAsk,
  type ReleaseResult,
} from "./multi.js";
import {
  fenceCheckFromJson,
  lockStatusFromJson,
  semaphoreStatusFromJson,
  type FenceCheck,
  type LockStatus,
  type SemaphoreStatus,
} from "./status.js";
import {
  type Kind,
  defaultOwner,
  describe,
  duration,
  fencePath,
  isReset,
  newRequestId,
  nodeProcess,
  permitLimit,
  resourcePath,
  sleep,
  wireMillis,
} from "./util.js";
import { Watch, eventsPath, prefixEventsPath, type WatchOptions } from "./watch.js";

/** The broker a client from the environment talks to when `LOCKBROKER_URL` is unset. */
export const DEFAULT_URL = "http://127.0.0.1:7700";
/** TTL of a lease when none is given: finite, like everything here. */
export const DEFAULT_TTL_MS = 30_000;
/** How long `lock()` keeps renewing a lease at most, unless told otherwise. */
export const DEFAULT_MAX_HOLD_MS = 3_600_000;
/** Milliseconds one HTTP exchange may take (plus the wait, for a waiting acquire). */
export const DEFAULT_TIMEOUT_MS = 10_000;
/** This client's version, sent in the User-Agent header where allowed. */
export const VERSION = "0.1.0";

/** @internal A grant that took longer than this share of the TTL is followed by an extend. */
export const RESYNC_SHARE = 0.1;

/** Optional settings of a {@link Client}. */
export interface ClientOptions {
  /** Sent as `Authorization: Bearer <key>` when set. */
  apiKey?: string | undefined;
  /** Bounds every HTTP exchange; a waiting acquire gets its wait on top. */
  timeoutMs?: number;
  /** The `fetch` to use (one with a custom dispatcher or CA, say); the global one by default. */
  fetch?: typeof fetch;
}

/** The optional arguments of {@link Client.acquire}. */
export interface AcquireOptions {
  /** How long the lease is valid; {@link DEFAULT_TTL_MS} by default. */
  ttlMs?: number;
  /** How long to wait for a busy lock; 0 (the default) throws {@link LockBusy} at once. */
  waitMs?: number;
  /** Labels the holder in `lock_busy` answers and `status()`; `host:pid` on Node by default. */
  owner?: string;
  /**
   * Makes retries safe: an acquire re-sent with the same `requestId` (and
   * `owner`) while its lease is held gets that same lease. A fresh random one,
   * used for every retry of this call, by default.
   */
  requestId?: string;
  /** Keeps the lock unavailable that long after this lease expires unreleased; the broker's default when absent. */
  lockDelayMs?: number;
  /** Queue the wait in Redis, so waiters are granted in arrival order across brokers. */
  fair?: boolean;
  /** Aborts the acquire (and its wait). */
  signal?: AbortSignal;
  /**
   * Ask for a shared lease: other shared leases may hold the lock at the same
   * time, an exclusive one excludes them all. Not for semaphores.
   */
  shared?: boolean;
  /**
   * Takes the lease under a session: a {@link Session} (which then keeps the
   * lease, as {@link Session.acquire} does) or a session's token. The lease
   * takes its TTL and lock-delay from the session (leave out `ttlMs` and
   * `lockDelayMs`), is never extended on its own, and ends with the session.
   * A lease under a bare token knows only the validity its grant answered.
   */
  session?: string | Session;
}

/** The optional arguments of {@link Client.acquirePermit}: {@link AcquireOptions} without `shared`. */
export type PermitOptions = Omit<AcquireOptions, "shared">;

/** The optional arguments of {@link Client.lock}. */
export interface LockOptions extends Omit<AcquireOptions, "requestId" | "session"> {
  /** How long the lease is renewed at most, from the grant; {@link DEFAULT_MAX_HOLD_MS} by default. At least `ttlMs`. */
  maxHoldMs?: number;
}

/** The optional arguments of {@link Client.semaphore}. */
export type SemaphoreOptions = Omit<LockOptions, "shared">;

/** The broker's answer to an extend: same fence, new expiry. */
export interface Renewal {
  name: string;
  fence: number;
  ttlMs: number;
  /** The expiry in Unix milliseconds of the broker's clock. */
  expiresAtMs: number;
  owner: string | null;
}

/** A connection to one broker. */
export class Client {
  readonly url: string;
  readonly timeoutMs: number;
  readonly #apiKey: string | undefined;
  readonly #fetch: typeof fetch;

  /**
   * `url` is the broker's base URL (`http://127.0.0.1:7700`, or
   * `https://host/prefix` behind a reverse proxy).
   */
  constructor(url: string, options: ClientOptions = {}) {
    if (!/^https?:\/\/[^/]/.test(url)) {
      throw new TypeError(`the broker URL must start with http:// or https://, not ${JSON.stringify(url)}`);
    }
    this.url = url.replace(/\/+$/, "");
    this.timeoutMs = duration(options.timeoutMs ?? DEFAULT_TIMEOUT_MS, "timeoutMs", false);
    this.#apiKey = options.apiKey || undefined;
    const impl = options.fetch ?? globalThis.fetch;
    if (typeof impl !== "function") throw new TypeError("no fetch: pass options.fetch, or use Node 20+");
    this.#fetch = impl;
  }

  /**
   * A client for `LOCKBROKER_URL` (default {@link DEFAULT_URL}) with the key in
   * `LOCKBROKER_API_KEY`, if set (on Node; elsewhere the defaults).
   */
  static fromEnv(options: ClientOptions = {}): Client {
    const env = nodeProcess()?.env ?? {};
    return new Client(env["LOCKBROKER_URL"] || DEFAULT_URL, { apiKey: env["LOCKBROKER_API_KEY"], ...options });
  }

  /**
   * Takes the lock, waiting up to `waitMs` for it. Nothing renews the lease:
   * call {@link Lease.extend} in time, or use {@link lock}.
   *
   * Throws {@link LockBusy} when the lock is still held after the wait, and
   * {@link BrokerUnavailable} when the broker could not be reached or could not
   * serve before the wait was over (retried until then with the same
   * `request_id`, so a retry never takes a second lease).
   */
  async acquire(name: string, options: AcquireOptions = {}): Promise<Lease> {
    return this.#acquire("locks", name, options, undefined, undefined);
  }

  /**
   * Takes one of the `limit` permits of the semaphore `name`, waiting up to
   * `waitMs` for one; otherwise as {@link acquire}. Throws {@link LockBusy}
   * (with `holders` and `limit`) when every permit is still taken after the
   * wait, and {@link LimitConflict} when the permits are held under another limit.
   */
  async acquirePermit(name: string, limit: number, options: PermitOptions = {}): Promise<Lease> {
    return this.#acquire("semaphores", name, options, undefined, permitLimit(limit));
  }

  /**
   * Takes the lock and keeps it until {@link Lease.release}: the lease is
   * extended every `ttlMs / 3`, never past `maxHoldMs` from the grant.
   * `lease.signal` aborts the moment the broker says the lease is gone or the
   * lease runs out without a renewal; it is never renewed again then.
   *
   * ```ts
   * const lease = await client.lock("nightly-report", { ttlMs: 30_000, waitMs: 10_000 });
   * await lease.run((signal) => writeReport({ fence: lease.fence, signal }));
   * ```
   */
  async lock(name: string, options: LockOptions = {}): Promise<Lease> {
    const ttlMs = duration(options.ttlMs ?? DEFAULT_TTL_MS, "ttlMs", false);
    const maxHoldMs = duration(options.maxHoldMs ?? DEFAULT_MAX_HOLD_MS, "maxHoldMs", false);
    if (maxHoldMs < ttlMs) throw new RangeError(`maxHoldMs (${maxHoldMs}) must be at least ttlMs (${ttlMs})`);
    return this.#acquire("locks", name, options, maxHoldMs, undefined);
  }

  /**
   * Takes one of the `limit` permits of the semaphore `name` and keeps it as
   * {@link lock} keeps a lease: renewed every `ttlMs / 3` up to `maxHoldMs`,
   * `signal` aborted on loss. Every holder must ask with the same `limit`.
   */
  async semaphore(name: string, limit: number, options: SemaphoreOptions = {}): Promise<Lease> {
    const ttlMs = duration(options.ttlMs ?? DEFAULT_TTL_MS, "ttlMs", false);
    const maxHoldMs = duration(options.maxHoldMs ?? DEFAULT_MAX_HOLD_MS, "maxHoldMs", false);
    if (maxHoldMs < ttlMs) throw new RangeError(`maxHoldMs (${maxHoldMs}) must be at least ttlMs (${ttlMs})`);
    return this.#acquire("semaphores", name, options, maxHoldMs, permitLimit(limit));
  }

  /**
   * Takes a lease on every lock of `locks` (names, or {@link LockAsk} for a
   * shared lease), or on none, in one request. The leases come back in the
   * order asked, each an ordinary {@link Lease} with its own token and fence,
   * extended and released on its own or with {@link releaseAll}; nothing
   * renews them.
   *
   * `options` apply to every lease as to {@link acquire}, with its retry rule:
   * a busy answer is asked again with the same `requestId` until `waitMs` is
   * over, and the broker holds none of the locks while it waits.
   * {@link LockBusy} names the busy lock in `lock`. A name given twice throws
   * `RangeError` without asking; no locks are no leases. An answer naming
   * other locks than asked for throws `LockBrokerError` (code
   * `bad_response`) after giving back the leases it granted. Nothing renews
   * the leases: see {@link lockAll}.
   */
  async acquireAll(locks: ReadonlyArray<string | LockAsk>, options: AcquireAllOptions = {}): Promise<Lease[]> {
    return acquireAll(this, locks, options);
  }

  /**
   * Takes every lock of `locks`, or none, as {@link acquireAll} does, and
   * keeps them as {@link lock} keeps one: each lease is extended every
   * `ttlMs / 3`, never past `maxHoldMs` from the grant. The set's `signal`
   * aborts the moment any lease is lost (its reason the {@link LeaseLost},
   * naming the lock); `run(work)`, `release()` or `await using` gives every
   * lease back with one release-all.
   *
   * ```ts
   * const leases = await client.lockAll(["account:17", "account:42"], { ttlMs: 30_000, waitMs: 10_000 });
   * await leases.run(async (signal) => {
   *   const [debit, credit] = leases;
   *   await transfer({ from: debit!.fence, to: credit!.fence, signal });
   * });
   * ```
   */
  async lockAll(locks: ReadonlyArray<string | LockAsk>, options: LockAllOptions = {}): Promise<LeaseSet> {
    return lockAll(this, locks, options);
  }

  /**
   * Gives back every lease of `leases` in one request, and resolves to what
   * became of each, in the order given, as its own {@link Lease.release}
   * would have it: released with its fence, or the error that release would
   * throw ({@link LeaseLost} for a lease the broker no longer had). Each lease
   * ends as after its own release (renewing stops, `signal` aborts, and it
   * reads released or lost), and a later `release()` settles the same way. A
   * lease whose release already started, or that the broker already called
   * lost, is not asked about again. Throws when the request as a whole failed
   * (no answer, or a refusal), and `TypeError` for a semaphore permit among
   * the leases, before anything is sent.
   */
  async releaseAll(leases: ReadonlyArray<Lease>): Promise<ReleaseResult[]> {
    return releaseAll(this, leases);
  }

  /** Sets the remaining TTL of the lease `token` holds to `ttlMs` (replace, not add). */
  async extend(name: string, token: string, ttlMs: number): Promise<Renewal> {
    return renewal(await this._extend(name, token, duration(ttlMs, "ttlMs", false)));
  }

  /** Gives the lock back at once; resolves to the lease's fence. Throws {@link LeaseLost} if `token` no longer holds it. */
  async release(name: string, token: string): Promise<number> {
    const answer = await this._release(name, token);
    return answer.fence;
  }

  /**
   * Sets the remaining TTL of the semaphore permit `token` holds to `ttlMs`. A
   * lock's token is refused here ({@link InvalidRequest}, field `token`).
   */
  async extendPermit(name: string, token: string, ttlMs: number): Promise<Renewal> {
    return renewal(await this._extend(name, token, duration(ttlMs, "ttlMs", false), undefined, "semaphores"));
  }

  /** Gives the semaphore permit `token` holds back at once; resolves to its fence. */
  async releasePermit(name: string, token: string): Promise<number> {
    const answer = await this._release(name, token, "semaphores");
    return answer.fence;
  }

  /** The lock's current state (mode, holders, last fence, expiry). */
  async status(name: string): Promise<LockStatus> {
    return lockStatusFromJson(await this._call<Record<string, unknown>>("GET", resourcePath("locks", name), undefined));
  }

  /** The semaphore's current state (limit, permits held and free, holders). */
  async semaphoreStatus(name: string): Promise<SemaphoreStatus> {
    const path = resourcePath("semaphores", name);
    return semaphoreStatusFromJson(await this._call<Record<string, unknown>>("GET", path, undefined));
  }

  /**
   * Whether a valid lease of the lock `name` carries exactly `fence` now, for a
   * resource that cannot store fences. The answer can be stale by the time the
   * resource acts: act at once, and within `expiresInMs`. Throws
   * {@link InvalidRequest} (`field` `"name"` or `"fence"`) for a bad name or a
   * fence outside 1 to 2^53 - 1, and `TypeError` for a fence that is not a
   * whole number, before anything is sent. A read: it renews nothing.
   */
  async checkFence(name: string, fence: number): Promise<FenceCheck> {
    return this._checkFence("locks", name, fence);
  }

  /** Whether a valid permit of the semaphore `name` carries exactly `fence` now; see {@link checkFence}. */
  async checkSemaphoreFence(name: string, fence: number): Promise<FenceCheck> {
    return this._checkFence("semaphores", name, fence);
  }

  /** @internal A fence check on a lock's or a semaphore's routes, as the lease sends it too. */
  async _checkFence(kind: Kind, name: string, fence: number): Promise<FenceCheck> {
    const check = fenceCheckFromJson(await this._call<Record<string, unknown>>("GET", fencePath(kind, name, fence), undefined));
    if (!check) {
      throw new LockBrokerError("the broker's fence check answer lacks a required field", {
        code: "bad_response",
        status: 200,
      });
    }
    return check;
  }

  /**
   * The events of the lock `name` (`GET /v1/locks/{name}/events`), as an async
   * iterator: a `state` first, then one change per event. A cut stream is
   * opened again with `Last-Event-ID`, so nothing is missed or repeated.
   */
  watch(name: string, options: WatchOptions = {}): Watch {
    return new Watch(this, eventsPath("locks", name), options);
  }

  /** The events of the semaphore `name` (`GET /v1/semaphores/{name}/events`), as {@link watch} gives them. */
  watchSemaphore(name: string, options: WatchOptions = {}): Watch {
    return new Watch(this, eventsPath("semaphores", name), options);
  }

  /** The events of every lock whose name starts with `prefix` (`GET /v1/events?prefix=`). */
  watchPrefix(prefix: string, options: WatchOptions = {}): Watch {
    return new Watch(this, prefixEventsPath(prefix), options);
  }

  /**
   * Opens a session and keeps it alive in the background: one keepalive every
   * `ttlMs / 3` renews the session and every lease taken under it
   * ({@link Session.acquire}, {@link Session.acquirePermit},
   * {@link Session.acquireAll}), which are never extended on their own. When
   * the session is lost, `session.signal` and every lease's `signal` abort
   * with a {@link SessionLost}; {@link Session.close} (or `run`, or
   * `await using`) releases every lease at once.
   *
   * ```ts
   * await using session = await client.session({ ttlMs: 10_000, owner: "batch-7" });
   * const lease = await session.acquire("ledger:a", { waitMs: 5000 });
   * await post({ fence: lease.fence, signal: lease.signal });
   * ```
   */
  async session(options: SessionOptions = {}): Promise<Session> {
    const sent = now();
    return new Session(this, await this.openSession(options), sent);
  }

  /**
   * Opens a session (`POST /v1/sessions`) that nothing keeps alive: send
   * {@link keepSession} in time, or use {@link session}. The answer is the
   * only one that carries the session's token.
   */
  async openSession(options: SessionOptions = {}): Promise<OpenedSession> {
    const ttlMs = duration(options.ttlMs ?? DEFAULT_TTL_MS, "ttlMs", false);
    const body: Record<string, unknown> = { ttl_ms: wireMillis(ttlMs), owner: options.owner ?? (await defaultOwner()) };
    if (options.lockDelayMs !== undefined) body["lock_delay_ms"] = Math.floor(duration(options.lockDelayMs, "lockDelayMs", true));
    return openedFromJson(await this._call<Record<string, unknown>>("POST", "/v1/sessions", body));
  }

  /**
   * Renews the session `id` and every lease under it to its TTL from now, in
   * one request. Throws {@link SessionLost} when `token` does not hold an open
   * session (it expired, was closed, or the token is another session's).
   */
  async keepSession(id: string, token: string): Promise<SessionRenewal> {
    return this._keepSession(id, token, undefined);
  }

  /**
   * Closes the session `id`, which releases every lease under it; resolves to
   * how many leases it released. Throws {@link SessionLost} when `token` does
   * not hold an open session.
   */
  async closeSession(id: string, token: string): Promise<number> {
    const answer = await this._call<Record<string, unknown>>("POST", sessionPath(id, "close"), { token });
    return (answer["leases_released"] as number | undefined) ?? 0;
  }

  /** The session's state (open, owner, leases, time left); never its token. */
  async sessionStatus(id: string): Promise<SessionStatus> {
    return sessionStatusFromJson(await this._call<Record<string, unknown>>("GET", sessionPath(id), undefined));
  }

  /** @internal A keepalive, as the session helper sends it (with a timeout within the session's deadline). */
  async _keepSession(id: string, token: string, timeoutMs: number | undefined): Promise<SessionRenewal> {
    return renewalFromJson(
      await this._call<Record<string, unknown>>("POST", sessionPath(id, "keepalive"), { token }, { timeoutMs }),
    );
  }

  /**
   * A leader election on the lock `name`: {@link Leader.start} campaigns until
   * granted, then renews the lease as {@link lock} does; `term` is its fence.
   */
  leader(name: string, options: LeaderOptions = {}): Leader {
    return new Leader(this, name, options);
  }

  async #acquire(
    kind: Kind,
    name: string,
    options: AcquireOptions,
    maxHoldMs: number | undefined,
    limit: number | undefined,
  ): Promise<Lease> {
    if (maxHoldMs !== undefined && options.session !== undefined) {
      throw new TypeError("a renewed lease is not taken under a session: use acquire(name, { session }) or session.acquire(name)");
    }
    const session = sessionAsk(options);
    const ttlMs = duration(options.ttlMs ?? DEFAULT_TTL_MS, "ttlMs", false);
    const waitMs = duration(options.waitMs ?? 0, "waitMs", true);
    const lockDelayMs = options.lockDelayMs === undefined ? undefined : duration(options.lockDelayMs, "lockDelayMs", true);
    const owner = options.owner ?? session?.helper?.owner ?? (await defaultOwner());
    const requestId = options.requestId || newRequestId();
    const path = resourcePath(kind, name, "acquire");
    const giveUpAt = now() + waitMs;
    for (;;) {
      const left = Math.max(0, giveUpAt - now());
      const body: Record<string, unknown> = {
        wait_ms: Math.floor(left),
        owner,
        request_id: requestId,
      };
      // Under a session, the lease's TTL and lock-delay are the session's.
      if (session) body["session"] = session.token;
      else body["ttl_ms"] = wireMillis(ttlMs);
      if (lockDelayMs !== undefined) body["lock_delay_ms"] = Math.floor(lockDelayMs);
      if (options.fair) body["fair"] = true; // sent only when set
      if (options.shared) body["mode"] = "shared"; // likewise
      if (limit !== undefined) body["limit"] = limit;
      const sent = now();
      let answer: LeaseAnswer;
      try {
        answer = await this._call<LeaseAnswer>("POST", path, body, { extraMs: left, signal: options.signal });
      } catch (error) {
        sessionRefused(session, error);
        const pause = pauseAfter(error, sent, giveUpAt);
        if (pause === undefined) throw error;
        await sleep(pause, options.signal);
        continue;
      }
      if (session) {
        const lease = new Lease(this, kind, answer, sent, session.helper?.ttlMs ?? answer.ttl_ms);
        holdUnder(lease, session);
        return lease;
      }
      const lease = new Lease(this, kind, answer, sent, ttlMs);
      // A grant that waited: its deadline counted from this send time may be
      // near or past, so bound it by an extend sent now instead.
      if (now() - sent > ttlMs * RESYNC_SHARE) await lease._resync();
      lease._arm();
      if (maxHoldMs !== undefined) lease._startRenewing(maxHoldMs);
      return lease;
    }
  }

  /** @internal A release, with the whole answer (the lease reads `acknowledged`). */
  async _release(name: string, token: string, kind: Kind = "locks"): Promise<ReleaseAnswer> {
    return this._call<ReleaseAnswer>("POST", resourcePath(kind, name, "release"), { token });
  }

  /** @internal An extend, as the lease and its renewer send it. */
  async _extend(name: string, token: string, ttlMs: number, timeoutMs?: number, kind: Kind = "locks"): Promise<LeaseAnswer> {
    return this._call<LeaseAnswer>(
      "POST",
      resourcePath(kind, name, "extend"),
      { token, ttl_ms: wireMillis(ttlMs) },
      { timeoutMs },
    );
  }

  /**
   * @internal One exchange: the decoded JSON of a 2xx answer, or the matching
   * error. A connection the broker closed under a pooled request is retried
   * once: every call here is safe to repeat (acquires carry a request_id).
   */
  async _call<T>(
    method: string,
    path: string,
    body: unknown,
    options: { extraMs?: number; timeoutMs?: number | undefined; signal?: AbortSignal | undefined } = {},
  ): Promise<T> {
    const timeoutMs = (options.timeoutMs ?? this.timeoutMs) + (options.extraMs ?? 0);
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#exchange<T>(method, path, body, timeoutMs, options.signal);
      } catch (error) {
        if (attempt === 1 && isReset(error)) continue;
        throw error;
      }
    }
  }

  /**
   * @internal Opens an event stream: the 2xx answer whose body the caller
   * reads, or the matching error (answered before any stream opens). Only the
   * connecting is bounded by the client's timeout; `signal` ends the stream.
   */
  async _openStream(path: string, headers: Record<string, string>, signal: AbortSignal): Promise<Response> {
    const all: Record<string, string> = { ...headers };
    if (this.#apiKey) all["authorization"] = `Bearer ${this.#apiKey}`;
    const connecting = new AbortController();
    const timer = setTimeout(() => connecting.abort(new TimeoutMarker()), this.timeoutMs);
    const onAbort = (): void => connecting.abort(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      let response: Response;
      try {
        response = await this.#fetch(this.url + path, { method: "GET", headers: all, signal: connecting.signal });
      } catch (error) {
        throw this.#transportError(error, connecting.signal, signal);
      }
      if (!response.ok) {
        let data: unknown;
        try {
          data = JSON.parse(await response.text());
        } catch {
          // typed by its status
        }
        throw errorFromResponse(response.status, data, response.headers.get("retry-after"));
      }
      return response;
    } finally {
      clearTimeout(timer);
      // The body outlives the connect timeout: only the caller's signal ends it now.
      if (signal.aborted) connecting.abort(signal.reason);
      else signal.addEventListener("abort", () => connecting.abort(signal.reason), { once: true });
      signal.removeEventListener("abort", onAbort);
    }
  }

  async #exchange<T>(
    method: string,
    path: string,
    body: unknown,
    timeoutMs: number,
    signal: AbortSignal | undefined,
  ): Promise<T> {
    signal?.throwIfAborted();
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new TimeoutMarker()), timeoutMs);
    const onAbort = (): void => controller.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    const headers: Record<string, string> = { accept: "application/json" };
    if (body !== undefined) headers["content-type"] = "application/json";
    if (this.#apiKey) headers["authorization"] = `Bearer ${this.#apiKey}`;
    try {
      let response: Response;
      try {
        response = await this.#fetch(this.url + path, {
          method,
          headers,
          body: body === undefined ? null : JSON.stringify(body),
          signal: controller.signal,
        });
      } catch (error) {
        throw this.#transportError(error, controller.signal, signal);
      }
      let text: string;
      try {
        text = await response.text();
      } catch (error) {
        throw this.#transportError(error, controller.signal, signal);
      }
      let data: unknown = undefined;
      try {
        data = text ? JSON.parse(text) : undefined;
      } catch {
        // A proxy's HTML page: typed by its status below.
      }
      if (!response.ok) throw errorFromResponse(response.status, data, response.headers.get("retry-after"));
      if (data === null || typeof data !== "object") {
        throw new LockBrokerError("the broker answered with a body that is not a JSON object", {
          code: "bad_response",
          status: response.status,
        });
      }
      return data as T;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }

  #transportError(error: unknown, own: AbortSignal, caller: AbortSignal | undefined): unknown {
    if (caller?.aborted) return caller.reason; // the caller gave up: not the broker's doing
    const timedOut = own.reason instanceof TimeoutMarker;
    const reason = timedOut ? "timed out" : describe(error);
    return new BrokerUnavailable(`cannot reach the broker at ${this.url}: ${reason}`, {
      code: "transport",
      cause: error,
    });
  }
}

/** A {@link Renewal} from the JSON of an extend's answer. */
function renewal(answer: LeaseAnswer): Renewal {
  return {
    name: answer.name,
    fence: answer.fence,
    ttlMs: answer.ttl_ms,
    expiresAtMs: answer.expires_at_ms,
    owner: answer.owner ?? null,
  };
}

/** The abort reason of a request that outlived its timeout. */
class TimeoutMarker extends Error {}

/** @internal The pause before asking again after `error`, or undefined to give up. */
export function pauseAfter(error: unknown, sent: number, giveUpAt: number): number | undefined {
  const t = now();
  const left = giveUpAt - t;
  if (left <= 0) return undefined;
  if (error instanceof LockBusy) {
    // The broker caps one request's wait; a busy answer that came back at once
    // would make this a busy loop.
    return t - sent < 50 ? Math.min(50, left) : 0;
  }
  if (error instanceof BrokerUnavailable) return Math.min(left, error.retryAfterMs || 500, 1000);
  return undefined;
}
