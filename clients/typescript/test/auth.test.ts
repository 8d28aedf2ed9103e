/** API keys (Authorization: Bearer) against a real broker. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { AuthError, Client } from "lockbroker";
import { brokerForFile, keysFile, lockName } from "./harness.js";

const KEY = "test-key-0123456789abcdef";
const { broker } = await brokerForFile({
  LOCKBROKER_AUTH_KEYS_FILE: keysFile(KEY, ["lock"], ["allowed-"]),
});

test("the bearer key opens the broker", async () => {
  const client = new Client(broker.url, { apiKey: KEY });
  const name = `allowed-${lockName("key")}`;
  const lease = await client.lock(name, { ttlMs: 5000 });
  assert.equal((await client.status(name)).held, true);
  await lease.release();
});

test("a missing or wrong key is unauthorized", async () => {
  for (const apiKey of [undefined, "wrong-key"]) {
    const client = new Client(broker.url, { apiKey });
    const denied = await client.acquire(`allowed-${lockName("no-key")}`).then(
      () => assert.fail("acquired without a valid key"),
      (error: unknown) => error,
    );
    assert.ok(denied instanceof AuthError);
    assert.deepEqual([denied.status, denied.code], [401, "unauthorized"]);
  }
});

test("a lock outside the key's prefixes is forbidden", async () => {
  const client = new Client(broker.url, { apiKey: KEY });
  const denied = await client.acquire(`other-${lockName("prefix")}`).then(
    () => assert.fail("acquired outside the key's prefixes"),
    (error: unknown) => error,
  );
  assert.ok(denied instanceof AuthError);
  assert.deepEqual([denied.status, denied.code], [403, "forbidden"]);
});

test("fromEnv reads the URL and the key", async () => {
  process.env["LOCKBROKER_URL"] = broker.url;
  process.env["LOCKBROKER_API_KEY"] = KEY;
  try {
    const client = Client.fromEnv();
    assert.equal(client.url, broker.url);
    await client.status(`allowed-${lockName("env")}`);
  } finally {
    delete process.env["LOCKBROKER_URL"];
    delete process.env["LOCKBROKER_API_KEY"];
  }
});
