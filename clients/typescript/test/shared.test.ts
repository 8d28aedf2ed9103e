/** Shared leases beside a writer, and the mode and holders that status and busy answers carry. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { LockBusy } from "lockbroker";
import { brokerForFile, lockName } from "./harness.js";

const { client } = await brokerForFile();

test("shared leases hold the lock together and keep a writer out", async () => {
  const name = lockName("shared");
  const first = await client.lock(name, { ttlMs: 5000, shared: true, owner: "reader-1" });
  const second = await client.lock(name, { ttlMs: 5000, shared: true, owner: "reader-2" });
  try {
    assert.deepEqual([first.mode, second.mode], ["shared", "shared"]);
    assert.notEqual(first.fence, second.fence);
    const busy = await client.acquire(name, { ttlMs: 5000, owner: "writer" }).then(
      () => assert.fail("a writer got the lock beside two readers"),
      (error: unknown) => error,
    );
    assert.ok(busy instanceof LockBusy);
    assert.deepEqual(
      busy.holders.map((h) => [h.owner, h.fence, h.mode]).sort(),
      [
        ["reader-1", first.fence, "shared"],
        ["reader-2", second.fence, "shared"],
      ].sort(),
    );
    const status = await client.status(name);
    assert.deepEqual([status.held, status.mode, status.owner, status.holderCount], [true, "shared", null, 2]);
    assert.deepEqual(status.holders.map((h) => h.owner).sort(), ["reader-1", "reader-2"]);
    assert.ok(status.holders.every((h) => h.mode === "shared" && h.expiresInMs > 0 && h.availableInMs > 0));
  } finally {
    await first.release();
    await second.release();
  }
  const writer = await client.acquire(name, { ttlMs: 5000, owner: "writer" });
  assert.equal(writer.mode, "exclusive");
  await assert.rejects(client.acquire(name, { ttlMs: 5000, shared: true }), LockBusy); // the writer excludes readers
  const status = await client.status(name);
  assert.deepEqual([status.mode, status.owner, status.holderCount], ["exclusive", "writer", 1]);
  assert.deepEqual(status.holders.map((h) => [h.owner, h.fence, h.mode]), [["writer", writer.fence, "exclusive"]]);
  await writer.release();
  const free = await client.status(name);
  assert.deepEqual([free.held, free.mode, free.holders, free.holderCount], [false, null, [], 0]);
});

test("a busy answer lists the exclusive holder", async () => {
  const name = lockName("busy-holders");
  const lease = await client.acquire(name, { ttlMs: 5000, owner: "only" });
  try {
    const busy = await client.acquire(name, { ttlMs: 5000, shared: true }).catch((error: unknown) => error);
    assert.ok(busy instanceof LockBusy);
    assert.deepEqual(busy.holders.map((h) => [h.owner, h.fence, h.mode]), [["only", lease.fence, "exclusive"]]);
    assert.equal(busy.limit, undefined);
  } finally {
    await lease.release();
  }
});
