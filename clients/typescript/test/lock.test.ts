/** client.lock(): the managed lease, its renewer and its signal, against a real broker. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, LeaseLost, LockBusy, MaxHoldExceeded } from "lockbroker";
import { brokerForFile, forceRelease, lockName, sleep } from "./harness.js";

const { servers, redis, broker, client } = await brokerForFile();

/** Resolves with the time it took `signal` to abort, or rejects after `limitMs`. */
function aborted(signal: AbortSignal, limitMs: number): Promise<number> {
  const started = performance.now();
  return new Promise((done, fail) => {
    const timer = setTimeout(() => fail(new Error(`the signal did not abort within ${limitMs} ms`)), limitMs);
    const finish = (): void => {
      clearTimeout(timer);
      done(performance.now() - started);
    };
    if (signal.aborted) finish();
    else signal.addEventListener("abort", finish, { once: true });
  });
}

test("lock holds the lock until released", async () => {
  const name = lockName("holds");
  const lease = await client.lock(name, { ttlMs: 5000, owner: "report-job" });
  assert.ok(lease.fence > 0);
  assert.ok(lease.token.length >= 16);
  const status = await client.status(name);
  assert.deepEqual([status.held, status.owner, status.fence], [true, "report-job", lease.fence]);
  assert.equal(lease.signal.aborted, false);
  await lease.release();
  assert.equal(lease.released, true);
  assert.equal(lease.signal.aborted, true);
  assert.equal((await client.status(name)).held, false);
  await lease.release(); // settles as the first call did
  await assert.rejects(lease.extend(), /released/);
});

test("releaseAcknowledged is undefined without replica acknowledgement", async () => {
  const lease = await client.lock(lockName("unacknowledged"), { ttlMs: 5000 });
  assert.equal(lease.releaseAcknowledged, undefined);
  await lease.release();
  assert.equal(lease.released, true);
  assert.equal(lease.releaseAcknowledged, undefined);
});

test("releaseAcknowledged says whether a replica acknowledged the release", async () => {
  const primary = await servers.redis();
  const replica = await servers.redis(primary); // started once its link is up
  const acking = await servers.broker(primary, { LOCKBROKER_REDIS_MIN_REPLICAS_ACKED: "1" });
  const own = new Client(acking.url, { timeoutMs: 5000 });
  const first = await own.lock(lockName("acknowledged"), { ttlMs: 5000 });
  await first.release();
  assert.equal(first.releaseAcknowledged, true);
  const second = await own.acquire(lockName("unacknowledged"), { ttlMs: 30_000 });
  replica.pause();
  try {
    await second.release();
  } finally {
    replica.resume();
  }
  assert.equal(second.released, true);
  assert.equal(second.releaseAcknowledged, false);
  assert.equal((await own.status(second.name)).held, false); // free on the primary all the same
});

test("await using releases the lease at the end of the block", async () => {
  const name = lockName("using");
  let signal: AbortSignal;
  {
    await using lease = await client.lock(name, { ttlMs: 5000 });
    signal = lease.signal;
    assert.equal((await client.status(name)).held, true);
  }
  assert.equal(signal.aborted, true);
  assert.equal((await client.status(name)).held, false);
});

test("the token stays out of JSON and toString", async () => {
  const lease = await client.lock(lockName("token"), { ttlMs: 5000 });
  try {
    assert.ok(!JSON.stringify(lease).includes(lease.token));
    assert.ok(!String(lease).includes(lease.token));
    assert.match(String(lease), /held/);
  } finally {
    await lease.release();
  }
});

test("fences grow from one lease to the next", async () => {
  const name = lockName("fences");
  const fences: number[] = [];
  for (let i = 0; i < 3; i++) {
    const lease = await client.lock(name, { ttlMs: 5000 });
    fences.push(lease.fence);
    await lease.release();
  }
  assert.deepEqual([...fences].sort((a, b) => a - b), fences);
  assert.equal(new Set(fences).size, 3);
});

test("renewal keeps the lease over several TTLs", async () => {
  const name = lockName("renewal");
  const lease = await client.lock(name, { ttlMs: 1200 });
  try {
    await sleep(3600);
    assert.equal(lease.lost, false);
    assert.equal(lease.signal.aborted, false);
    assert.ok(lease.remainingMs() > 300, `remaining ${lease.remainingMs()}`);
    const status = await client.status(name);
    assert.equal(status.held, true);
    assert.equal(status.fence, lease.fence);
    await assert.rejects(client.acquire(name, { ttlMs: 1000 }), LockBusy);
  } finally {
    await lease.release();
  }
});

test("a force release aborts the signal within one renewal period", async () => {
  const name = lockName("forced");
  const ttlMs = 3000;
  const lease = await client.lock(name, { ttlMs });
  await forceRelease(broker.url, name);
  const took = await aborted(lease.signal, ttlMs / 3 + 500);
  assert.ok(took <= ttlMs / 3 + 500, `noticed after ${took} ms`);
  assert.ok(lease.signal.reason instanceof LeaseLost);
  assert.equal(lease.lostReason, "lease_lost");
  assert.throws(() => lease.throwIfLost(), LeaseLost);
  await assert.rejects(lease.extend(), LeaseLost);
  await assert.rejects(lease.release(), LeaseLost);
});

test("an unreachable broker ends the lease before the broker's expiry", async () => {
  const own = await servers.broker(redis);
  const quick = new Client(own.url, { timeoutMs: 300 });
  const name = lockName("paused");
  const ttlMs = 1500;
  const lease = await quick.lock(name, { ttlMs });
  own.pause();
  try {
    const took = await aborted(lease.signal, 3000);
    // Aborted by the broker's expiry (same machine, same clock), give or take
    // the timer's scheduling.
    assert.ok(Date.now() - lease.expiresAtMs <= 50, `${Date.now() - lease.expiresAtMs} ms after the broker's expiry`);
    assert.ok(took <= ttlMs + 100, `the lease ended ${took} ms after the pause`);
    assert.equal(lease.lostReason, "expired");
    // A lost lease is never renewed: this fails at once, without the broker.
    const started = performance.now();
    await assert.rejects(lease.extend(), LeaseLost);
    assert.ok(performance.now() - started < 100);
    await sleep(300); // past the broker's own expiry
  } finally {
    own.resume();
  }
  assert.equal((await quick.status(name)).held, false);
  await assert.rejects(lease.release(), LeaseLost);
});

test("maxHoldMs stops renewing and the lease runs out", async () => {
  const name = lockName("max-hold");
  const lease = await client.lock(name, { ttlMs: 1000, maxHoldMs: 1600 });
  const held = await aborted(lease.signal, 4000);
  assert.ok(held > 1200 && held < 2200, `held for ${held} ms with maxHoldMs 1600`);
  assert.equal(lease.lostReason, "expired");
  await sleep(300); // the local deadline comes first
  assert.equal((await client.status(name)).held, false);
});

test("the broker's max hold refuses extend and ends the lease", async () => {
  const own = await servers.broker(redis, { LOCKBROKER_LOCKS_MAX_HOLD_MS: "1500" });
  const c = new Client(own.url, { timeoutMs: 5000 });
  const name = lockName("broker-max-hold");
  const lease = await c.acquire(name, { ttlMs: 1000 });
  await sleep(700);
  const refused = await lease.extend(1000).then(
    () => assert.fail("extended past max hold"),
    (error: unknown) => error,
  );
  assert.ok(refused instanceof MaxHoldExceeded);
  assert.equal(refused.status, 409);
  assert.ok(refused.expiresInMs! > 0 && refused.expiresInMs! <= 1000);
  await lease.release();

  const managed = await c.lock(name, { ttlMs: 1000 });
  await aborted(managed.signal, 3000);
  assert.ok(managed.lost);
});

test("a wait longer than the TTL gives a fresh lease", async () => {
  const name = lockName("long-wait");
  const holder = await client.acquire(name, { ttlMs: 10_000 });
  setTimeout(() => void holder.release(), 2500);
  const ttlMs = 900;
  const started = performance.now();
  const lease = await client.lock(name, { ttlMs, waitMs: 10_000 });
  try {
    assert.ok(performance.now() - started >= 2000, "granted before the holder released");
    assert.equal(lease.lost, false);
    assert.ok(lease.remainingMs() >= ttlMs / 2, `remaining ${lease.remainingMs()}`);
    await sleep(2 * ttlMs);
    assert.equal(lease.signal.aborted, false, String(lease.signal.reason));
    const status = await client.status(name);
    assert.equal(status.held, true);
    assert.equal(status.fence, lease.fence);
  } finally {
    await lease.release();
  }
});

test("a waited acquire's deadline counts from after the grant", async () => {
  const name = lockName("waited-acquire");
  const holder = await client.acquire(name, { ttlMs: 10_000 });
  setTimeout(() => void holder.release(), 1500);
  const ttlMs = 1000;
  const lease = await client.acquire(name, { ttlMs, waitMs: 5000 });
  // Counted from the waiting request's send time this would be long past.
  const left = lease.remainingMs();
  assert.ok(left >= ttlMs / 2 && left <= ttlMs, `remaining ${left} ms`);
  await lease.release();
});

test("no renewal is sent after release", async () => {
  const extends_: number[] = [];
  const counting: typeof fetch = (input, init) => {
    if (String(input).endsWith("/extend")) extends_.push(performance.now());
    return fetch(input, init);
  };
  const c = new Client(broker.url, { fetch: counting });
  const lease = await c.lock(lockName("no-renew-after-release"), { ttlMs: 300 });
  await sleep(450); // about four renewals
  await lease.release();
  const released = performance.now();
  await sleep(400);
  assert.ok(extends_.length >= 2, `${extends_.length} extends`);
  assert.equal(extends_.filter((t) => t > released).length, 0);
});

test("lock options are checked", async () => {
  await assert.rejects(client.lock("x", { ttlMs: 10_000, maxHoldMs: 5000 }), RangeError);
  await assert.rejects(client.lock("x", { ttlMs: -1 }), RangeError);
  await assert.rejects(client.lock("x", { ttlMs: Number.POSITIVE_INFINITY }), TypeError);
  await assert.rejects(client.acquire("", {}), TypeError);
});
