/** The single calls and their errors, against a real broker. */

import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { createServer as createTcpServer } from "node:net";
import { test } from "node:test";

import { BrokerUnavailable, Client, InvalidRequest, LeaseLost, LockBrokerError, LockBusy } from "lockbroker";
import { brokerForFile, freePort, lockName, sleep } from "./harness.js";

const { servers, broker, client } = await brokerForFile();

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => assert.fail("expected a rejection"),
    (error: unknown) => error,
  );
}

test("a second acquirer gets LockBusy with the holder", async () => {
  const name = lockName("busy");
  const lease = await client.acquire(name, { ttlMs: 5000, owner: "first" });
  try {
    const busy = await rejection(client.acquire(name, { ttlMs: 5000, owner: "second" }));
    assert.ok(busy instanceof LockBusy && busy instanceof LockBrokerError);
    assert.deepEqual([busy.status, busy.code, busy.owner, busy.fence], [423, "lock_busy", "first", lease.fence]);
    assert.ok(busy.availableInMs! > 0 && busy.availableInMs! <= 5000);
    assert.ok(busy.expiresInMs! > 0);
    assert.ok(busy.retryAfterMs! >= 1000);
  } finally {
    await lease.release();
  }
});

test("wait gets the lock once the holder releases", async () => {
  const name = lockName("wait");
  const first = await client.acquire(name, { ttlMs: 10_000 });
  setTimeout(() => void first.release(), 500);
  const started = performance.now();
  const second = await client.acquire(name, { ttlMs: 5000, waitMs: 5000 });
  const waited = performance.now() - started;
  assert.ok(waited > 300 && waited < 4000, `waited ${waited} ms`);
  assert.ok(second.fence > first.fence);
  await second.release();
});

test("wait gives up with LockBusy at its deadline", async () => {
  const name = lockName("wait-busy");
  const holder = await client.acquire(name, { ttlMs: 10_000 });
  const started = performance.now();
  await assert.rejects(client.acquire(name, { ttlMs: 5000, waitMs: 600 }), LockBusy);
  const waited = performance.now() - started;
  assert.ok(waited > 500 && waited < 3000, `gave up after ${waited} ms`);
  await holder.release();
});

test("an abort signal ends a wait", async () => {
  const name = lockName("abort");
  const holder = await client.acquire(name, { ttlMs: 10_000 });
  const started = performance.now();
  const error = await rejection(client.acquire(name, { waitMs: 10_000, signal: AbortSignal.timeout(300) }));
  assert.equal((error as Error).name, "TimeoutError");
  assert.ok(performance.now() - started < 2000);
  await holder.release();
});

test("extend replaces the remaining TTL", async () => {
  const name = lockName("extend");
  const lease = await client.acquire(name, { ttlMs: 1000 });
  const renewal = await client.extend(name, lease.token, 4000);
  assert.equal(renewal.fence, lease.fence);
  assert.equal(renewal.ttlMs, 4000);
  assert.ok((await client.status(name)).expiresInMs > 2000);
  assert.equal(await client.release(name, lease.token), lease.fence);
});

test("release after expiry is LeaseLost", async () => {
  const name = lockName("expired");
  const lease = await client.acquire(name, { ttlMs: 300 });
  await new Promise((done) => lease.signal.addEventListener("abort", done, { once: true }));
  await sleep(200);
  const lost = await rejection(lease.release());
  assert.ok(lost instanceof LeaseLost);
  assert.equal(lost.status, 409);
  assert.match(lost.message, /duplicated/);
  assert.equal(lease.lost, true);
});

test("lock-delay keeps an expired lock unavailable", async () => {
  const name = lockName("lock-delay");
  await client.acquire(name, { ttlMs: 200, lockDelayMs: 1000 });
  await sleep(400); // expired, not released
  const status = await client.status(name);
  assert.equal(status.held, false);
  assert.ok(status.availableInMs > 300 && status.availableInMs <= 1000);
  await assert.rejects(client.acquire(name, { ttlMs: 1000 }), LockBusy);
  const lease = await client.acquire(name, { ttlMs: 1000, waitMs: 2000 });
  await lease.release();
});

test("the same requestId returns the same lease", async () => {
  const name = lockName("request-id");
  const first = await client.acquire(name, { ttlMs: 5000, requestId: "job-42", owner: "worker-1" });
  const again = await client.acquire(name, { ttlMs: 5000, requestId: "job-42", owner: "worker-1" });
  assert.equal(again.fence, first.fence);
  assert.equal(again.token, first.token);
  await first.release();
});

/**
 * A proxy to the broker that lets the broker grant the first acquire, then
 * closes the connection without answering, as a network failure would.
 */
async function dropFirstAcquire(target: string): Promise<{ server: Server; url: string; ids: string[]; dropped: number[] }> {
  const state = { ids: [] as string[], dropped: [] as number[] };
  const server = createServer(async (request, response) => {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks).toString();
    const forwarded = await fetch(target + request.url, {
      method: request.method ?? "GET",
      headers: { "content-type": "application/json" },
      body: request.method === "GET" ? null : body,
    });
    const answer = await forwarded.text();
    if (request.url?.endsWith("/acquire")) {
      state.ids.push((JSON.parse(body) as { request_id: string }).request_id);
      if (state.ids.length === 1) {
        state.dropped.push((JSON.parse(answer) as { fence: number }).fence);
        request.socket.destroy();
        return;
      }
    }
    response.writeHead(forwarded.status, { "content-type": "application/json" });
    response.end(answer);
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return { server, url: `http://127.0.0.1:${port}`, ...state };
}

test("an acquire retried after a lost answer gets the same lease", async () => {
  const proxy = await dropFirstAcquire(broker.url);
  try {
    const c = new Client(proxy.url, { timeoutMs: 5000 });
    const lease = await c.acquire(lockName("lost-answer"), { ttlMs: 5000, waitMs: 3000 });
    assert.ok(proxy.ids.length >= 2, `${proxy.ids.length} acquires`);
    assert.ok(proxy.ids[0]);
    assert.equal(proxy.ids[1], proxy.ids[0], "the retry must carry the first request_id");
    assert.equal(lease.fence, proxy.dropped[0], "the retry got another lease than the dropped grant");
    await lease.release();
  } finally {
    proxy.server.close();
  }
});

test("an unreachable broker is BrokerUnavailable", async () => {
  const port = await freePort();
  const c = new Client(`http://127.0.0.1:${port}`, { timeoutMs: 1000 });
  const down = await rejection(c.acquire(lockName("down"), { ttlMs: 5000 }));
  assert.ok(down instanceof BrokerUnavailable);
  assert.equal(down.code, "transport");
  assert.equal(down.status, undefined);
  assert.ok(down.cause);
  const started = performance.now();
  await assert.rejects(c.acquire(lockName("down"), { ttlMs: 5000, waitMs: 800 }), BrokerUnavailable);
  assert.ok(performance.now() - started >= 700, "retried until the wait runs out");
});

test("a broker that does not answer in time is BrokerUnavailable", async () => {
  const silent = createTcpServer(() => {}); // accepts, never answers
  await new Promise<void>((done) => silent.listen(0, "127.0.0.1", done));
  const address = silent.address();
  const port = typeof address === "object" && address ? address.port : 0;
  try {
    const c = new Client(`http://127.0.0.1:${port}`, { timeoutMs: 300 });
    const down = await rejection(c.status("x"));
    assert.ok(down instanceof BrokerUnavailable);
    assert.match(down.message, /timed out/);
  } finally {
    silent.close();
  }
});

test("Redis down is BrokerUnavailable with Retry-After", async () => {
  const ownRedis = await servers.redis();
  const own = await servers.broker(ownRedis);
  const c = new Client(own.url, { timeoutMs: 5000 });
  await ownRedis.stop();
  const down = await rejection(c.acquire(lockName("redis-down"), { ttlMs: 5000 }));
  assert.ok(down instanceof BrokerUnavailable);
  assert.deepEqual([down.status, down.code, down.retryAfterMs], [503, "backend_unavailable", 1000]);
});

test("bad input is InvalidRequest naming the field", async () => {
  const badName = await rejection(client.acquire("no spaces allowed", {}));
  assert.ok(badName instanceof InvalidRequest);
  assert.deepEqual([badName.status, badName.field], [400, "name"]);
  const badTtl = await rejection(client.acquire(lockName("bad-ttl"), { ttlMs: 10 * 86_400_000 }));
  assert.ok(badTtl instanceof InvalidRequest);
  assert.equal(badTtl.field, "ttl_ms");
});

test("fair acquires", async () => {
  const name = lockName("fair");
  const first = await client.acquire(name, { ttlMs: 5000, fair: true });
  setTimeout(() => void first.release(), 300);
  const lease = await client.lock(name, { ttlMs: 5000, waitMs: 3000, fair: true });
  assert.ok(lease.fence > first.fence);
  await lease.release();
});
