/**
 * Several locks at once, against a real broker: acquireAll takes every lock or
 * none and names the busy one, waits until the holder releases, and gives back
 * an answer it cannot return; releaseAll ends each lease as its own release
 * would; lockAll renews every lease, aborts the set's signal when one is lost,
 * and gives them all back with one release-all.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { AuthError, Client, LeaseLost, LockBrokerError, LockBusy } from "lockbroker";
import { brokerForFile, forceRelease, lockName, sleep } from "./harness.js";

const { broker, client } = await brokerForFile();

async function held(name: string): Promise<boolean> {
  return (await client.status(name)).held;
}

test("acquireAll takes every lock or none, and a busy answer names the lock", async () => {
  const name = lockName("every-or-none");
  const [a, b, c] = [`${name}:a`, `${name}:b`, `${name}:c`];
  const holder = await client.acquire(b, { ttlMs: 10_000, owner: "holder" });

  const refused = await client.acquireAll([c, b, a], { ttlMs: 10_000, owner: "mover" }).catch((e: unknown) => e);
  assert.ok(refused instanceof LockBusy, String(refused));
  assert.deepEqual([refused.lock, refused.owner, refused.fence, refused.status], [b, "holder", holder.fence, 423]);
  assert.deepEqual([await held(a), await held(c)], [false, false]);

  await holder.release();
  const leases = await client.acquireAll([c, b, { name: a, shared: true }], { ttlMs: 10_000, owner: "mover" });
  assert.deepEqual(
    leases.map((lease) => [lease.name, lease.mode]),
    [
      [c, "exclusive"],
      [b, "exclusive"],
      [a, "shared"],
    ],
  );
  assert.ok((leases[1]?.fence ?? 0) > holder.fence);
  assert.equal(new Set(leases.map((lease) => lease.token)).size, 3);
  for (const lease of leases) {
    const status = await client.status(lease.name);
    assert.deepEqual([status.held, status.fence, lease.owner], [true, lease.fence, "mover"]);
  }
  // Each is an ordinary lease: extended and released on its own.
  const [first, ...rest] = leases;
  await first?.extend(20_000);
  await first?.release();
  assert.deepEqual([await held(c), await held(b)], [false, true]);
  await client.releaseAll(rest);
});

test("a name given twice is refused without asking, and no locks are no leases", async () => {
  const name = lockName("twice");
  await assert.rejects(client.acquireAll([{ name, shared: true }, name]), /named twice \(locks\[1\]\)/);
  assert.equal(await held(name), false);
  assert.deepEqual(await client.acquireAll([]), []);
  assert.deepEqual(await client.releaseAll([]), []);
});

test("acquireAll waits until the holder releases", async () => {
  const name = lockName("waits");
  const [p, q] = [`${name}:p`, `${name}:q`];
  const holder = await client.acquire(q, { ttlMs: 10_000, owner: "holder" });
  const releasing = sleep(700).then(() => holder.release());
  const started = performance.now();
  const leases = await client.acquireAll([p, q], { ttlMs: 10_000, waitMs: 5000, owner: "mover" });
  const elapsed = performance.now() - started;
  await releasing;
  assert.ok(elapsed >= 650 && elapsed < 4000, `granted after ${elapsed} ms`);
  assert.ok((leases[1]?.fence ?? 0) > holder.fence);
  assert.deepEqual([await held(p), await held(q)], [true, true]);
  await client.releaseAll(leases);
});

test("a wait that runs out is busy and takes nothing", async () => {
  const name = lockName("runs-out");
  const [a, b] = [`${name}:a`, `${name}:b`];
  const holder = await client.acquire(b, { ttlMs: 10_000 });
  const started = performance.now();
  const refused = await client.acquireAll([a, b], { ttlMs: 10_000, waitMs: 400 }).catch((e: unknown) => e);
  assert.ok(performance.now() - started >= 390);
  assert.ok(refused instanceof LockBusy && refused.lock === b, String(refused));
  assert.equal(await held(a), false);
  await holder.release();
});

test("the same requestId gets the same leases", async () => {
  const name = lockName("same-request");
  const names = [`${name}:1`, `${name}:2`];
  const first = await client.acquireAll(names, { ttlMs: 10_000, requestId: `move-${name}` });
  const again = await client.acquireAll(names, { ttlMs: 10_000, requestId: `move-${name}` });
  assert.deepEqual(
    again.map((lease) => [lease.token, lease.fence]),
    first.map((lease) => [lease.token, lease.fence]),
  );
  await client.releaseAll(first);
});

test("releaseAll ends each lease as its own release would", async () => {
  const name = lockName("release-all");
  const [a, b, taken] = [`${name}:a`, `${name}:b`, `${name}:taken`];
  const leases = await client.acquireAll([a, b], { ttlMs: 10_000 });
  // Renewed, and lost at the broker, which this client learns from releaseAll.
  const renewed = await client.lock(taken, { ttlMs: 10_000 });
  await forceRelease(broker.url, taken);
  leases.push(renewed);

  const results = await client.releaseAll(leases);
  assert.deepEqual(
    results.slice(0, 2),
    leases.slice(0, 2).map((lease) => ({ name: lease.name, released: true, fence: lease.fence })),
  );
  for (const lease of leases.slice(0, 2)) {
    assert.deepEqual([lease.released, lease.lost, lease.signal.aborted], [true, false, true]);
    await lease.release(); // settles as releaseAll did
    await assert.rejects(lease.extend(), /released/);
    assert.equal(await held(lease.name), false);
  }
  const lost = results[2];
  assert.ok(lost && !lost.released && lost.error instanceof LeaseLost, JSON.stringify(lost));
  assert.deepEqual([renewed.lost, renewed.lostReason, renewed.signal.aborted], [true, "lease_lost", true]);
  await assert.rejects(renewed.release(), LeaseLost);
});

test("a lease already lost is not asked about, and the rest are released", async () => {
  const name = lockName("known-lost");
  const [a, b] = [`${name}:a`, `${name}:b`];
  const leases = await client.acquireAll([a, b], { ttlMs: 10_000 });
  await forceRelease(broker.url, a);
  await assert.rejects(leases[0]!.extend(), LeaseLost);

  const results = await client.releaseAll(leases);
  assert.ok(results[0]?.error instanceof LeaseLost && !results[0].released);
  assert.deepEqual(results[1], { name: b, released: true, fence: leases[1]?.fence });
  assert.equal(leases[1]?.released, true);
  assert.equal(await held(b), false);
});

/** A client whose requests' paths are noted, and whose JSON answers `rewrite` may change before it reads them. */
function tapped(rewrite?: (path: string, body: Record<string, unknown>) => void): { client: Client; paths: string[] } {
  const paths: string[] = [];
  const fetching: typeof fetch = async (input, init) => {
    const path = new URL(String(input)).pathname;
    paths.push(path);
    const response = await fetch(input, init);
    if (rewrite === undefined || !response.ok) return response;
    const body = (await response.json()) as Record<string, unknown>;
    rewrite(path, body);
    return new Response(JSON.stringify(body), { status: response.status, headers: { "content-type": "application/json" } });
  };
  return { client: new Client(broker.url, { timeoutMs: 5000, fetch: fetching }), paths };
}

/** Resolves once `signal` aborts, or rejects after `limitMs`. */
function abortedWithin(signal: AbortSignal, limitMs: number): Promise<void> {
  return new Promise((done, fail) => {
    const timer = setTimeout(() => fail(new Error(`the signal did not abort within ${limitMs} ms`)), limitMs);
    const finish = (): void => {
      clearTimeout(timer);
      done();
    };
    if (signal.aborted) finish();
    else signal.addEventListener("abort", finish, { once: true });
  });
}

test("lockAll renews every lease, and run gives them all back with one release-all", async () => {
  const { client: own, paths } = tapped();
  const name = lockName("lock-all");
  const [a, b] = [`${name}:a`, `${name}:b`];
  const leases = await own.lockAll([a, { name: b, shared: true }], { ttlMs: 1200, owner: "mover" });
  let from = 0;
  const done = await leases.run(async (signal) => {
    assert.equal(signal, leases.signal);
    await sleep(3600); // three TTLs
    assert.deepEqual([signal.aborted, leases.lost], [false, false]);
    leases.throwIfLost();
    assert.ok(leases.remainingMs() > 500, String(leases));
    const [first, second] = leases;
    assert.deepEqual(
      [first?.name, first?.mode, second?.name, second?.mode],
      [a, "exclusive", b, "shared"],
    );
    for (const lease of leases) {
      const status = await client.status(lease.name);
      assert.deepEqual([status.held, status.fence], [true, lease.fence]);
    }
    const refused = await client.acquire(a, { ttlMs: 1000 }).catch((e: unknown) => e);
    assert.ok(refused instanceof LockBusy && refused.owner === "mover", String(refused));
    from = paths.length;
    return "moved";
  });
  assert.equal(done, "moved");
  // Renewals may still go out before the release; then one release-all, no release.
  assert.deepEqual(
    paths.slice(from).filter((path) => !path.endsWith("/extend")),
    ["/v1/locks/release-all"],
  );
  assert.ok(leases.signal.aborted && !leases.lost);
  for (const lease of leases) assert.deepEqual([lease.released, await held(lease.name)], [true, false]);
  await leases.release(); // settles as the first call did
});

test("a lost lease aborts the set's signal, and run then throws its loss", async () => {
  const name = lockName("lock-all-lost");
  const [a, b] = [`${name}:a`, `${name}:b`];
  const leases = await client.lockAll([a, b], { ttlMs: 1200 });
  const outcome = await leases
    .run(async (signal) => {
      await forceRelease(broker.url, b);
      // The next renewal of b, within a third of the TTL, learns it.
      await abortedWithin(signal, 2000);
      assert.ok(signal.reason instanceof LeaseLost && signal.reason.message.includes(b), String(signal.reason));
      assert.deepEqual([leases.lost, leases.lostLease?.name, leases.lostReason], [true, b, "lease_lost"]);
      assert.deepEqual([leases.leases[0]?.lost, leases.leases[1]?.lost], [false, true]);
      return "finished";
    })
    .catch((e: unknown) => e);
  assert.ok(outcome instanceof LeaseLost && outcome.message.includes(b), String(outcome));
  assert.deepEqual([leases.leases[0]?.released, await held(a), await held(b)], [true, false, false]);
});

test("await using gives every lease back, and throws a loss the body never checked", async () => {
  const name = lockName("lock-all-using");
  const [a, b] = [`${name}:a`, `${name}:b`];
  {
    await using leases = await client.lockAll([a, b], { ttlMs: 5000 });
    assert.deepEqual([await held(a), await held(b)], [true, true]);
    assert.equal(String(leases), `LeaseSet(${JSON.stringify(a)}, ${JSON.stringify(b)}, held)`);
  }
  assert.deepEqual([await held(a), await held(b)], [false, false]);

  const unseen = await (async () => {
    await using leases = await client.lockAll([a, b], { ttlMs: 1200 });
    await forceRelease(broker.url, a);
    await abortedWithin(leases.signal, 2000);
  })().catch((e: unknown) => e);
  assert.ok(unseen instanceof LeaseLost && unseen.message.includes(a), String(unseen));
  assert.equal(await held(b), false);
});

test("lockAll refuses what acquireAll refuses, and a busy one takes nothing", async () => {
  const name = lockName("lock-all-busy");
  const [a, b] = [`${name}:a`, `${name}:b`];
  const holder = await client.acquire(b, { ttlMs: 10_000 });
  const refused = await client.lockAll([a, b], { ttlMs: 10_000 }).catch((e: unknown) => e);
  assert.ok(refused instanceof LockBusy && refused.lock === b, String(refused));
  assert.equal(await held(a), false);
  await holder.release();
  await assert.rejects(client.lockAll([a], { ttlMs: 10_000, maxHoldMs: 5000 }), RangeError);
  await assert.rejects(client.lockAll([a], { shared: true } as never), TypeError);
  assert.equal(await held(a), false);
});

test("acquireAll gives back an answer for other locks than asked for", async () => {
  const { client: own } = tapped((path, body) => {
    if (path.endsWith("/acquire-all")) (body["leases"] as unknown[]).reverse();
  });
  const name = lockName("misanswered");
  const [a, b] = [`${name}:a`, `${name}:b`];
  const refused = await own.acquireAll([a, b], { ttlMs: 10_000 }).catch((e: unknown) => e);
  assert.ok(refused instanceof LockBrokerError && refused.code === "bad_response", String(refused));
  assert.deepEqual([await held(a), await held(b)], [false, false]);
});

test("acquireAll gives back the leases whose extend after a long wait is refused", async () => {
  const name = lockName("resync-refused");
  const [p, q] = [`${name}:p`, `${name}:q`];
  const holder = await client.acquire(q, { ttlMs: 10_000 });
  setTimeout(() => void holder.release(), 500);
  const revoked = new Client(broker.url, {
    timeoutMs: 5000,
    fetch: async (input, init) => {
      if (String(input).endsWith("/extend")) {
        return new Response(JSON.stringify({ error: { code: "forbidden", message: "the key was revoked" } }), {
          status: 403,
          headers: { "content-type": "application/json" },
        });
      }
      return fetch(input, init);
    },
  });
  // The grant waits longer than a tenth of the TTL, so an extend follows it.
  const refused = await revoked.acquireAll([p, q], { ttlMs: 2000, waitMs: 5000 }).catch((e: unknown) => e);
  assert.ok(refused instanceof AuthError, String(refused));
  assert.deepEqual([await held(p), await held(q)], [false, false]);
});
