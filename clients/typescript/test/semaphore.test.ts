/** Semaphores: permits up to a limit, their status, and a limit conflict. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { LimitConflict, LockBusy, type Lease } from "lockbroker";
import { brokerForFile, lockName, sleep } from "./harness.js";

const { client } = await brokerForFile();

test("a semaphore grants permits up to its limit, then is busy", async () => {
  const name = lockName("permits");
  const permits: Lease[] = [];
  try {
    for (let i = 0; i < 3; i++) permits.push(await client.acquirePermit(name, 3, { ttlMs: 5000, owner: `worker-${i}` }));
    assert.ok(permits.every((p) => p.mode === "permit"));
    assert.equal(new Set(permits.map((p) => p.fence)).size, 3);
    const busy = await client.acquirePermit(name, 3, { ttlMs: 5000 }).catch((error: unknown) => error);
    assert.ok(busy instanceof LockBusy);
    assert.equal(busy.limit, 3);
    assert.deepEqual(busy.holders.map((h) => h.owner).sort(), ["worker-0", "worker-1", "worker-2"]);
    assert.ok(busy.holders.every((h) => h.mode === "permit"));
    const status = await client.semaphoreStatus(name);
    assert.deepEqual([status.limit, status.held, status.available], [3, 3, 0]);
    assert.deepEqual(status.holders.map((h) => h.fence).sort(), permits.map((p) => p.fence).sort());
    // The name is a semaphore's, not a lock's: the lock of that name is free.
    assert.equal((await client.status(name)).held, false);
    await permits.shift()!.release();
    assert.deepEqual([(await client.semaphoreStatus(name)).held, (await client.semaphoreStatus(name)).available], [2, 1]);
    permits.push(await client.acquirePermit(name, 3, { ttlMs: 5000 }));
  } finally {
    for (const permit of permits) await permit.release();
  }
  assert.equal((await client.semaphoreStatus(name)).held, 0);
});

test("asking with another limit than the held permits' is a LimitConflict", async () => {
  const name = lockName("limit-conflict");
  const permit = await client.acquirePermit(name, 2, { ttlMs: 5000 });
  try {
    const conflict = await client.acquirePermit(name, 5, { ttlMs: 5000 }).catch((error: unknown) => error);
    assert.ok(conflict instanceof LimitConflict, String(conflict));
    assert.deepEqual([conflict.status, conflict.code, conflict.limit], [409, "limit_conflict", 2]);
  } finally {
    await permit.release();
  }
  // Once no permit is held, a new limit is taken.
  const other = await client.acquirePermit(name, 5, { ttlMs: 5000 });
  assert.equal((await client.semaphoreStatus(name)).limit, 5);
  await other.release();
});

test("semaphore() renews its permit past the TTL and releases it", async () => {
  const name = lockName("managed-permit");
  const permit = await client.semaphore(name, 1, { ttlMs: 900 });
  try {
    await sleep(2000);
    assert.equal(permit.lost, false);
    assert.equal((await client.semaphoreStatus(name)).held, 1);
    await assert.rejects(client.acquirePermit(name, 1, { ttlMs: 1000 }), LockBusy);
  } finally {
    await permit.release();
  }
  assert.equal((await client.semaphoreStatus(name)).held, 0);
  await assert.rejects(client.acquirePermit(name, 0), RangeError);
});
