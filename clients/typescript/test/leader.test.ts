/** client.leader(): a term won, handed over on resign, and lost when taken. */

import assert from "node:assert/strict";
import { test } from "node:test";

import {  } from "lockbroker";
import { brokerForFile, forceRelease, lockName, sleep, waitUntil } from "./harness.js";

const { broker, client } = await brokerForFile();

/** Resolves when `promise` does, or fails the test after `limitMs`. */
function within(promise: Promise<void>, limitMs: number, what: string): Promise<void> {
  return Promise.race([promise, sleep(limitMs).then(() => assert.fail(`${what} within ${limitMs} ms`))]);
}

test("one candidate leads; on resign the other takes over with a larger term", async () => {
  const name = lockName("leader");
  const a = client.leader(name, { ttlMs: 2000, owner: "node-a" }).start();
  await within(a.elected, 5000, "a was not elected");
  const b = client.leader(name, { ttlMs: 2000, owner: "node-b" }).start();
  try {
    assert.equal(a.isLeader, true);
    assert.equal(a.leader, "node-a");
    const termA = a.term!;
    assert.equal(a.leaderTerm, termA);
    assert.equal((await client.status(name)).fence, termA);
    await sleep(1500); // past a.ttlMs / 3 several times: renewed, and b still waits
    assert.equal(b.isLeader, false);
    assert.equal(b.term, null);
    assert.ok(await waitUntil(() => b.leader === "node-a", 3000), `b sees ${String(b.leader)}`);
    assert.equal(b.leaderTerm, termA);
    await a.resign();
    assert.equal(a.isLeader, false);
    assert.equal(a.lost.aborted, false); // a resign is no loss
    await within(b.elected, 5000, "b was not elected");
    assert.equal(b.isLeader, true);
    assert.ok(b.term! > termA);
    assert.equal((await client.status(name)).owner, "node-b");
    assert.ok(await waitUntil(() => a.leader === "node-b", 3000), `a sees ${String(a.leader)}`);
    assert.equal(a.leaderTerm, b.term);
  } finally {
    await a.stop();
    await b.stop();
  }
  assert.equal((await client.status(name)).held, false);
});

test("a leader whose lease is taken is told through lost", async () => {
  const name = lockName("leader-lost");
  const leader = client.leader(name, { ttlMs: 900, owner: "node-a" }).start();
  try {
    await within(leader.elected, 5000, "not elected");
    await forceRelease(broker.url, name);
    assert.ok(await waitUntil(() => leader.lost.aborted, 3000), "lost did not abort");
    assert.equal(leader.isLeader, false);
    assert.equal(leader.term, null);
    assert.equal(leader.lostReason, "lease_lost");
  } finally {
    await leader.stop();
  }
});
