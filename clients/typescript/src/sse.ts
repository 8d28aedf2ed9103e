/**
 * An incremental `text/event-stream` parser, as the HTML standard defines it,
 * and the typed events of the broker's streams built from its messages.
 */

import {
  lockStatusFromJson,
  semaphoreStatusFromJson,
  type LeaseMode,
  type LockStatus,
  type SemaphoreStatus,
} from "./status.js";

/** The longest line or message a stream may send before it is treated as broken. */
const MAX_EVENT_CHARS = 1024 * 1024;

/** One dispatched message: its `event` type, `data`, and the id buffer after it. */
export interface SseMessage {
  event: string;
  data: string;
  /** The message's own `id:`, if it had one. */
  id: string | undefined;
  /** The last event id once this message is dispatched. */
  lastEventId: string;
}

/**
 * Takes the body as text in pieces of any size (a piece may end inside a line
 * or between the `\r` and `\n` of one) and returns the messages each piece
 * completed. Comment lines (keep-alives) are ignored, `id` persists across
 * messages, `retry` is kept.
 */
export class SseParser {
  lastEventId: string;
  retry: number | undefined;
  #buffer = "";
  #afterCr = false;
  #atStart = true;
  #event = "";
  #data: string[] = [];
  #size = 0;
  #id: string | undefined;

  constructor(lastEventId = "") {
    this.lastEventId = lastEventId;
  }

  feed(piece: string): SseMessage[] {
    const out: SseMessage[] = [];
    if (this.#afterCr && piece.startsWith("\n")) piece = piece.slice(1);
    this.#afterCr = false;
    let buffer = this.#buffer + piece;
    if (this.#atStart && buffer.length > 0) {
      this.#atStart = false;
      if (buffer.charCodeAt(0) === 0xfeff) buffer = buffer.slice(1);
    }
    const eol = /\r\n|\r|\n/g;
    let start = 0;
    for (let match = eol.exec(buffer); match; match = eol.exec(buffer)) {
      if (match[0] === "\r" && eol.lastIndex === buffer.length) this.#afterCr = true;
      this.#line(buffer.slice(start, match.index), out);
      start = eol.lastIndex;
    }
    this.#buffer = buffer.slice(start);
    if (this.#buffer.length > MAX_EVENT_CHARS) throw new Error(`an event-stream line longer than ${MAX_EVENT_CHARS} characters`);
    return out;
  }

  #line(line: string, out: SseMessage[]): void {
    if (line === "") return this.#dispatch(out);
    if (line.startsWith(":")) return; // a comment: the keep-alive
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.#event = value;
    else if (field === "data") {
      this.#size += value.length + 1;
      if (this.#size > MAX_EVENT_CHARS) throw new Error(`an event-stream message longer than ${MAX_EVENT_CHARS} characters`);
      this.#data.push(value);
    } else if (field === "id") {
      if (!value.includes("\0")) this.lastEventId = this.#id = value;
    } else if (field === "retry") {
      if (/^[0-9]+$/.test(value)) this.retry = Number(value);
    }
  }

  #dispatch(out: SseMessage[]): void {
    if (this.#data.length > 0) {
      out.push({ event: this.#event || "message", data: this.#data.join("\n"), id: this.#id, lastEventId: this.lastEventId });
    }
    this.#event = "";
    this.#data = [];
    this.#size = 0;
    this.#id = undefined;
  }
}

/** The change event types, one per lease for shared leases and permits. */
export const CHANGE_TYPES = ["acquired", "extended", "released", "expired", "force_released"] as const;

/** One change to a lease of a lock (or a semaphore's permit). Never a token. */
export interface LockEvent {
  type: (typeof CHANGE_TYPES)[number];
  name: string;
  mode: LeaseMode;
  /** The lease's fence: a leader's term. */
  fence: number;
  owner: string | null;
  /** How long the lease had left when the event was sent (0 once it ended). */
  expiresInMs: number;
  /** The lease's expiry in Unix milliseconds of the Redis clock, if known. */
  expiresAtMs: number | undefined;
  /** The event's id (ids grow with every event of one broker). */
  id: number | undefined;
}

/** A `state` event: the lock's status as the stream starts (or starts again after `lagged`). */
export interface LockStateEvent {
  type: "state";
  complete?: undefined;
  /** The lock's status (`semaphore` is set instead on a semaphore's stream). */
  status: LockStatus | undefined;
  semaphore: SemaphoreStatus | undefined;
  id: number | undefined;
}

/** The `state` marker that ends a prefix stream's snapshot of the held locks. */
export interface StateCompleteEvent {
  type: "state";
  complete: true;
  prefix: string;
  id: number | undefined;
}

/** The watcher fell behind: `missed` events were dropped, and a fresh `state` follows. */
export interface LaggedEvent {
  type: "lagged";
  missed: number;
  id: number | undefined;
}

/** What iterating a {@link Watch} yields. */
export type WatchEvent = LockEvent | LockStateEvent | StateCompleteEvent | LaggedEvent;

/** An event id as a number (ids compare as numbers), undefined if it is none. */
export function numericId(value: string | undefined): number | undefined {
  return value && /^[0-9]+$/.test(value) ? Number(value) : undefined;
}

/** The typed event of a message; undefined for a type this client does not know (a newer broker's) or unreadable data. */
export function eventFromMessage(message: SseMessage): WatchEvent | undefined {
  const id = numericId(message.id);
  let data: Record<string, unknown>;
  try {
    const parsed: unknown = JSON.parse(message.data);
    if (parsed === null || typeof parsed !== "object") return undefined;
    data = parsed as Record<string, unknown>;
  } catch {
    return undefined;
  }
  const kind = message.event;
  if (kind === "state") {
    if (data["complete"] && "prefix" in data) return { type: "state", complete: true, prefix: String(data["prefix"]), id };
    const isSemaphore = "limit" in data;
    return {
      type: "state",
      status: isSemaphore ? undefined : lockStatusFromJson(data),
      semaphore: isSemaphore ? semaphoreStatusFromJson(data) : undefined,
      id,
    };
  }
  if ((CHANGE_TYPES as readonly string[]).includes(kind)) {
    if (typeof data["fence"] !== "number") return undefined;
    return {
      type: kind as LockEvent["type"],
      name: data["name"] as string,
      mode: (data["mode"] as LeaseMode | undefined) || "exclusive",
      fence: data["fence"],
      owner: (data["owner"] as string | null) ?? null,
      expiresInMs: (data["expires_in_ms"] as number | undefined) ?? 0,
      expiresAtMs: data["expires_at_ms"] as number | undefined,
      id,
    };
  }
  if (kind === "lagged") return { type: "lagged", missed: Number(data["missed"] ?? 0), id };
  return undefined;
}
