/** client.watch(): a lock's events in order, and a resume after the stream is cut. */

import assert from "node:assert/strict";
import { createServer, connect, type Server, type Socket } from "node:net";
import { test } from "node:test";

import { Client, type WatchEvent } from "lockbroker";
import { brokerForFile, lockName } from "./harness.js";

const { broker, client } = await brokerForFile();

/** Reads events from one iterator, each within `limitMs`. */
class Reader {
  readonly #it: AsyncIterator<WatchEvent>;
  constructor(events: AsyncIterable<WatchEvent>) {
    this.#it = events[Symbol.asyncIterator]();
  }
  async next(limitMs = 5000): Promise<WatchEvent> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<never>((_, fail) => {
      timer = setTimeout(() => fail(new Error(`no event within ${limitMs} ms`)), limitMs);
    });
    try {
      const step = await Promise.race([this.#it.next(), late]);
      assert.equal(step.done, false, "the watch ended");
      return step.value as WatchEvent;
    } finally {
      clearTimeout(timer);
    }
  }
}

/** A TCP proxy to the broker whose connections can be cut, as a flaky network would. */
class CuttingProxy {
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  connections = 0;
  constructor(target: URL) {
    this.#server = createServer((inbound) => {
      this.connections += 1;
      const outbound = connect(Number(target.port), target.hostname);
      for (const s of [inbound, outbound]) {
        this.#sockets.add(s);
        s.on("close", () => this.#sockets.delete(s));
        s.on("error", () => s.destroy());
      }
      inbound.pipe(outbound).pipe(inbound);
      inbound.on("close", () => outbound.destroy());
      outbound.on("close", () => inbound.destroy());
    });
  }
  listen(): Promise<string> {
    return new Promise((done) =>
      this.#server.listen(0, "127.0.0.1", () => {
        const address = this.#server.address();
        done(`http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`);
      }),
    );
  }
  cut(): void {
    for (const socket of this.#sockets) socket.destroy();
  }
  close(): Promise<void> {
    this.cut();
    return new Promise((done) => this.#server.close(() => done()));
  }
}

test("a watch gives the state, then each change in order", async () => {
  const name = lockName("watch-order");
  const watch = client.watch(name);
  try {
    const events = new Reader(watch);
    const state = await events.next();
    assert.equal(state.type, "state");
    assert.ok(state.type === "state" && !state.complete && state.status?.held === false);
    const lease = await client.acquire(name, { ttlMs: 5000, owner: "watched" });
    await lease.extend(6000);
    await lease.release();
    const seen: Array<[string, number, string | null]> = [];
    for (let i = 0; i < 3; i++) {
      const event = await events.next();
      assert.ok(event.type !== "state" && event.type !== "lagged", `unexpected ${event.type}`);
      seen.push([event.type, event.fence, event.owner]);
      assert.ok(event.id !== undefined);
    }
    assert.deepEqual(seen, [
      ["acquired", lease.fence, "watched"],
      ["extended", lease.fence, "watched"],
      ["released", lease.fence, "watched"],
    ]);
    assert.match(watch.lastEventId ?? "", /^[0-9]+$/);
  } finally {
    watch.close();
  }
  assert.equal(watch.closed, true);
});

test("a watch closed while its caller holds an event leaves no timer behind", async () => {
  const timers = (): number => process.getActiveResourcesInfo().filter((kind) => kind === "Timeout").length;
  const before = timers();
  const watch = client.watch(lockName("watch-close"), { idleTimeoutMs: 60_000 });
  const events = watch[Symbol.asyncIterator]();
  const state = await events.next();
  assert.equal(state.done, false);
  assert.ok(timers() > before, "the idle timer is armed while the stream is open");
  watch.close(); // the iterator is not resumed: its generator stays paused
  assert.equal(timers(), before, "closing disarms the idle timer");
});

test("a cut stream resumes after the last event, without a fresh state", async () => {
  const name = lockName("watch-resume");
  const proxy = new CuttingProxy(new URL(broker.url));
  const via = new Client(await proxy.listen(), { timeoutMs: 5000 });
  const watch = via.watch(name);
  try {
    const events = new Reader(watch);
    assert.equal((await events.next()).type, "state");
    const lease = await client.acquire(name, { ttlMs: 5000 });
    const acquired = await events.next();
    assert.equal(acquired.type, "acquired");
    const idBeforeCut = watch.lastEventId;
    proxy.cut();
    await lease.release(); // while the watch is cut off
    const resumed = await events.next(10_000);
    assert.ok(proxy.connections >= 2, "the watch did not connect again");
    // A resume goes on with what was missed; a watch that forgot its place gets a fresh state.
    assert.deepEqual([resumed.type, resumed.type !== "state" && resumed.type !== "lagged" ? resumed.fence : 0], ["released", lease.fence]);
    assert.ok(Number(watch.lastEventId) > Number(idBeforeCut));
  } finally {
    watch.close();
    await proxy.close();
  }
});

test("a watch resumes after the id a previous watch saw", async () => {
  const name = lockName("watch-last-id");
  const first = client.watch(name);
  const events = new Reader(first);
  await events.next();
  const lease = await client.acquire(name, { ttlMs: 5000 });
  await events.next(); // acquired
  first.close();
  await lease.release();
  const second = client.watch(name, { lastEventId: first.lastEventId! });
  try {
    const next = await new Reader(second).next();
    assert.equal(next.type, "released");
  } finally {
    second.close();
  }
});

test("a prefix watch lists the held locks, then the changes under the prefix", async () => {
  const prefix = `${lockName("prefix")}:`;
  const held = await client.acquire(`${prefix}a`, { ttlMs: 5000 });
  const watch = client.watchPrefix(prefix);
  try {
    const events = new Reader(watch);
    const state = await events.next();
    assert.ok(state.type === "state" && !state.complete && state.status?.name === `${prefix}a`);
    const marker = await events.next();
    assert.ok(marker.type === "state" && marker.complete && marker.prefix === prefix);
    const other = await client.acquire(`${prefix}b`, { ttlMs: 5000 });
    await client.acquire(`x${prefix}`, { ttlMs: 5000 }); // not under the prefix
    const change = await events.next();
    assert.ok(change.type === "acquired" && change.name === `${prefix}b`);
    await other.release();
  } finally {
    watch.close();
    await held.release();
  }
});

test("a semaphore watch gives the semaphore's state and its permits' changes", async () => {
  const name = lockName("watch-semaphore");
  const watch = client.watchSemaphore(name);
  try {
    const events = new Reader(watch);
    const state = await events.next();
    assert.ok(state.type === "state" && !state.complete && state.semaphore !== undefined && state.status === undefined);
    const permit = await client.acquirePermit(name, 2, { ttlMs: 5000 });
    const change = await events.next();
    assert.ok(change.type === "acquired" && change.mode === "permit" && change.fence === permit.fence);
    await permit.release();
  } finally {
    watch.close();
  }
});
