/** The small helpers every module shares: paths, durations, request ids, the default owner. */

import { BrokerUnavailable } from "./errors.js";

/** Which resource a lease belongs to: a lock's lease or a semaphore's permit. */
export type Kind = "locks" | "semaphores";

/** `/v1/{kind}/{name}[/action]` with the name percent-encoded. */
export function resourcePath(kind: Kind, name: string, action?: string): string {
  if (typeof name !== "string" || name === "") throw new TypeError("the lock name must be a non-empty string");
  const path = `/v1/${kind}/${encodeURIComponent(name)}`;
  return action ? `${path}/${action}` : path;
}

/** `/v1/locks/{name}[/action]` with the name percent-encoded. */
export function lockPath(name: string, action?: string): string {
  return resourcePath("locks", name, action);
}

/**
 * `/v1/{kind}/{name}/fence/{fence}`. Only a whole number goes into the path;
 * whether it is a valid fence (1 to 2^53 - 1) is the broker's to say, with
 * `InvalidRequest` naming the field `fence`.
 */
export function fencePath(kind: Kind, name: string, fence: number): string {
  if (typeof fence !== "number" || !Number.isInteger(fence)) {
    throw new TypeError(`the fence must be a whole number, not ${String(fence)}`);
  }
  // BigInt prints every whole number as digits (String(1e21) would not).
  return resourcePath(kind, name, `fence/${BigInt(fence).toString()}`);
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
export function wireMillis(ms: number): number {
  return Math.max(1, Math.round(ms));
}

/** Resolves after `ms`, or rejects with the signal's reason once it aborts. */
export function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
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

export function nodeProcess(): NodeProcess | undefined {
  const candidate = (globalThis as { process?: NodeProcess }).process;
  return candidate?.versions?.node ? candidate : undefined;
}

let ownerCache: string | undefined;

/** `host:pid` on Node, so a `lock_busy` answer says who holds the lock; `browser` elsewhere. */
export async function defaultOwner(): Promise<string> {
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

/** A semaphore's limit: a whole number of permits, at least 1. */
export function permitLimit(limit: number): number {
  if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`limit must be a whole number >= 1, not ${String(limit)}`);
  return limit;
}

/** Whether a failed fetch met a connection closed under it (safe to send again once). */
export function isReset(error: unknown): boolean {
  if (!(error instanceof BrokerUnavailable) || error.code !== "transport") return false;
  const cause = (error.cause as { cause?: { code?: string } } | undefined)?.cause;
  return ["ECONNRESET", "EPIPE", "UND_ERR_SOCKET"].includes(cause?.code ?? "");
}

export function describe(error: unknown): string {
  const cause = (error as { cause?: unknown } | null)?.cause;
  const inner = cause instanceof Error ? `: ${cause.message}` : "";
  return error instanceof Error ? `${error.message}${inner}` : String(error);
}
