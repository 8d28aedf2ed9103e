/**
 * A watch: a lock's, a semaphore's or a prefix's event stream as an async
 * iterator that reconnects on its own, resuming with `Last-Event-ID`.
 */

import type { Client } from "./client.js";
import { BrokerUnavailable, LockBrokerError } from "./errors.js";
import { SseParser, eventFromMessage, numericId, type WatchEvent } from "./sse.js";
import { duration, resourcePath, sleep, type Kind } from "./util.js";

/** A stream silent this long is treated as cut (the broker sends a keep-alive every 15 s). */
export const DEFAULT_IDLE_TIMEOUT_MS = 45_000;
/** The first pause before reconnecting; they double up to {@link RECONNECT_LONGEST_MS}. */
const RECONNECT_FIRST_MS = 250;
const RECONNECT_LONGEST_MS = 15_000;

/** The optional arguments of {@link Client.watch}. */
export interface WatchOptions {
  /** Resume after this event id (a previous watch's {@link Watch.lastEventId}). */
  lastEventId?: string;
  /** How long a silent stream is trusted before it is opened again; {@link DEFAULT_IDLE_TIMEOUT_MS} by default. */
  idleTimeoutMs?: number;
  /** Ends the watch, as {@link Watch.close} does. */
  signal?: AbortSignal;
}

/** `/v1/{kind}/{name}/events`. */
export function eventsPath(kind: Kind, name: string): string {
  return resourcePath(kind, name, "events");
}

/** `/v1/events?prefix=...` (an empty prefix watches every lock). */
export function prefixEventsPath(prefix: string): string {
  if (typeof prefix !== "string") throw new TypeError("the prefix must be a string");
  return `/v1/events?prefix=${encodeURIComponent(prefix)}`;
}

/**
 * The events of one stream, in the order the changes were made:
 *
 * ```ts
 * for await (const event of client.watch("scheduler")) {
 *   if (event.type === "acquired") console.log(event.owner, event.fence);
 * }
 * ```
 *
 * A `state` comes first; then one {@link LockEvent} per change, and `lagged`
 * (followed by a fresh `state`) when this reader fell behind. A connection
 * that drops, or stays silent for `idleTimeoutMs`, is opened again after
 * growing pauses with the last event's id, so the broker resumes after it;
 * events a resume repeats are left out. Iterating ends when the watch is
 * closed (`close()`, the signal, or `break`), or with an error retrying cannot
 * fix (`AuthError`, `InvalidRequest`).
 */
export class Watch implements AsyncIterable<WatchEvent> {
  readonly path: string;
  readonly idleTimeoutMs: number;
  readonly #client: Client;
  readonly #closer = new AbortController();
  #lastId: string;
  #started = false;

  /** @internal */
  constructor(client: Client, path: string, options: WatchOptions) {
    this.#client = client;
    this.path = path;
    this.idleTimeoutMs = duration(options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS, "idleTimeoutMs", false);
    this.#lastId = options.lastEventId ?? "";
    const signal = options.signal;
    if (signal?.aborted) this.close();
    else signal?.addEventListener("abort", () => this.close(), { once: true });
  }

  /** The id of the last event received (or resumed after), undefined before any. */
  get lastEventId(): string | undefined {
    return this.#lastId || undefined;
  }

  /** Whether the watch is closed. */
  get closed(): boolean {
    return this.#closer.signal.aborted;
  }

  /** Ends the watch: the stream is closed and iterating ends. */
  close(): void {
    if (!this.#closer.signal.aborted) this.#closer.abort(new LockBrokerError("the watch was closed", { code: "closed" }));
  }

  [Symbol.asyncIterator](): AsyncIterator<WatchEvent> {
    if (this.#started) throw new TypeError("a watch is iterated once");
    this.#started = true;
    return this.#events();
  }

  async *#events(): AsyncGenerator<WatchEvent> {
    let step = 0;
    let first = RECONNECT_FIRST_MS;
    try {
      while (!this.closed) {
        let delivered = false;
        let retryAfterMs: number | undefined;
        try {
          for await (const event of this.#connection()) {
            delivered = true;
            yield event;
          }
        } catch (error) {
          if (this.closed) return;
          if (!(error instanceof BrokerUnavailable)) throw error; // a refusal: opening again cannot help
          retryAfterMs = error.retryAfterMs;
        }
        if (delivered) step = 0;
        const ceiling = Math.min(RECONNECT_LONGEST_MS, first * 2 ** Math.min(step++, 30));
        first = this.#retry ?? first;
        const pause = Math.max(ceiling * (0.5 + Math.random() / 2), retryAfterMs ?? 0);
        await sleep(pause, this.#closer.signal).catch(() => undefined);
      }
    } finally {
      this.close();
    }
  }

  #retry: number | undefined;

  /** One connection: its events, duplicates of a resume left out; ends when the stream does. */
  async *#connection(): AsyncGenerator<WatchEvent> {
    const headers: Record<string, string> = { accept: "text/event-stream", "cache-control": "no-cache" };
    if (this.#lastId) headers["last-event-id"] = this.#lastId;
    // Until a `state` (a fresh start) arrives, an id not above this one is a repeat.
    let resumeAfter = numericId(this.#lastId);
    const connection = new AbortController();
    let idle: ReturnType<typeof setTimeout> | undefined;
    // A watch closed while its caller holds an event (this generator paused
    // at `yield`, its finally not run) must not keep the idle timer armed:
    // it would hold the process open for up to idleTimeoutMs.
    const onClose = (): void => {
      if (idle !== undefined) clearTimeout(idle);
      connection.abort(this.#closer.signal.reason);
    };
    this.#closer.signal.addEventListener("abort", onClose, { once: true });
    const touch = (): void => {
      if (idle !== undefined) clearTimeout(idle);
      idle = setTimeout(() => connection.abort(new Error("idle")), this.idleTimeoutMs);
    };
    try {
      touch();
      const response = await this.#client._openStream(this.path, headers, connection.signal);
      const body = response.body;
      if (!body) return;
      const parser = new SseParser(this.#lastId);
      const decoder = new TextDecoder();
      const reader = body.getReader();
      try {
        for (;;) {
          let chunk: ReadableStreamReadResult<Uint8Array>;
          try {
            chunk = await reader.read();
          } catch (error) {
            if (this.closed) return;
            throw new BrokerUnavailable(`the event stream ${this.path} was cut`, { code: "transport", cause: error });
          }
          if (chunk.done) return; // the broker ended the stream (shutting down): open it again
          touch();
          for (const message of parser.feed(decoder.decode(chunk.value, { stream: true }))) {
            const event = eventFromMessage(message);
            const id = numericId(message.id);
            if (event?.type === "state") resumeAfter = undefined;
            else if (resumeAfter !== undefined && id !== undefined && id <= resumeAfter) continue;
            this.#lastId = message.lastEventId;
            if (event) yield event;
          }
          this.#retry = parser.retry;
        }
      } finally {
        reader.cancel().catch(() => undefined);
      }
    } finally {
      if (idle !== undefined) clearTimeout(idle);
      this.#closer.signal.removeEventListener("abort", onClose);
      connection.abort();
    }
  }
}
