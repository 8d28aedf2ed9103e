/**
 * The client: one broker's URL and key, the single calls of the HTTP API, and
 * `lock()`, which returns a lease renewed in the background.
 *
 * Only `fetch` does the HTTP, so it runs on Node 18+ and in browsers alike.
 */

import { BrokerUnavailable, LockBrokerError, LockBusy, errorFromResponse } from "./errors.js";
import { now } from "./clock.js";
import { Lease, type LeaseAnswer, type ReleaseAnswer } from "./lease.js";

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

/** A grant that took longer than this share of the TTL is followed by an extend. */
const RESYNC_SHARE = 0.1;

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
}

/** The optional arguments of {@link Client.lock}. */
export interface LockOptions extends Omit<AcquireOptions, "requestId"> {
  /** How long the lease is renewed at most, from the grant; {@link DEFAULT_MAX_HOLD_MS} by default. At least `ttlMs`. */
  maxHoldMs?: number;
}

/** A lock's state as `GET /v1/locks/{name}` reports it. Never a token. */
export interface LockStatus {
  name: string;
  held: boolean;
  /** The holder's label, while held. */
  owner: string | null;
  /** The last fence issued for this lock; null when none is remembered. */
  fence: number | null;
  /** How long the current lease stays valid (0 when not held). */
  expiresInMs: number;
  /** How long until the lock can be granted at the earliest (expiry plus lock-delay). */
  availableInMs: number;
}

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
    if (typeof impl !== "function") throw new TypeError("no fetch: pass options.fetch, or use Node 18+");
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
    return this.#acquire(name, options, undefined);
  }

  /**
   * Takes the lock and keeps it until {@link Lease.release}: the lease is
   * extended every `ttlMs / 3`, never past `maxHoldMs` from the grant.
   * `lease.signal` aborts the moment the broker says the lease is gone or the
   * lease runs out without a renewal; it is never renewed again then.
   *
   * ```ts
   * await using lease = await client.lock("nightly-report", { ttlMs: 30_000, waitMs: 10_000 });
   * await writeReport({ fence: lease.fence, signal: lease.signal });
   * ```
   */
  async lock(name: string, options: LockOptions = {}): Promise<Lease> {
    const ttlMs = duration(options.ttlMs ?? DEFAULT_TTL_MS, "ttlMs", false);
    const maxHoldMs = duration(options.maxHoldMs ?? DEFAULT_MAX_HOLD_MS, "maxHoldMs", false);
    if (maxHoldMs < ttlMs) throw new RangeError(`maxHoldMs (${maxHoldMs}) must be at least ttlMs (${ttlMs})`);
    return this.#acquire(name, options, maxHoldMs);
  }

  /** Sets the remaining TTL of the lease `token` holds to `ttlMs` (replace, not add). */
  async extend(name: string, token: string, ttlMs: number): Promise<Renewal> {
    const answer = await this._extend(name, token, duration(ttlMs, "ttlMs", false));
    return {
      name: answer.name,
      fence: answer.fence,
      ttlMs: answer.ttl_ms,
      expiresAtMs: answer.expires_at_ms,
      owner: answer.owner ?? null,
    };
  }

  /** Gives the lock back at once; resolves to the lease's fence. Throws {@link LeaseLost} if `token` no longer holds it. */
  async release(name: string, token: string): Promise<number> {
    const answer = await this._release(name, token);
    return answer.fence;
  }

  /** The lock's current state (holder, last fence, expiry). */
  async status(name: string): Promise<LockStatus> {
    const a = await this._call<Record<string, unknown>>("GET", lockPath(name), undefined);
    return {
      name: a["name"] as string,
      held: Boolean(a["held"]),
      owner: (a["owner"] as string | null) ?? null,
      fence: (a["fence"] as number | null) ?? null,
      expiresInMs: (a["expires_in_ms"] as number) ?? 0,
      availableInMs: (a["available_in_ms"] as number) ?? 0,
    };
  }

  async #acquire(name: string, options: AcquireOptions, maxHoldMs: number | undefined): Promise<Lease> {
    const ttlMs = duration(options.ttlMs ?? DEFAULT_TTL_MS, "ttlMs", false);
    const waitMs = duration(options.waitMs ?? 0, "waitMs", true);
    const lockDelayMs = options.lockDelayMs === undefined ? undefined : duration(options.lockDelayMs, "lockDelayMs", true);
    const owner = options.owner ?? (await defaultOwner());
    const requestId = options.requestId || newRequestId();
    const path = lockPath(name, "acquire");
    const giveUpAt = now() + waitMs;
    for (;;) {
      const left = Math.max(0, giveUpAt - now());
      const body: Record<string, unknown> = {
        ttl_ms: wireMillis(ttlMs),
        wait_ms: Math.floor(left),
        owner,
        request_id: requestId,
      };
      if (lockDelayMs !== undefined) body["lock_delay_ms"] = Math.floor(lockDelayMs);
      if (options.fair) body["fair"] = true; // sent only when set
      const sent = now();
      let answer: LeaseAnswer;
      try {
        answer = await this._call<LeaseAnswer>("POST", path, body, { extraMs: left, signal: options.signal });
      } catch (error) {
        const pause = pauseAfter(error, sent, giveUpAt);
        if (pause === undefined) throw error;
        await sleep(pause, options.signal);
        continue;
      }
      const lease = new Lease(this, answer, sent, ttlMs);
      // A grant that waited: its deadline counted from this send time may be
      // near or past, so bound it by an extend sent now instead.
      if (now() - sent > ttlMs * RESYNC_SHARE) await lease._resync();
      lease._arm();
      if (maxHoldMs !== undefined) lease._startRenewing(maxHoldMs);
      return lease;
    }
  }

  /** @internal A release, with the whole answer (the lease reads `acknowledged`). */
  async _release(name: string, token: string): Promise<ReleaseAnswer> {
    return this._call<ReleaseAnswer>("POST", lockPath(name, "release"), { token });
  }

  /** @internal An extend, as the lease and its renewer send it. */
  async _extend(name: string, token: string, ttlMs: number, timeoutMs?: number): Promise<LeaseAnswer> {
    return this._call<LeaseAnswer>(
      "POST",
      lockPath(name, "extend"),
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

/** The abort reason of a request that outlived its timeout. */
class TimeoutMarker extends Error {}

/** The pause before asking again after `error`, or undefined to give up. */
function pauseAfter(error: unknown, sent: number, giveUpAt: number): number | undefined {
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

/** Whether a failed fetch met a connection closed under it (safe to send again once). */
function isReset(error: unknown): boolean {
  if (!(error instanceof BrokerUnavailable) || error.code !== "transport") return false;
  const cause = (error.cause as { cause?: { code?: string } } | undefined)?.cause;
  return ["ECONNRESET", "EPIPE", "UND_ERR_SOCKET"].includes(cause?.code ?? "");
}

function describe(error: unknown): string {
  const cause = (error as { cause?: unknown } | null)?.cause;
  const inner = cause instanceof Error ? `: ${cause.message}` : "";
  return error instanceof Error ? `${error.message}${inner}` : String(error);
}

/** `/v1/locks/{name}[/action]` with the name percent-encoded. */
export function lockPath(name: string, action?: string): string {
  if (typeof name !== "string" || name === "") throw new TypeError("the lock name must be a non-empty string");
  const path = `/v1/locks/${encodeURIComponent(name)}`;
  return action ? `${path}/${action}` : path;
}

/** A duration in ms, refusing negatives, NaN, infinity and non-numbers. */
export function duration(value: number, field: string, allowZero: boolean): number {
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw new TypeError(`${field} must be a finite number of milliseconds, not ${String(value)}`);
  }
  if (value < 0 || (value === 0 && !allowZero)) {
    throw new RangeError(`${field} must be ${allowZero ? ">= 0" : "> 0"}, not ${value}`);
  }
  return value;
}

/** Milliseconds as a whole number, at least 1. */
function wireMillis(ms: number): number {
  return Math.max(1, Math.round(ms));
}

/** Resolves after `ms`, or rejects with the signal's reason once it aborts. */
function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A fresh id that makes a re-sent acquire return the same lease, not busy. */
export function newRequestId(): string {
  const uuid = globalThis.crypto?.randomUUID?.();
  if (uuid) return uuid.replace(/-/g, "");
  let id = "";
  for (let i = 0; i < 32; i++) id += Math.floor(Math.random() * 16).toString(16);
  return id;
}

interface NodeProcess {
  pid: number;
  env: Record<string, string | undefined>;
  versions?: { node?: string };
}

function nodeProcess(): NodeProcess | undefined {
  const candidate = (globalThis as { process?: NodeProcess }).process;
  return candidate?.versions?.node ? candidate : undefined;
}

let ownerCache: string | undefined;

/** `host:pid` on Node, so a `lock_busy` answer says who holds the lock; `browser` elsewhere. */
async function defaultOwner(): Promise<string> {
  if (ownerCache !== undefined) return ownerCache;
  const proc = nodeProcess();
  let owner = "browser";
  if (proc) {
    let host = proc.env["HOSTNAME"] || "node";
    try {
      // A specifier in a variable keeps browser bundlers from resolving it.
      const specifier = "node:os";
      const os = (await import(specifier)) as { hostname(): string };
      host = os.hostname() || host;
    } catch {
      // not Node after all
    }
    owner = `${host}:${proc.pid}`;
  }
  ownerCache = owner.slice(0, 256);
  return ownerCache;
}
