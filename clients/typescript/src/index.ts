/**
 * Client for lockbroker: locks as leases with a TTL and a fence number that
 * only grows, over HTTP with `fetch` (Node 20+ and browsers).
 *
 * ```ts
 * import { Client, LockBusy } from "lockbroker";
 *
 * const client = new Client("http://127.0.0.1:7700", { apiKey: undefined, timeoutMs: 10_000 });
 * const lease = await client.lock("nightly-report", { ttlMs: 30_000, waitMs: 10_000 });
 * await lease.run((signal) => runReport({ fence: lease.fence, signal }));
 * ```
 *
 * `client.acquireAll([...])` takes a lease on every lock named or on none;
 * `client.lockAll([...])` keeps them renewed, with one signal for the set.
 * `client.session()` opens a session whose one keepalive keeps every lease
 * taken under it.
 *
 * @module
 */

export {
  Client,
  DEFAULT_MAX_HOLD_MS,
  DEFAULT_TIMEOUT_MS,
  DEFAULT_TTL_MS,
  DEFAULT_URL,
  VERSION,
  type AcquireOptions,
  type ClientOptions,
  type LockOptions,
  type PermitOptions,
  type Renewal,
  type SemaphoreOptions,
} from "./client.js";
export { Lease } from "./lease.js";
export { LeaseSet, type AcquireAllOptions, type LockAllOptions, type LockAsk, type ReleaseResult } from "./multi.js";
export { DEFAULT_LEADER_MAX_HOLD_MS, Leader, type LeaderOptions } from "./leader.js";
export {
  Session,
  type OpenedSession,
  type SessionAcquireAllOptions,
  type SessionAcquireOptions,
  type SessionLeaseRef,
  type SessionOptions,
  type SessionPermitOptions,
  type SessionRenewal,
  type SessionStatus,
} from "./session.js";
export type { FenceCheck, Holder, LeaseMode, LockStatus, SemaphoreStatus } from "./status.js";
export type { LaggedEvent, LockEvent, LockStateEvent, StateCompleteEvent, WatchEvent } from "./sse.js";
export { DEFAULT_IDLE_TIMEOUT_MS, Watch, type WatchOptions } from "./watch.js";
export {
  AuthError,
  BrokerUnavailable,
  ERROR_CLASSES,
  InvalidRequest,
  LeaseLost,
  LimitConflict,
  LockBrokerError,
  LockBusy,
  MaxHoldExceeded,
  SessionFull,
  SessionLost,
  errorFromResponse,
  type ErrorInit,
} from "./errors.js";
