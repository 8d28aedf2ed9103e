/**
 * Leader election on one lock: a campaign of waiting acquires, the won lease
 * renewed as `client.lock()` renews it, and who leads as the lock's event
 * stream shows it.
 */

import type { Client } from "./client.js";
import { BrokerUnavailable, LeaseLost, LockBrokerError, LockBusy } from "./errors.js";
import type { Lease } from "./lease.js";
import { defaultOwner, duration, lockPath, sleep } from "./util.js";
import type { Watch } from "./watch.js";

/** The wait of one campaign acquire; sent again for as long as it takes. */
const CAMPAIGN_WAIT_MS = 300_000;
/** How long a leader's lease is renewed at most by default: one day. */
export const DEFAULT_LEADER_MAX_HOLD_MS = 24 * 3_600_000;

/** The optional arguments of {@link Client.leader}. */
export interface LeaderOptions {
  /** The lease's TTL: how long a crashed leader keeps the others waiting; 10 s by default. */
  ttlMs?: number;
  /** This candidate's label, which the others see as the leader; `host:pid` on Node by default. */
  owner?: string;
  /** How long the lease is renewed at most; {@link DEFAULT_LEADER_MAX_HOLD_MS} by default. */
  maxHoldMs?: number;
}

/**
 * One candidate for one term. `start()` campaigns in the background; once
 * granted, `elected` resolves, `isLeader` is true and `term` is the lease's
 * fence (pass it to what the leader writes to). `lost` aborts when the lease
 * is lost; the helper then leads no more and does not campaign again (make
 * another). `resign()` releases the lease; `stop()` resigns and stops
 * following the events.
 *
 * ```ts
 * const leader = client.leader("scheduler", { ttlMs: 10_000, owner: "node-a" }).start();
 * await leader.elected;
 * while (!leader.lost.aborted) await runRound({ fence: leader.term, signal: leader.lost });
 * ```
 */
export class Leader {
  readonly name: string;
  readonly ttlMs: number;
  readonly maxHoldMs: number;
  /** Resolves once this candidate won its term (never rejects; `error` says why a campaign gave up). */
  readonly elected: Promise<void>;
  /** Why campaigning ended early: a refusal retrying cannot fix. */
  error: unknown;

  readonly #client: Client;
  readonly #owner: string | undefined;
  readonly #cancel = new AbortController();
  readonly #lost = new AbortController();
  #electedDone: () => void = () => undefined;
  #lease: Lease | undefined;
  #resigned = false;
  #started = false;
  #watch: Watch | undefined;
  #seen: { owner: string | null; fence: number } | undefined;

  /** @internal */
  constructor(client: Client, name: string, options: LeaderOptions) {
    lockPath(name); // a bad name fails here, not in the background
    this.#client = client;
    this.name = name;
    this.ttlMs = duration(options.ttlMs ?? 10_000, "ttlMs", false);
    this.maxHoldMs = duration(options.maxHoldMs ?? DEFAULT_LEADER_MAX_HOLD_MS, "maxHoldMs", false);
    this.#owner = options.owner;
    this.elected = new Promise((done) => (this.#electedDone = done));
  }

  /** Aborts when the lease of this term is lost (expired unrenewed, or taken); the reason is a {@link LeaseLost}. */
  get lost(): AbortSignal {
    return this.#lost.signal;
  }

  /** Whether this candidate leads now: it holds the lease, has not resigned or lost it, and its local deadline is ahead. */
  get isLeader(): boolean {
    const lease = this.#lease;
    return lease !== undefined && !this.#resigned && !lease.lost && !lease.released && lease.remainingMs() > 0;
  }

  /** The fence of this candidate's lease while it leads, else null. */
  get term(): number | null {
    return this.isLeader && this.#lease ? this.#lease.fence : null;
  }

  /** Why `lost` aborted (`"lease_lost"` or `"expired"`), else undefined. */
  get lostReason(): string | undefined {
    return this.#lease?.lostReason;
  }

  /** The owner of whoever leads, as the lock's events show it (this candidate's own while it leads); null when nobody does. */
  get leader(): string | null {
    if (this.isLeader && this.#lease) return this.#lease.owner;
    return this.#seen?.owner ?? null;
  }

  /** The term (lease fence) of whoever leads, as the lock's events show it (this candidate's own while it leads); null when nobody does. */
  get leaderTerm(): number | null {
    if (this.isLeader && this.#lease) return this.#lease.fence;
    return this.#seen?.fence ?? null;
  }

  /** Starts following the lock's events and campaigning; returns at once. */
  start(): this {
    if (this.#started) throw new Error("a leader helper campaigns once; call client.leader() again");
    this.#started = true;
    this.#watch = this.#client.watch(this.name);
    void this.#follow(this.#watch);
    void this.#campaign();
    return this;
  }

  /**
   * Stops campaigning and, while leading, releases the lease (a release that
   * fails leaves it to expire). Following the events goes on until {@link stop}.
   */
  async resign(): Promise<void> {
    this.#resigned = true;
    this.#cancel.abort(new LockBrokerError("the candidate resigned", { code: "resigned" }));
    const lease = this.#lease;
    if (!lease || lease.released || lease.lostReason === "lease_lost") return;
    await lease.release().catch(() => undefined); // a loss is already on `lost`
  }

  /** Resigns and stops following the events. */
  async stop(): Promise<void> {
    await this.resign();
    this.#watch?.close();
  }

  async #follow(watch: Watch): Promise<void> {
    try {
      for await (const event of watch) {
        if (event.type === "state" && !event.complete) {
          const s = event.status;
          this.#seen = s?.held && s.mode === "exclusive" && s.fence !== null ? { owner: s.owner, fence: s.fence } : undefined;
        } else if (event.type === "acquired" && event.mode === "exclusive") {
          this.#seen = { owner: event.owner, fence: event.fence };
        } else if (event.type !== "lagged" && event.type !== "state" && event.type !== "extended") {
          if (this.#seen?.fence === event.fence) this.#seen = undefined;
        }
      }
    } catch {
      // Following is a convenience: `isLeader` and `term` never depend on it.
    }
  }

  async #campaign(): Promise<void> {
    const owner = this.#owner ?? (await defaultOwner());
    let step = 0;
    while (!this.#cancel.signal.aborted) {
      const started = performance.now();
      let lease: Lease;
      try {
        lease = await this.#client.lock(this.name, {
          ttlMs: this.ttlMs,
          maxHoldMs: this.maxHoldMs,
          owner,
          waitMs: CAMPAIGN_WAIT_MS,
          signal: this.#cancel.signal,
        });
      } catch (error) {
        if (this.#cancel.signal.aborted) return;
        const retryable = error instanceof LockBusy || error instanceof BrokerUnavailable || error instanceof LeaseLost;
        if (!retryable) {
          this.error = error;
          return;
        }
        // A wait that ran its course goes again at once; a quick refusal pauses, growing.
        const quick = !(error instanceof LockBusy) || performance.now() - started < 1000;
        step = quick ? step + 1 : 0;
        const pause = quick ? Math.min(15_000, 100 * 2 ** Math.min(step, 30)) * (0.5 + Math.random() / 2) : 0;
        await sleep(Math.max(pause, (error as LockBrokerError).retryAfterMs ?? 0), this.#cancel.signal).catch(() => undefined);
        continue;
      }
      if (this.#cancel.signal.aborted) {
        await lease.release().catch(() => undefined); // resigned while the grant was on its way
        return;
      }
      this.#lease = lease;
      const onLost = (): void => {
        if (lease.lost) this.#lost.abort(lease.signal.reason);
      };
      if (lease.signal.aborted) onLost();
      else lease.signal.addEventListener("abort", onLost, { once: true });
      this.#electedDone();
      return;
    }
  }
}
