/**
 * Sessions: one keepalive that keeps many leases. The wire shapes of the
 * session routes, the `session` option of the acquires, and {@link Session},
 * the helper that `client.session()` opens and keeps alive in the background.
 */

import type { AcquireOptions, Client, PermitOptions } from "./client.js";
import { now } from "./clock.js";
import { BrokerUnavailable, LeaseLost, LockBrokerError, SessionLost } from "./errors.js";
import { RETRY_PAUSE_MS, makeAsyncDisposable, runThenRelease, type Lease } from "./lease.js";
import type { AcquireAllOptions, LockAsk } from "./multi.js";

/** The optional arguments of {@link Client.openSession} and {@link Client.session}. */
export interface SessionOptions {
  /**
   * How long the session, and every lease under it, stays valid after each
   * keepalive; {@link DEFAULT_TTL_MS} by default.
   */
  ttlMs?: number;
  /** Labels the session and, by default, the leases taken through its helper; `host:pid` on Node by default. */
  owner?: string;
  /** How long each lease's lock stays unavailable after the session expires (not when it closes); the broker's default when absent. */
  lockDelayMs?: number;
}

/** The broker's answer to {@link Client.openSession}: the only one that carries the session's token. */
export interface OpenedSession {
  /** The session's id, for its routes. Not a secret. */
  id: string;
  /** The session's secret: acquires take it as `session`, keepalive and close need it. Keep it out of logs and URLs. */
  token: string;
  /** How long each keepalive keeps the session and its leases, in ms. */
  ttlMs: number;
  /** When the session expires without a keepalive, in Unix milliseconds of the broker's clock. */
  expiresAtMs: number;
  /** How long the session is sure to stay valid from when the answer left the broker, in ms. */
  validityMs: number;
  /** The lock-delay of each lease under the session, in ms. */
  lockDelayMs: number;
  owner: string | null;
}

/** A lease that ended under its session before a keepalive (released, force-released, past the max hold). */
export interface SessionLeaseRef {
  /** The lock's or semaphore's name. */
  name: string;
  space: "lock" | "semaphore";
}

/** The broker's answer to {@link Client.keepSession}: the session and every lease under it renewed. */
export interface SessionRenewal {
  id: string;
  /** The validity given to the session and each of its leases, in ms. */
  ttlMs: number;
  /** When the session now expires, in Unix milliseconds of the broker's clock. */
  expiresAtMs: number;
  /** How long the session is sure to stay valid, in ms. */
  validityMs: number;
  /** How many leases were renewed with the session. */
  leases: number;
  /** Leases that had ended and were taken out of the session. */
  ended: SessionLeaseRef[];
}

/** A session's state as `GET /v1/sessions/{id}` reports it. Never its token. */
export interface SessionStatus {
  id: string;
  /** Whether the session is open now (false for one that expired or was closed, and for an id no session had). */
  open: boolean;
  /** The holder's label (null once it is not open). */
  owner: string | null;
  /** How long it stays valid without a keepalive; 0 when not open. */
  expiresInMs: number;
  /** The validity each keepalive gives; null once its record is gone. */
  ttlMs: number | null;
  /** The lock-delay of its leases; null once its record is gone. */
  lockDelayMs: number | null;
  /** How many leases it holds. */
  leases: number;
}

/** The optional arguments of {@link Session.acquire}: a lease under a session takes its TTL and lock-delay from it. */
export type SessionAcquireOptions = Omit<AcquireOptions, "ttlMs" | "lockDelayMs" | "session">;
/** The optional arguments of {@link Session.acquirePermit}. */
export type SessionPermitOptions = Omit<PermitOptions, "ttlMs" | "lockDelayMs" | "session">;
/** The optional arguments of {@link Session.acquireAll}. */
export type SessionAcquireAllOptions = Omit<AcquireAllOptions, "ttlMs" | "lockDelayMs" | "session">;

type Json = Record<string, unknown>;

/**
 * `/v1/sessions/{id}[/action]`. A token never goes into a URL: a string with
 * its `.` is refused here, before anything is sent (and without echoing it).
 */
export function sessionPath(id: string, action?: string): string {
  if (typeof id !== "string" || id === "") throw new TypeError("the session id must be a non-empty string");
  if (id.includes(".")) throw new TypeError("that is a session token, not its id: pass the id (the token stays out of URLs)");
  const path = `/v1/sessions/${encodeURIComponent(id)}`;
  return action ? `${path}/${action}` : path;
}

/** @internal An {@link OpenedSession} from the opening's answer, which must carry the token. */
export function openedFromJson(a: Json): OpenedSession {
  const { id, token } = a;
  const ttlMs = a["ttl_ms"];
  if (typeof id !== "string" || typeof token !== "string" || typeof ttlMs !== "number") {
    throw new LockBrokerError("the broker's answer to opening a session lacks its id, token or ttl_ms", {
      code: "bad_response",
      status: 200,
    });
  }
  return {
    id,
    token,
    ttlMs,
    expiresAtMs: (a["expires_at_ms"] as number) ?? 0,
    validityMs: (a["validity_ms"] as number | undefined) ?? ttlMs,
    lockDelayMs: (a["lock_delay_ms"] as number) ?? 0,
    owner: (a["owner"] as string | null) ?? null,
  };
}

/** @internal A {@link SessionRenewal} from a keepalive's answer. */
export function renewalFromJson(a: Json): SessionRenewal {
  const ttlMs = a["ttl_ms"];
  if (typeof ttlMs !== "number") {
    throw new LockBrokerError("the broker's keepalive answer lacks ttl_ms", { code: "bad_response", status: 200 });
  }
  const ended = Array.isArray(a["ended"]) ? (a["ended"] as Json[]) : [];
  return {
    id: a["id"] as string,
    ttlMs,
    expiresAtMs: (a["expires_at_ms"] as number) ?? 0,
    validityMs: (a["validity_ms"] as number | undefined) ?? ttlMs,
    leases: (a["leases"] as number) ?? 0,
    ended: ended
      .filter((one) => one !== null && typeof one === "object" && typeof one["name"] === "string")
      .map((one) => ({ name: one["name"] as string, space: one["space"] === "semaphore" ? "semaphore" : "lock" })),
  };
}

/** @internal A {@link SessionStatus} from `GET /v1/sessions/{id}`. */
export function sessionStatusFromJson(a: Json): SessionStatus {
  return {
    id: a["id"] as string,
    open: Boolean(a["open"]),
    owner: (a["owner"] as string | null) ?? null,
    expiresInMs: (a["expires_in_ms"] as number) ?? 0,
    ttlMs: (a["ttl_ms"] as number | null) ?? null,
    lockDelayMs: (a["lock_delay_ms"] as number | null) ?? null,
    leases: (a["leases"] as number) ?? 0,
  };
}

/** @internal The `session` option of an acquire: the token to send and, for a helper, the session that keeps the lease. */
export interface SessionAsk {
  token: string;
  helper: Session | undefined;
}

/**
 * @internal Reads the `session` option of an acquire. A lease under a session
 * takes its TTL and lock-delay from it, so `ttlMs` and `lockDelayMs` are
 * refused beside it (`TypeError`), as is a session helper already lost or
 * closed ({@link SessionLost}), before anything is sent.
 */
export function sessionAsk(options: { session?: string | Session; ttlMs?: number; lockDelayMs?: number }): SessionAsk | undefined {
  const session = options.session;
  if (session === undefined || session === null) return undefined;
  if (options.ttlMs !== undefined || options.lockDelayMs !== undefined) {
    throw new TypeError("a lease under a session takes its TTL and lock-delay from the session: leave out ttlMs and lockDelayMs");
  }
  if (session instanceof Session) {
    session._checkOpen();
    return { token: session.token, helper: session };
  }
  if (typeof session !== "string" || session === "") throw new TypeError("session must be a session's token or a Session");
  return { token: session, helper: undefined };
}

/**
 * @internal Holds a granted lease under its session: the helper keeps it (its
 * deadline the session's); with a bare token the lease knows only the validity
 * its grant answered, and is lost (`expired`) when that runs out.
 */
export function holdUnder(lease: Lease, ask: SessionAsk): void {
  if (ask.helper) {
    ask.helper._adopt(lease);
  } else {
    lease._underSession(undefined);
    lease._arm();
  }
}

/** @internal An acquire under `ask` failed with `error`: a helper learns that its session is not open. */
export function sessionRefused(ask: SessionAsk | undefined, error: unknown): void {
  if (ask?.helper && error instanceof SessionLost) ask.helper._lostBy(error);
}

/**
 * An open session, kept alive in the background: one keepalive every
 * `ttlMs / 3` renews the session and every lease under it, whatever their
 * number. Leases taken through it ({@link acquire}, {@link acquirePermit},
 * {@link acquireAll}, or any acquire given `{ session }`) are never extended
 * on their own; each ends with the session.
 *
 * The session is lost when a keepalive answers `session_lost` (it expired,
 * or was closed elsewhere) or when no keepalive succeeded before its TTL ran
 * out by the local clock (counted from each keepalive's send time, so never
 * later than the broker's). Then {@link signal} aborts, and every lease under
 * it is lost with a {@link SessionLost} (`lostReason` `"session_lost"`),
 * aborting its own `signal`. {@link close} (or {@link run}, or `await using`)
 * releases every lease under it at once; they then read released.
 *
 * ```ts
 * await using session = await client.session({ ttlMs: 10_000, owner: "batch-7" });
 * const leases = await Promise.all(accounts.map((name) => session.acquire(name, { waitMs: 5000 })));
 * await settle(leases, session.signal);
 * ```
 */
export class Session {
  /** The session's id, for its routes. Not a secret. */
  readonly id: string;
  /** How long each keepalive keeps the session and its leases, in ms. */
  readonly ttlMs: number;
  /** The session's label; its leases' by default. */
  readonly owner: string | null;
  /** The lock-delay of each lease under the session, in ms. */
  readonly lockDelayMs: number;

  readonly #client: Client;
  readonly #token: string;
  readonly #controller = new AbortController();
  readonly #leases = new Set<Lease>();
  #deadline: number;
  #expiresAtMs: number;
  #lastSent: number;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #lost: SessionLost | undefined;
  #closed = false;
  #close: Promise<number> | undefined;
  // The keepalive loop.
  #keeping: Promise<void> | undefined;
  #stopped = false;
  #wake: (() => void) | undefined;
  // Whether the loss already reached the work (throwIfLost threw it).
  #lossThrown = false;

  /** @internal `sent` is when the opening request was sent: the first deadline counts from it. */
  constructor(client: Client, opened: OpenedSession, sent: number) {
    this.#client = client;
    this.id = opened.id;
    this.#token = opened.token;
    this.ttlMs = opened.ttlMs;
    this.owner = opened.owner;
    this.lockDelayMs = opened.lockDelayMs;
    this.#deadline = sent + Math.min(opened.ttlMs, opened.validityMs);
    this.#expiresAtMs = opened.expiresAtMs;
    this.#lastSent = sent;
    this.#schedule();
    this.#keeping = this.#keep().catch((error: unknown) => {
      // A bug in the loop must not leave the work believing it holds its leases.
      this.#markLost(this.#localLoss(`keepalive loop failed: ${String(error)}`));
    });
  }

  /** The session's secret (acquires send it as `session`). Keep it out of logs and URLs. */
  get token(): string {
    return this.#token;
  }

  /**
   * Aborts the moment the session is lost (its reason a {@link SessionLost})
   * or closed. Pass it to the work that needs the session's leases.
   */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Whether the session is lost (or may be): every lease under it is lost too. */
  get lost(): boolean {
    return this.#lost !== undefined;
  }

  /** Whether {@link close} closed the session (and released its leases). */
  get closed(): boolean {
    return this.#closed;
  }

  /** The broker's expiry of the session, in Unix milliseconds of its clock. */
  get expiresAtMs(): number {
    return this.#expiresAtMs;
  }

  /** The leases taken under the session and not yet ended. */
  get leases(): readonly Lease[] {
    return [...this.#leases];
  }

  /**
   * How long the session (and every lease under it) stays valid unless kept
   * alive, by the local clock counted from the send time of its last
   * successful keepalive, in whole milliseconds rounded down. 0 once past,
   * lost or closed.
   */
  remainingMs(): number {
    if (this.#lost || this.#closed) return 0;
    return Math.max(0, Math.floor(this.#deadline - now()));
  }

  /** Throws {@link SessionLost} if the session is lost or past its deadline. */
  throwIfLost(): void {
    this._lapse();
    if (this.#lost) {
      this.#lossThrown = true;
      throw this.#lost;
    }
  }

  /**
   * Takes the lock under the session, waiting up to `waitMs`, as
   * {@link Client.acquire} does; the lease's owner is the session's unless
   * given. Throws {@link SessionLost} once the session is lost or closed,
   * and {@link SessionFull} when it holds as many leases as one may.
   */
  acquire(name: string, options: SessionAcquireOptions = {}): Promise<Lease> {
    return this.#client.acquire(name, { ...options, session: this });
  }

  /** Takes one of the `limit` permits of the semaphore `name` under the session, as {@link Client.acquirePermit} does. */
  acquirePermit(name: string, limit: number, options: SessionPermitOptions = {}): Promise<Lease> {
    return this.#client.acquirePermit(name, limit, { ...options, session: this });
  }

  /** Takes every lock of `locks` or none under the session, in one request, as {@link Client.acquireAll} does. */
  acquireAll(locks: ReadonlyArray<string | LockAsk>, options: SessionAcquireAllOptions = {}): Promise<Lease[]> {
    return this.#client.acquireAll(locks, { ...options, session: this });
  }

  /** The session's state, read from the broker ({@link Client.sessionStatus}). */
  status(): Promise<SessionStatus> {
    return this.#client.sessionStatus(this.id);
  }

  /**
   * Runs `work` with {@link signal}, then closes the session, as
   * {@link Lease.run} does for a lease: when `work` throws, that error comes
   * back as it is; when it returns but the session was lost meanwhile, the
   * close throws {@link SessionLost}.
   */
  async run<T>(work: (signal: AbortSignal) => Promise<T> | T): Promise<T> {
    return runThenRelease({ signal: this.signal, release: () => this.close() }, work);
  }

  /**
   * Stops the keepalives (waiting for one in flight, so none follows), closes
   * the session, which releases every lease under it, and aborts
   * {@link signal}. Resolves to how many leases the close released; each lease
   * taken through the session then reads released.
   *
   * Throws {@link SessionLost} when the session was lost (its leases are lost
   * too: treat the work as possibly duplicated), and {@link BrokerUnavailable}
   * when the broker could not be told: the session and its leases then expire
   * at its TTL, and read lost from then on. Calling it again settles as the
   * first call did.
   */
  close(): Promise<number> {
    this.#close ??= this.#closeOnce();
    return this.#close;
  }

  /** The session without its token. */
  toJSON(): Record<string, unknown> {
    const state = this.#lost ? "lost" : this.#closed ? "closed" : "open";
    return { id: this.id, owner: this.owner, state, leases: this.#leases.size, remainingMs: this.remainingMs() };
  }

  toString(): string {
    const s = this.toJSON();
    return `Session(${this.id}, ${String(s["state"])}, ${this.#leases.size} leases, ${this.remainingMs()} ms left)`;
  }

  /**
   * @internal The close `await using` runs; as {@link Lease} does, it throws
   * only a loss the body was not already given by {@link throwIfLost}, and
   * never an unreachable broker.
   */
  async _dispose(): Promise<void> {
    try {
      await this.close();
    } catch (error) {
      if (error instanceof SessionLost && !this.#lossThrown) throw error;
    }
  }

  /** @internal Before an acquire under the session: throws {@link SessionLost} once it is lost, closed or closing. */
  _checkOpen(): void {
    this._lapse();
    if (this.#lost) throw this.#lost;
    if (this.#close) {
      throw new SessionLost(`the session ${this.id} was closed: open a new session to go on`, { code: "session_lost" });
    }
  }

  /** @internal A lease was granted under the session: it is kept by the keepalives from now on. */
  _adopt(lease: Lease): void {
    lease._underSession(this);
    if (this.#lost) return lease._loseWith(this.#leaseLoss(lease, this.#lost));
    // Granted before the close, which released it (no lease joins a session once closing).
    if (this.#closed) return lease._releasedWithSession();
    lease._renewedWith(this.#deadline, this.#expiresAtMs);
    this.#leases.add(lease);
    lease.signal.addEventListener("abort", () => this.#leases.delete(lease), { once: true });
  }

  /** @internal The broker answered `session_lost` to a call with the session's token. */
  _lostBy(error: SessionLost): void {
    this.#markLost(error);
  }

  /** @internal Marks the session lost if its local deadline passed (a lease under it found its own passed). */
  _lapse(): void {
    if (!this.#lost && !this.#closed && now() >= this.#deadline) {
      this.#markLost(this.#localLoss("no keepalive succeeded within its TTL"));
    }
  }

  /**
   * The keepalive loop: one keepalive every `ttlMs / 3`. An unreachable broker
   * is retried briefly, never past the deadline (the deadline timer then marks
   * the session lost); `session_lost` ends the session at once; any other
   * refusal stops the keepalives, letting the session run out.
   */
  async #keep(): Promise<void> {
    const interval = this.ttlMs / 3;
    let next = this.#lastSent + interval;
    for (;;) {
      if (!(await this.#sleepUntil(next))) return;
      const timeoutMs = Math.max(50, Math.min(this.#client.timeoutMs, this.remainingMs()));
      try {
        next = (await this.#keepAlive(timeoutMs)) + interval;
      } catch (error) {
        if (this.#lost || this.#stopped) return;
        if (!(error instanceof BrokerUnavailable)) return;
        next = now() + Math.min(RETRY_PAUSE_MS, interval / 2, this.remainingMs());
      }
    }
  }

  /** One keepalive; resolves to its send time, from which the new deadline counts. */
  async #keepAlive(timeoutMs: number): Promise<number> {
    const sent = now();
    let renewal: SessionRenewal;
    try {
      renewal = await this.#client._keepSession(this.id, this.#token, timeoutMs);
    } catch (error) {
      if (error instanceof SessionLost) this.#markLost(error);
      throw error;
    }
    if (this.#lost || this.#closed) return sent;
    this.#deadline = sent + Math.min(renewal.ttlMs, renewal.validityMs);
    this.#expiresAtMs = renewal.expiresAtMs;
    this.#lastSent = sent;
    for (const lease of this.#leases) lease._renewedWith(this.#deadline, this.#expiresAtMs);
    this.#schedule();
    // Fewer leases renewed than held: an answer that named an ended lease was
    // lost on its way, and the broker has forgotten that lease since, so no
    // answer will name it again. Every lease is checked then.
    const short = renewal.leases < this.#leases.size;
    if (renewal.ended.length > 0 || short) void this.#checkEnded(renewal.ended, short);
    return sent;
  }

  /**
   * Leases the keepalive names as ended (force-released, past the max hold,
   * released by their token elsewhere) are lost. The answer names locks, not
   * leases: a lease of the same name taken after one released is still held,
   * so each lease of a named lock is lost only when its fence is no longer
   * current. With `all`, every lease is checked so. A check that fails
   * leaves the lease as it was.
   */
  async #checkEnded(ended: SessionLeaseRef[], all: boolean): Promise<void> {
    const named = new Set(ended.map((ref) => `${ref.space === "semaphore" ? "semaphores" : "locks"}/${ref.name}`));
    const suspects = [...this.#leases].filter(
      (lease) => !lease._releasing && (all || named.has(`${lease._kind}/${lease.name}`)),
    );
    await Promise.all(
      suspects.map(async (lease) => {
        const check = await lease.checkFence().catch(() => undefined);
        if (check === undefined || check.current || lease._releasing || this.#lost) return;
        lease._loseWith(
          new LeaseLost(
            `the lease on ${JSON.stringify(lease.name)} (fence ${lease.fence}) ended under its session (force-released, ` +
              "past the max hold, or released elsewhere); another holder may already be running",
            { code: "lease_lost" },
          ),
        );
      }),
    );
  }

  async #closeOnce(): Promise<number> {
    await this.#stopKeeping();
    try {
      if (this.#lost?.status === 409) throw this.#lost; // the broker said it is not open: nothing to close
      let released: number;
      try {
        released = await this.#client.closeSession(this.id, this.#token);
      } catch (error) {
        if (error instanceof SessionLost) this.#markLost(error);
        throw this.#lost ?? error;
      }
      // Even a session this client had given up on by its (conservative) clock
      // was still the broker's: its leases were never anyone else's.
      this.#closed = true;
      if (this.#timer !== undefined) clearTimeout(this.#timer);
      for (const lease of [...this.#leases]) lease._releasedWithSession();
      return released;
    } finally {
      this.#end(new LockBrokerError("the session was closed", { code: "closed" }));
    }
  }

  /** Stops the keepalive loop and waits for a keepalive in flight, so none follows a close. */
  async #stopKeeping(): Promise<void> {
    this.#stopped = true;
    this.#wake?.();
    await this.#keeping;
  }

  /** (Re)sets the deadline timer. */
  #schedule(): void {
    if (this.#lost || this.#closed) return;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = unref(
      setTimeout(() => {
        this._lapse();
        if (!this.#lost) this.#schedule();
      }, Math.max(0, this.#deadline - now())),
    );
  }

  #localLoss(why: string): SessionLost {
    return new SessionLost(
      `the session ${this.id} is lost (${why}); every lease under it is lost with it, another holder ` +
        "may already be running, so stop and treat the work as possibly duplicated",
      { code: "session_lost" },
    );
  }

  /** A lease's own loss when its session is lost: it names the lock, and carries the session's status. */
  #leaseLoss(lease: Lease, loss: SessionLost): SessionLost {
    return new SessionLost(
      `the lease on ${JSON.stringify(lease.name)} (fence ${lease.fence}) is lost with its session ${this.id}; another ` +
        "holder may already be running, so stop and treat the work as possibly duplicated",
      { code: "session_lost", status: loss.status, cause: loss },
    );
  }

  #markLost(error: SessionLost): void {
    if (this.#lost || this.#closed) return;
    this.#lost = error;
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#wake?.();
    for (const lease of [...this.#leases]) lease._loseWith(this.#leaseLoss(lease, error));
    this.#end(error);
  }

  #end(reason: unknown): void {
    if (!this.#controller.signal.aborted) this.#controller.abort(reason);
  }

  /** Resolves true at `at`, or false as soon as the keepalives stop. */
  #sleepUntil(at: number): Promise<boolean> {
    if (this.#stopped || this.#lost) return Promise.resolve(false);
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

makeAsyncDisposable(Session.prototype);
export interface Session {
  /**
   * Closes the session (see {@link Session.close}); present where the runtime
   * has `Symbol.asyncDispose`. Throws only a loss the body was not already
   * given by `throwIfLost()`; never an unreachable broker.
   */
  [Symbol.asyncDispose](): Promise<void>;
}

/** Timers of the keepalives do not keep a Node process alive (like a daemon thread). */
function unref<T>(timer: T): T {
  (timer as { unref?: () => void }).unref?.();
  return timer;
}
