/**
 * What the broker reports about a lock or a semaphore: its status, and the
 * holders a status or a `lock_busy` answer lists. Never a token.
 */

/** How a lease holds: `"exclusive"` or `"shared"` for a lock, `"permit"` for a semaphore. */
export type LeaseMode = "exclusive" | "shared" | "permit";

/** One valid lease of a lock, or permit of a semaphore. */
export interface Holder {
  owner: string | null;
  fence: number;
  mode: LeaseMode;
  /** How long this lease stays valid unless renewed. */
  expiresInMs: number;
  /** How long until its place is free (expiry plus lock-delay). */
  availableInMs: number;
}

/**
 * A lock's state as `GET /v1/locks/{name}` reports it. While shared leases
 * hold the lock, `owner` is null, `expiresInMs` is the latest of their
 * expiries and `availableInMs` is when an exclusive acquire could succeed.
 */
export interface LockStatus {
  name: string;
  held: boolean;
  /** The exclusive holder's label (null while shared leases hold the lock). */
  owner: string | null;
  /** The last fence issued for this lock; null when none is remembered. */
  fence: number | null;
  /** How long the current lease stays valid (0 when not held). */
  expiresInMs: number;
  /** How long until the lock can be granted at the earliest (expiry plus lock-delay). */
  availableInMs: number;
  /** `"exclusive"` or `"shared"` while held, null when not. */
  mode: "exclusive" | "shared" | null;
  /** The valid leases (at most 100; `holderCount` says how many there are). */
  holders: Holder[];
  /** How many valid leases hold the lock. */
  holderCount: number;
  /**
   * Requests waiting for the lock: those in its queue in Redis, plus those
   * waiting in the answering broker's own line (see openapi.yaml). 0 from a
   * broker that does not say.
   */
  waiting: number;
}

/** A semaphore's state as `GET /v1/semaphores/{name}` reports it. */
export interface SemaphoreStatus {
  name: string;
  /** The limit the held permits were granted under; null when none is held. */
  limit: number | null;
  /** How many valid permits there are. */
  held: number;
  /** How many more permits could be granted now; null without a limit. */
  available: number | null;
  /** The last fence issued for this semaphore; null when none is remembered. */
  fence: number | null;
  /** The valid permits (at most 100). */
  holders: Holder[];
  /** How long until a permit can be granted at the earliest (0 when one is free now). */
  availableInMs: number;
}

type Json = Record<string, unknown>;

/** A `holders` list; empty when absent (older brokers). */
export function holdersFromJson(data: unknown): Holder[] {
  if (!Array.isArray(data)) return [];
  return data
    .filter((item): item is Json => item !== null && typeof item === "object")
    .map((item) => ({
      owner: (item["owner"] as string | null) ?? null,
      fence: item["fence"] as number,
      mode: ((item["mode"] as LeaseMode | undefined) ?? "exclusive"),
      expiresInMs: (item["expires_in_ms"] as number) ?? 0,
      availableInMs: (item["available_in_ms"] as number) ?? 0,
    }));
}

export function lockStatusFromJson(a: Json): LockStatus {
  const held = Boolean(a["held"]);
  const holders = holdersFromJson(a["holders"]);
  return {
    name: a["name"] as string,
    held,
    owner: (a["owner"] as string | null) ?? null,
    fence: (a["fence"] as number | null) ?? null,
    expiresInMs: (a["expires_in_ms"] as number) ?? 0,
    availableInMs: (a["available_in_ms"] as number) ?? 0,
    // A broker without shared locks says neither: its one lease is exclusive.
    mode: a["mode"] === undefined ? (held ? "exclusive" : null) : (a["mode"] as LockStatus["mode"]),
    holders,
    holderCount: (a["holder_count"] as number | undefined) ?? (holders.length || Number(held)),
    waiting: (a["waiting"] as number | undefined) ?? 0,
  };
}

export function semaphoreStatusFromJson(a: Json): SemaphoreStatus {
  return {
    name: a["name"] as string,
    limit: (a["limit"] as number | null) ?? null,
    held: (a["held"] as number) ?? 0,
    available: (a["available"] as number | null) ?? null,
    fence: (a["fence"] as number | null) ?? null,
    holders: holdersFromJson(a["holders"]),
    availableInMs: (a["available_in_ms"] as number) ?? 0,
  };
}

/**
 * The broker's answer to a fence check (`GET /v1/{locks,semaphores}/{name}/fence/{fence}`):
 * whether a valid lease (exclusive, shared or permit) carries exactly `fence`
 * now. Never a token. It can be stale by the time a resource acts on it:
 * check, act at once, and keep the action shorter than `expiresInMs`.
 */
export interface FenceCheck {
  name: string;
  fence: number;
  /**
   * Whether a valid lease carries this fence now; false once it expired (its
   * lock-delay included), was released, force-released or replaced.
   */
  current: boolean;
  /** True when current; otherwise whether another lease holds the name. */
  held: boolean;
  /**
   * When current, how long the lease with this fence stays valid; otherwise
   * how long the name's current lease does (0 when free).
   */
  expiresInMs: number;
}

/**
 * A fence check's answer, every field required: an answer without one (a
 * proxy's empty 200, say) is not the broker's, and must not read as "not
 * current" or "current". Returns undefined for such an answer.
 */
export function fenceCheckFromJson(a: Json): FenceCheck | undefined {
  const { name, fence, current, held } = a;
  const expiresInMs = a["expires_in_ms"];
  if (
    typeof name !== "string" ||
    typeof fence !== "number" ||
    typeof current !== "boolean" ||
    typeof held !== "boolean" ||
    typeof expiresInMs !== "number"
  ) {
    return undefined;
  }
  return { name, fence, current, held, expiresInMs };
}
