/**
 * The errors this package throws, and the one table from broker answers to them.
 *
 * Every error the broker sends has the shape `{"error": {"code", "message"}}`;
 * {@link errorFromResponse} turns one into the matching class. Transport
 * failures (refused, reset, timed out) become {@link BrokerUnavailable}.
 */

import { holdersFromJson, type Holder } from "./status.js";

/** What {@link LockBrokerError} is built from. */
export interface ErrorInit {
  /** The broker's stable error code, `"transport"` when no answer came back. */
  code: string;
  /** The HTTP status; undefined without an answer. */
  status?: number | undefined;
  /** The rest of the broker's error object (holder details, field, ...). */
  details?: Record<string, unknown>;
  /** The `Retry-After` header, in milliseconds. */
  retryAfterMs?: number | undefined;
  /** The underlying failure (a network error, for `"transport"`). */
  cause?: unknown;
}

/**
 * Base of every error this package throws. `code` is the broker's error code,
 * `status` the HTTP status, `retryAfterMs` the `Retry-After` header.
 * The message never contains a token.
 */
export class LockBrokerError extends Error {
  readonly code: string;
  readonly status: number | undefined;
  readonly details: Record<string, unknown>;
  readonly retryAfterMs: number | undefined;

  constructor(message: string, init: ErrorInit) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = init.code;
    this.status = init.status;
    this.details = { ...(init.details ?? {}) };
    this.retryAfterMs = init.retryAfterMs;
  }
}

/**
 * 423 `lock_busy`: another lease (or its lock-delay) holds the lock, or every
 * permit of the semaphore is taken, also after waiting. `owner` and `fence`
 * describe the lease whose end lets a retry succeed first; `holders` lists
 * every lease in the way.
 */
export class LockBusy extends LockBrokerError {
  /** Every lease (or permit) in the way, at most 100. */
  get holders(): Holder[] {
    return holdersFromJson(this.details["holders"]);
  }
  /** The semaphore's limit (undefined for a lock). */
  get limit(): number | undefined {
    return numberOr(this.details["limit"]);
  }
  /** The holder's owner label, if it gave one. */
  get owner(): string | undefined {
    return stringOr(this.details["owner"]);
  }
  /** The holder's fence. */
  get fence(): number | undefined {
    return numberOr(this.details["fence"]);
  }
  /** How long the holder's lease stays valid unless renewed, in ms. */
  get expiresInMs(): number | undefined {
    return numberOr(this.details["expires_in_ms"]);
  }
  /** How long until the lock can be granted at the earliest (expiry plus lock-delay), in ms. */
  get availableInMs(): number | undefined {
    return numberOr(this.details["available_in_ms"]);
  }
  /** The busy lock of an `acquireAll` (undefined for a single acquire, which names its one lock itself). */
  get lock(): string | undefined {
    return stringOr(this.details["lock"]);
  }
}

/**
 * 409 `lease_lost`, or a lease this client stopped trusting: the lease expired
 * or was taken, another holder may already have run, so treat the work done
 * under it as possibly duplicated.
 */
export class LeaseLost extends LockBrokerError {
  /** The API key id of the operator who force-released the lease, when the broker says. */
  get forceReleasedBy(): string | undefined {
    return stringOr(this.details["force_released_by"]);
  }
  /**
   * `"lease_lost"` when the broker said so, `"expired"` when the lease ran out
   * without a renewal, `"session_lost"` (a {@link SessionLost}) when the
   * session it was held under ended.
   */
  get reason(): string {
    return stringOr(this.details["reason"]) ?? "lease_lost";
  }
}

/**
 * 409 `session_lost`: the session is not open (it expired, was closed, or the
 * token is not its), or a session helper saw it run out (no keepalive
 * succeeded before its TTL passed by the local clock). Every lease under it
 * is lost with it, with this as its reason: treat the work done under them as
 * possibly duplicated, and open a new session to go on. A {@link LeaseLost},
 * so code that handles a lost lease handles this one too.
 */
export class SessionLost extends LeaseLost {
  /** Always `"session_lost"`. */
  override get reason(): string {
    return "session_lost";
  }
}

/**
 * 409 `session_full`: the session holds as many leases as the broker lets one
 * hold (`locks.max_leases_per_session`). Nothing was granted; release some, or
 * take more under another session.
 */
export class SessionFull extends LockBrokerError {}

/** 409 `max_hold_exceeded`: the broker will not extend the lease further. */
export class MaxHoldExceeded extends LockBrokerError {
  /** How long the lease stays valid as it is, in ms. */
  get expiresInMs(): number | undefined {
    return numberOr(this.details["expires_in_ms"]);
  }
}

/**
 * 409 `limit_conflict`: a semaphore's permits are held under another limit
 * than the one asked for; retrying with the same limit fails the same way.
 */
export class LimitConflict extends LockBrokerError {
  /** The limit in force. */
  get limit(): number | undefined {
    return numberOr(this.details["limit"]);
  }
}

/**
 * Nothing was done and retrying later is safe: the broker could not be reached
 * (`code` `"transport"`), or answered `backend_unavailable`, `shutting_down`,
 * `overloaded`, `too_many_waiters`, `too_many_sessions`, `too_many_streams`, `rate_limited`,
 * `request_timeout`, `internal` or another 5xx. `retryAfterMs` carries the broker's `Retry-After`.
 */
export class BrokerUnavailable extends LockBrokerError {}

/**
 * The broker refused the request itself (`invalid_request`, `payload_too_large`,
 * `unsupported_media_type`, `uri_too_long`, `headers_too_large`, `not_found`, `method_not_allowed`);
 * `field` names the offending field when the broker said.
 */
export class InvalidRequest extends LockBrokerError {
  get field(): string | undefined {
    return stringOr(this.details["field"]);
  }
}

/** 401 `unauthorized` (no API key, or an unknown one) or 403 `forbidden`. */
export class AuthError extends LockBrokerError {}

type ErrorClass = new (message: string, init: ErrorInit) => LockBrokerError;

/** The one table from error code to error class. */
export const ERROR_CLASSES: Readonly<Record<string, ErrorClass>> = {
  lock_busy: LockBusy,
  lease_lost: LeaseLost,
  session_lost: SessionLost,
  session_full: SessionFull,
  max_hold_exceeded: MaxHoldExceeded,
  limit_conflict: LimitConflict,
  backend_unavailable: BrokerUnavailable,
  shutting_down: BrokerUnavailable,
  overloaded: BrokerUnavailable,
  too_many_waiters: BrokerUnavailable,
  too_many_sessions: BrokerUnavailable,
  too_many_streams: BrokerUnavailable,
  contended: BrokerUnavailable,
  rate_limited: BrokerUnavailable,
  request_timeout: BrokerUnavailable,
  internal: BrokerUnavailable,
  invalid_request: InvalidRequest,
  payload_too_large: InvalidRequest,
  unsupported_media_type: InvalidRequest,
  uri_too_long: InvalidRequest,
  headers_too_large: InvalidRequest,
  not_found: InvalidRequest,
  method_not_allowed: InvalidRequest,
  unauthorized: AuthError,
  forbidden: AuthError,
};

/** Answers without a known code (a proxy's HTML 502, say) are typed by status. */
const BY_STATUS: Readonly<Record<number, ErrorClass>> = {
  400: InvalidRequest,
  401: AuthError,
  403: AuthError,
  404: InvalidRequest,
  405: InvalidRequest,
  408: BrokerUnavailable,
  413: InvalidRequest,
  414: InvalidRequest,
  415: InvalidRequest,
  423: LockBusy,
  429: BrokerUnavailable,
  431: InvalidRequest,
};

/** The error of an error object inside a 2xx answer (one lease's result in a release-all), by its `code`. */
export function errorFromDetail(error: Record<string, unknown>): LockBrokerError {
  const detail = { ...error };
  const code = stringOr(detail["code"]) || "error";
  const message = stringOr(detail["message"]) || `the broker answered ${code}`;
  delete detail["code"];
  delete detail["message"];
  return new (ERROR_CLASSES[code] ?? LockBrokerError)(message, { code, details: detail });
}

/** The error for a non-2xx answer: by its `code`, else by its status. */
export function errorFromResponse(status: number, body: unknown, retryAfter: string | null): LockBrokerError {
  const error = (body as { error?: unknown } | null)?.error;
  const detail: Record<string, unknown> =
    error !== null && typeof error === "object" ? { ...(error as Record<string, unknown>) } : {};
  const code = stringOr(detail["code"]) || `http_${status}`;
  const message = stringOr(detail["message"]) || `the broker answered HTTP ${status}`;
  delete detail["code"];
  delete detail["message"];
  const cls = ERROR_CLASSES[code] ?? BY_STATUS[status] ?? (status >= 500 ? BrokerUnavailable : LockBrokerError);
  return new cls(message, { code, status, details: detail, retryAfterMs: parseRetryAfter(retryAfter) });
}

function parseRetryAfter(value: string | null): number | undefined {
  if (value === null) return undefined;
  const seconds = Number(value.trim());
  // An HTTP date is rare from a broker, and not worth a parser.
  return Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : undefined;
}

function stringOr(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}

function numberOr(value: unknown): number | undefined {
  return typeof value === "number" ? value : undefined;
}
