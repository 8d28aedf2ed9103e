/**
 * Sessions against a real broker: one keepalive keeps every lease under the
 * session (and no lease is extended on its own), a close releases them all,
 * a session ended elsewhere or left without keepalives is lost with every
 * lease under it, and the session's token stays out of every output.
 */

import assert from "node:assert/strict";
import { test } from "node:test";
import { inspect } from "node:util";

import {
  Client,
  InvalidRequest,
  LeaseLost,
  LockBrokerError,
  LockBusy,
  Session,
  SessionFull,
  SessionLost,
  type Lease,
} from "lockbroker";
import { brokerForFile, forceRelease, lockName, sleep, waitUntil } from "./harness.js";

const { servers, redis, broker, client } = await brokerForFile();

/** A client of the test broker that counts its requests by route (`POST /v1/locks/x/extend` as `extend`). */
function countingClient(url: string = broker.url, timeoutMs = 5000): { client: Client; sent: Map<string, number> } {
  const sent = new Map<string, number>();
  const counting: typeof fetch = (input, init) => {
    const action = new URL(String(input)).pathname.split("/").pop() ?? "";
    sent.set(action, (sent.get(action) ?? 0) + 1);
    return fetch(input, init);
  };
  return { client: new Client(url, { fetch: counting, timeoutMs }), sent };
}

/** Resolves once `signal` aborts, or rejects after `limitMs`. */
function aborted(signal: AbortSignal, limitMs: number): Promise<void> {
  return new Promise((done, fail) => {
    if (signal.aborted) return done();
    const timer = setTimeout(() => fail(new Error(`the signal did not abort within ${limitMs} ms`)), limitMs);
    signal.addEventListener("abort", () => (clearTimeout(timer), done()), { once: true });
  });
}

test("a session keeps 100 leases past its TTL with keepalives only", async () => {
  const { client: counted, sent } = countingClient();
  const ttlMs = 1500;
  const session = await counted.session({ ttlMs, owner: "batch-7" });
  const base = lockName("hundred");
  try {
    const leases: Lease[] = [];
    for (let i = 0; i < 90; i++) leases.push(await session.acquire(`${base}:${i}`));
    leases.push(await session.acquire(`${base}:shared`, { shared: true }));
    for (let i = 0; i < 4; i++) leases.push(await session.acquirePermit(`${base}:slots`, 4));
    leases.push(...(await session.acquireAll([`${base}:x`, `${base}:y`, { name: `${base}:z`, shared: true }, `${base}:w`, `${base}:v`])));
    assert.equal(leases.length, 100);
    assert.equal((await session.status()).leases, 100);
    assert.ok(leases.every((lease) => lease.owner === "batch-7" && lease.ttlMs === ttlMs));

    await sleep(2.5 * ttlMs); // well past the TTL: only keepalives can have kept them
    assert.equal(sent.get("extend") ?? 0, 0, "a lease under a session was extended on its own");
    assert.ok((sent.get("keepalive") ?? 0) >= 6, `${sent.get("keepalive")} keepalives in 2.5 TTLs`);
    const status = await session.status();
    assert.deepEqual([status.open, status.leases, status.owner, status.ttlMs], [true, 100, "batch-7", ttlMs]);
    for (const lease of leases) {
      assert.equal(lease.signal.aborted, false, `${lease.name}: ${String(lease.signal.reason)}`);
      assert.ok(lease.remainingMs() > 0 && lease.remainingMs() <= ttlMs);
      const check = await lease.checkFence();
      assert.ok(check.current, `${lease.name} (fence ${lease.fence}) is no longer held`);
    }
    await assert.rejects(client.acquire(`${base}:0`, { ttlMs: 1000 }), LockBusy);
    assert.ok(session.remainingMs() > 0 && session.remainingMs() <= ttlMs);
  } finally {
    await session.close();
  }
  assert.equal(sent.get("extend") ?? 0, 0);
});

test("closing releases every lease under the session", async () => {
  const base = lockName("close");
  const session = await client.session({ ttlMs: 5000 });
  const lock = await session.acquire(`${base}:a`);
  const shared = await session.acquire(`${base}:b`, { shared: true });
  const permit = await session.acquirePermit(`${base}:slots`, 2);
  const [c, d] = await session.acquireAll([`${base}:c`, `${base}:d`]);
  const leases = [lock, shared, permit, c!, d!];

  assert.equal(await session.close(), 5);
  assert.equal(session.closed, true);
  assert.equal(session.lost, false);
  assert.equal(session.signal.aborted, true);
  assert.ok(!(session.signal.reason instanceof LeaseLost));
  for (const lease of leases) {
    assert.deepEqual([lease.released, lease.lost, lease.signal.aborted], [true, false, true], lease.name);
    await lease.release(); // settles as released, without asking
  }
  for (const name of [`${base}:a`, `${base}:b`, `${base}:c`, `${base}:d`]) assert.equal((await client.status(name)).held, false);
  assert.equal((await client.semaphoreStatus(`${base}:slots`)).held, 0);
  assert.equal((await client.sessionStatus(session.id)).open, false);
  assert.equal(await session.close(), 5); // settles as the first call did
  session.throwIfLost(); // closed is no loss
});

test("run and await using close the session at the end", async () => {
  const name = lockName("scoped");
  let seen: Session | undefined;
  const ran = await client.session({ ttlMs: 5000 });
  const answer = await ran.run(async (signal) => {
    assert.equal(signal.aborted, false);
    await ran.acquire(name);
    return 42;
  });
  assert.deepEqual([answer, ran.closed, (await client.status(name)).held], [42, true, false]);
  {
    await using session = await client.session({ ttlMs: 5000 });
    seen = session;
    await session.acquire(name);
    assert.equal((await client.status(name)).held, true);
  }
  assert.equal(seen.closed, true);
  assert.equal((await client.status(name)).held, false);
});

test("a session closed elsewhere is seen lost, and its leases' signals abort with session_lost", async () => {
  const ttlMs = 1500;
  const { client: counted, sent } = countingClient();
  const session = await counted.session({ ttlMs });
  const base = lockName("elsewhere");
  const lease = await session.acquire(`${base}:a`);
  const permit = await session.acquirePermit(`${base}:slots`, 3);
  const [other] = await session.acquireAll([`${base}:b`]);

  assert.equal(await client.closeSession(session.id, session.token), 3); // another holder of the token
  await aborted(session.signal, ttlMs / 3 + 500); // seen at the next keepalive
  assert.equal(session.lost, true);
  assert.ok(session.signal.reason instanceof SessionLost);
  assert.equal(session.signal.reason.status, 409);
  assert.throws(() => session.throwIfLost(), SessionLost);
  for (const one of [lease, permit, other!]) {
    assert.equal(one.signal.aborted, true);
    const reason: unknown = one.signal.reason;
    assert.ok(reason instanceof SessionLost && reason instanceof LeaseLost, String(reason));
    assert.equal(reason.reason, "session_lost");
    assert.equal(reason.code, "session_lost");
    assert.match(reason.message, new RegExp(one.name));
    assert.deepEqual([one.lost, one.lostReason, one.released], [true, "session_lost", false]);
    assert.throws(() => one.throwIfLost(), SessionLost);
    // Nothing left to release: it throws the loss without asking.
    await assert.rejects(one.release(), SessionLost);
  }
  const closes = sent.get("close") ?? 0;
  await assert.rejects(session.close(), SessionLost);
  assert.equal(sent.get("close") ?? 0, closes, "a close was sent for a session the broker called lost");
  assert.equal((await client.status(`${base}:a`)).held, false);
});

test("an acquire under a closed session throws SessionLost", async () => {
  const name = lockName("closed-session");
  const session = await client.session({ ttlMs: 5000 });
  const token = session.token;
  await session.close();
  await assert.rejects(session.acquire(name), SessionLost);
  await assert.rejects(session.acquirePermit(name, 2), SessionLost);
  await assert.rejects(session.acquireAll([name]), SessionLost);
  await assert.rejects(client.acquire(name, { session }), SessionLost);
  // The broker's own answer, for the bare token.
  const refused = await client.acquire(name, { session: token }).catch((error: unknown) => error);
  assert.ok(refused instanceof SessionLost, String(refused));
  assert.deepEqual([refused.status, refused.code, refused.reason], [409, "session_lost", "session_lost"]);
  await assert.rejects(client.acquirePermit(name, 2, { session: token }), SessionLost);
  await assert.rejects(client.acquireAll([name], { session: token }), SessionLost);
  await assert.rejects(client.keepSession(session.id, token), SessionLost);
  assert.equal((await client.status(name)).held, false);
});

test("an acquire answered session_lost marks the helper lost", async () => {
  const session = await client.session({ ttlMs: 5000 });
  const held = await session.acquire(lockName("before"));
  await client.closeSession(session.id, session.token);
  // Before the next keepalive: the acquire is the first to hear of it.
  await assert.rejects(session.acquire(lockName("after")), SessionLost);
  assert.equal(session.lost, true);
  assert.equal(held.lostReason, "session_lost");
});

test("a session without a successful keepalive is lost at its TTL by the local clock", async () => {
  const own = await servers.broker(redis);
  const { client: quick } = countingClient(own.url, 300);
  const ttlMs = 1500;
  const session = await quick.session({ ttlMs });
  const lease = await session.acquire(lockName("paused"));
  const started = performance.now();
  own.pause();
  try {
    await aborted(lease.signal, 3000);
    const took = performance.now() - started;
    assert.ok(took <= ttlMs + 100, `lost ${took} ms after the pause`);
    // Never after the broker's expiry of the session (same machine, same clock).
    assert.ok(Date.now() - session.expiresAtMs <= 50, `${Date.now() - session.expiresAtMs} ms after the broker's expiry`);
    assert.deepEqual([session.lost, lease.lostReason], [true, "session_lost"]);
    assert.ok(session.signal.reason instanceof SessionLost);
    assert.equal(session.signal.reason.status, undefined); // the local clock's call, not the broker's
    await sleep(300); // past the broker's own expiry
  } finally {
    own.resume();
  }
  assert.equal((await quick.status(lease.name)).held, false);
  assert.equal((await quick.sessionStatus(session.id)).open, false);
  await assert.rejects(session.close(), SessionLost);
});

test("a lease force-released under its session is lost; one released by its holder is not", async () => {
  const base = lockName("ended");
  const session = await client.session({ ttlMs: 1200 });
  try {
    const forced = await session.acquire(`${base}:forced`);
    const mine = await session.acquire(`${base}:mine`);
    const again = await session.acquire(`${base}:again`);
    await mine.release();
    assert.equal(mine.released, true);
    // The same lock released and taken again before the keepalive names it as ended.
    await again.release();
    const retaken = await session.acquire(`${base}:again`);
    await forceRelease(broker.url, `${base}:forced`);
    assert.ok(await waitUntil(() => forced.lost, 2000), "the force release was not seen");
    assert.deepEqual([forced.lostReason, session.lost], ["lease_lost", false]);
    await sleep(1000); // more keepalives
    assert.deepEqual([retaken.lost, mine.lost, mine.released], [false, false, true]);
    assert.equal((await client.status(`${base}:again`)).fence, retaken.fence);
    assert.equal((await session.status()).leases, 1);
  } finally {
    assert.equal(await session.close(), 1);
  }
});

test("a lease whose end was told in a lost keepalive answer is still found lost", async () => {
  const base = lockName("short");
  const session = await client.session({ ttlMs: 1200 });
  try {
    const forced = await session.acquire(`${base}:forced`);
    const kept = await session.acquire(`${base}:kept`);
    await forceRelease(broker.url, `${base}:forced`);
    // A keepalive of its own takes the one answer that names the ended lease,
    // as if the session's answer had been lost on its way: the session's next
    // keepalive renews one lease of the two it holds.
    assert.equal((await client.keepSession(session.id, session.token)).leases, 1);
    assert.ok(await waitUntil(() => forced.lost, 2000), "the keepalive's short count went unnoticed");
    assert.deepEqual([forced.lostReason, session.lost], ["lease_lost", false]);
    await sleep(600); // another keepalive
    assert.deepEqual([kept.lost, session.lost], [false, false]);
  } finally {
    assert.equal(await session.close(), 1);
  }
});

test("a session holds at most the broker's leases per session", async () => {
  const own = await servers.broker(redis, { LOCKBROKER_LOCKS_MAX_LEASES_PER_SESSION: "2" });
  const c = new Client(own.url, { timeoutMs: 5000 });
  const base = lockName("full");
  const session = await c.session({ ttlMs: 5000 });
  await session.acquire(`${base}:1`);
  await session.acquire(`${base}:2`);
  const full = await session.acquire(`${base}:3`).catch((error: unknown) => error);
  assert.ok(full instanceof SessionFull, String(full));
  assert.deepEqual([full.status, full.code], [409, "session_full"]);
  assert.equal(session.lost, false);
  assert.equal((await c.status(`${base}:3`)).held, false);
  assert.equal(await session.close(), 2);
});

test("the plain calls open, keep, read and close a session", async () => {
  const opened = await client.openSession({ ttlMs: 4000, owner: "raw", lockDelayMs: 100 });
  assert.match(opened.id, /^[0-9a-f]{16}$/);
  assert.ok(opened.token.startsWith(`${opened.id}.`));
  assert.deepEqual([opened.ttlMs, opened.owner, opened.lockDelayMs], [4000, "raw", 100]);
  assert.ok(opened.validityMs > 0 && opened.validityMs <= 4000);

  const name = lockName("raw");
  const lease = await client.acquire(name, { session: opened.token, owner: "raw" });
  const permit = await client.acquirePermit(`${name}:slots`, 2, { session: opened.token });
  // A lease under a bare token knows the validity its grant answered, and is never extended on its own.
  assert.ok(lease.remainingMs() > 0 && lease.remainingMs() <= 4000);
  await assert.rejects(lease.extend(), TypeError);

  const renewal = await client.keepSession(opened.id, opened.token);
  assert.deepEqual([renewal.id, renewal.ttlMs, renewal.leases, renewal.ended], [opened.id, 4000, 2, []]);
  const status = await client.sessionStatus(opened.id);
  assert.deepEqual(
    [status.id, status.open, status.owner, status.ttlMs, status.lockDelayMs, status.leases],
    [opened.id, true, "raw", 4000, 100, 2],
  );
  assert.ok(status.expiresInMs > 0 && status.expiresInMs <= 4000);
  assert.equal(await client.closeSession(opened.id, opened.token), 2);
  assert.deepEqual([(await client.sessionStatus(opened.id)).open, (await client.status(name)).held], [false, false]);
  assert.equal((await client.semaphoreStatus(permit.name)).held, 0);
  await assert.rejects(client.keepSession(opened.id, opened.token), SessionLost);
});

test("a lease under a session takes its terms from the session", async () => {
  const session = await client.session({ ttlMs: 5000, owner: "terms" });
  try {
    const name = lockName("terms");
    await assert.rejects(session.acquire(name, { ttlMs: 1000 } as object), TypeError);
    await assert.rejects(client.acquire(name, { session, lockDelayMs: 10 }), TypeError);
    await assert.rejects(client.lock(name, { session } as object), TypeError);
    await assert.rejects(client.lockAll([name], { session } as object), TypeError);
    const lease = await session.acquire(name, { owner: "one-job" });
    assert.equal(lease.owner, "one-job");
    await assert.rejects(lease.extend(), TypeError);
    await lease.release(); // on its own, before the session ends
    assert.equal((await client.status(name)).held, false);
    assert.equal(lease.released, true);
    assert.equal(session.leases.length, 0);
  } finally {
    await session.close();
  }
});

test("the session's token stays out of JSON, inspect, toString and errors", async () => {
  const session = await client.session({ ttlMs: 1500 });
  const token = session.token;
  const secret = token.split(".")[1]!;
  const lease = await session.acquire(lockName("token"));
  const outputs = [JSON.stringify(session), inspect(session, { depth: 5, showHidden: true }), String(session), `${session}`];
  const errors: unknown[] = [];
  errors.push(await client.sessionStatus(token).catch((error: unknown) => error)); // a token where the id goes
  errors.push(await client.acquire(lockName("token-ttl"), { session: token, ttlMs: 1000 }).catch((e: unknown) => e));
  await client.closeSession(session.id, token);
  errors.push(await client.acquire(lockName("token-closed"), { session: token }).catch((e: unknown) => e));
  errors.push(await client.keepSession(session.id, token).catch((e: unknown) => e));
  errors.push(await client.keepSession(session.id, `${token}0`).catch((e: unknown) => e)); // a malformed token
  await aborted(session.signal, 2000);
  errors.push(session.signal.reason, lease.signal.reason, await session.close().catch((e: unknown) => e));
  for (const error of errors) {
    assert.ok(error instanceof Error, String(error));
    outputs.push(error.message, String(error), inspect(error, { depth: 5 }), JSON.stringify(error));
  }
  assert.ok(errors[4] instanceof InvalidRequest);
  assert.ok(errors.slice(2).some((error) => error instanceof LockBrokerError && error.code === "session_lost"));
  outputs.push(JSON.stringify(session), inspect(session), String(session));
  for (const output of outputs) assert.ok(!output.includes(secret), `the token is in: ${output}`);
  assert.match(String(session), new RegExp(`Session\\(${session.id}, lost`));
});
