/** What the code under a lease sees: its own error unwrapped, `run()`, whole milliseconds. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { LeaseLost } from "lockbroker";
import { brokerForFile, forceRelease, lockName, waitUntil } from "./harness.js";

const { broker, client } = await brokerForFile();

test("throwIfLost inside await using surfaces as LeaseLost, not a SuppressedError", async () => {
  const name = lockName("using-lost");
  const error = await (async () => {
    await using lease = await client.lock(name, { ttlMs: 900 });
    await forceRelease(broker.url, name);
    assert.ok(await waitUntil(() => lease.lost, 3000), "the renewer did not notice the loss");
    lease.throwIfLost();
  })().catch((e: unknown) => e);
  assert.ok(error instanceof LeaseLost, `got ${String(error)}`);
});

test("await using still throws a loss the body never checked", async () => {
  const name = lockName("using-unchecked");
  const error = await (async () => {
    await using lease = await client.lock(name, { ttlMs: 900 });
    await forceRelease(broker.url, name);
    assert.ok(await waitUntil(() => lease.lost, 3000));
  })().catch((e: unknown) => e);
  assert.ok(error instanceof LeaseLost, `got ${String(error)}`);
});

test("run() gives back the body's error unwrapped and releases the lease", async () => {
  const name = lockName("run-throws");
  const lease = await client.lock(name, { ttlMs: 900 });
  const error = await lease
    .run(async (signal) => {
      await forceRelease(broker.url, name);
      assert.ok(await waitUntil(() => signal.aborted, 3000));
      throw new Error("the body's own");
    })
    .catch((e: unknown) => e);
  assert.ok(error instanceof Error && error.message === "the body's own", `got ${String(error)}`);
  assert.equal(lease.signal.aborted, true);
});

test("run() returns the body's value and releases; a loss it ignored throws", async () => {
  const name = lockName("run-returns");
  const lease = await client.lock(name, { ttlMs: 5000 });
  assert.equal(await lease.run(async (signal) => (signal.aborted ? "lost" : "done")), "done");
  assert.equal(lease.released, true);
  assert.equal((await client.status(name)).held, false);
  const second = await client.lock(name, { ttlMs: 900 });
  await assert.rejects(
    second.run(async () => {
      await forceRelease(broker.url, name);
      await waitUntil(() => second.lost, 3000);
    }),
    LeaseLost,
  );
});

test("remainingMs is a whole number of milliseconds", async () => {
  const lease = await client.acquire(lockName("whole-ms"), { ttlMs: 5000 });
  try {
    for (let i = 0; i < 20; i++) {
      const left = lease.remainingMs();
      assert.ok(Number.isInteger(left) && left > 0 && left <= 5000, `remaining ${left}`);
    }
  } finally {
    await lease.release();
  }
});

test("a force-released lease's LeaseLost names the key that did it", async () => {
  const name = lockName("forced-by");
  const lease = await client.acquire(name, { ttlMs: 5000 });
  await forceRelease(broker.url, name);
  const lost = await lease.extend().catch((e: unknown) => e);
  assert.ok(lost instanceof LeaseLost);
  assert.ok("force_released_by" in lost.details, JSON.stringify(lost.details));
  assert.equal(lost.forceReleasedBy, lost.details["force_released_by"] as string | undefined);
});
