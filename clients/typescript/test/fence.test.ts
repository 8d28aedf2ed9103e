/**
 * Fence checks against a real broker: a fence is current while its lease is
 * valid and not after, not for a fence never issued nor an older one, a
 * permit's on its semaphore only; answers carry no token, and names are
 * percent-encoded into the path.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, InvalidRequest, type FenceCheck } from "lockbroker";
import { brokerForFile, lockName, sleep } from "./harness.js";

const { broker, client } = await brokerForFile();

/** The largest fence the API takes (2^53 - 1). */
const MAX_FENCE = Number.MAX_SAFE_INTEGER;

/** The fields a test compares, without the expiry that counts down. */
function facts(check: FenceCheck): [string, number, boolean, boolean] {
  return [check.name, check.fence, check.current, check.held];
}

test("a fence is current while its lease is valid, and not after the release", async () => {
  const name = lockName("fence-current");
  const lease = await client.acquire(name, { ttlMs: 5000 });
  const check = await client.checkFence(name, lease.fence);
  assert.deepEqual(facts(check), [name, lease.fence, true, true]);
  assert.ok(check.expiresInMs > 0 && check.expiresInMs <= 5000, String(check.expiresInMs));
  assert.deepEqual(facts(await lease.checkFence()), [name, lease.fence, true, true]);
  // A check is a read: the lease is still held, by this client's account too.
  assert.equal(lease.signal.aborted, false);
  assert.equal(lease.lost, false);

  await lease.release();
  const gone = await client.checkFence(name, lease.fence);
  assert.deepEqual([...facts(gone), gone.expiresInMs], [name, lease.fence, false, false, 0]);
  assert.equal((await lease.checkFence()).current, false);
});

test("an older fence, or one never issued, is not current beside a newer lease", async () => {
  const name = lockName("fence-older");
  const older = await client.acquire(name, { ttlMs: 5000 });
  await older.release();
  const newer = await client.acquire(name, { ttlMs: 5000 });
  try {
    assert.ok(newer.fence > older.fence);
    for (const fence of [older.fence, MAX_FENCE]) {
      const stale = await client.checkFence(name, fence);
      assert.deepEqual(facts(stale), [name, fence, false, true]);
      assert.ok(stale.expiresInMs > 0 && stale.expiresInMs <= 5000); // the newer lease's expiry
    }
    assert.equal((await client.checkFence(name, newer.fence)).current, true);
  } finally {
    await newer.release();
  }
});

test("a lease lost after its TTL has no current fence", async () => {
  const name = lockName("fence-expired");
  const lease = await client.acquire(name, { ttlMs: 300 });
  await sleep(500);
  assert.equal(lease.lost, true);
  const check = await client.checkFence(name, lease.fence);
  assert.deepEqual([check.current, check.held], [false, false]);
});

test("a permit's fence is checked on the semaphore", async () => {
  const name = lockName("fence-permit");
  const first = await client.acquirePermit(name, 2, { ttlMs: 5000 });
  const second = await client.acquirePermit(name, 2, { ttlMs: 5000 });
  try {
    assert.equal((await client.checkSemaphoreFence(name, first.fence)).current, true);
    assert.equal((await second.checkFence()).current, true);
    // The permit's fence belongs to the semaphore, not to a lock of that name.
    assert.deepEqual(facts(await client.checkFence(name, first.fence)), [name, first.fence, false, false]);
    await first.release();
    const gone = await client.checkSemaphoreFence(name, first.fence);
    assert.deepEqual([gone.current, gone.held], [false, true]);
  } finally {
    await second.release();
  }
});

test("a bad fence or name is an InvalidRequest naming the field", async () => {
  const name = lockName("fence-bad");
  for (const fence of [0, -1, 2 ** 53]) {
    const error = await client.checkFence(name, fence).catch((e: unknown) => e);
    assert.ok(error instanceof InvalidRequest, String(error));
    assert.deepEqual([error.status, error.field], [400, "fence"]);
  }
  // "/", "?" and " " reach the broker encoded, inside the name: it refuses the
  // name rather than routing the request elsewhere (a 404).
  for (const bad of ["no spaces", "billing/42", "a?b"]) {
    const error = await client.checkSemaphoreFence(bad, 1).catch((e: unknown) => e);
    assert.ok(error instanceof InvalidRequest, String(error));
    assert.deepEqual([error.status, error.field], [400, "name"]);
  }
  await assert.rejects(client.checkFence(name, 1.5), TypeError);
  await assert.rejects(client.checkFence(name, "1" as unknown as number), TypeError);
});

test("a fence check carries no token, and the name is percent-encoded in the path", async () => {
  const wire: Array<{ url: string; body: string }> = [];
  const tapped = new Client(broker.url, {
    timeoutMs: 5000,
    fetch: async (input, init) => {
      const response = await fetch(input, init);
      wire.push({ url: String(input), body: await response.clone().text() });
      return response;
    },
  });
  const name = lockName("billing:fence-wire");
  const lease = await tapped.acquire(name, { ttlMs: 5000 });
  const permit = await tapped.acquirePermit(name, 1, { ttlMs: 5000 });
  try {
    const before = wire.length;
    await lease.checkFence();
    await permit.checkFence();
    await tapped.checkFence("billing/42", 7).catch(() => undefined);
    const seen = wire.slice(before);
    const encoded = encodeURIComponent(name);
    assert.ok(encoded.includes("%3A"), encoded);
    assert.deepEqual(
      seen.map((s) => new URL(s.url).pathname),
      [
        `/v1/locks/${encoded}/fence/${lease.fence}`,
        `/v1/semaphores/${encoded}/fence/${permit.fence}`,
        "/v1/locks/billing%2F42/fence/7",
      ],
    );
    for (const { body } of seen.slice(0, 2)) {
      assert.match(body, /"current":true/);
      assert.ok(!body.includes(lease.token) && !body.includes(permit.token) && !body.includes('"token"'), body);
    }
  } finally {
    await lease.release();
    await permit.release();
  }
});
