/** The error table against the contract, without a broker. */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import {
  BrokerUnavailable,
  ERROR_CLASSES,
  LeaseLost,
  LockBrokerError,
  LockBusy,
  SessionFull,
  SessionLost,
  errorFromResponse,
} from "lockbroker";
import { REPO } from "./harness.js";

test("every error code in openapi.yaml has its own class", () => {
  const spec = readFileSync(join(REPO, "openapi.yaml"), "utf8");
  const block = /code:\s+type: string\s+enum:\s+((?:-\s+\w+\s+)+)/s.exec(spec);
  assert.ok(block, "no error code enum in openapi.yaml");
  const codes = block[1]!.split(/[\s-]+/).filter(Boolean);
  assert.ok(codes.length >= 10, `only ${codes.length} codes`);
  for (const code of codes) {
    assert.ok(ERROR_CLASSES[code], `code ${code} has no class`);
    const error = errorFromResponse(400, { error: { code, message: "m" } }, "3");
    assert.notEqual(error.constructor, LockBrokerError, `code ${code} maps to the base class`);
    assert.ok(error instanceof LockBrokerError);
    assert.deepEqual([error.code, error.retryAfterMs, error.name], [code, 3000, error.constructor.name]);
  }
});

test("an answer without a code is typed by its status", () => {
  assert.ok(errorFromResponse(502, "<html>", null) instanceof BrokerUnavailable);
  assert.ok(errorFromResponse(423, null, null) instanceof LockBusy);
  assert.ok(!(errorFromResponse(418, null, null) instanceof BrokerUnavailable));
  assert.ok(!(errorFromResponse(409, null, null) instanceof LeaseLost), "a 409 without a code is not lease_lost");
});

test("holder details come from the error body", () => {
  const busy = errorFromResponse(
    423,
    { error: { code: "lock_busy", message: "m", owner: "w-1", fence: 7, expires_in_ms: 10, available_in_ms: 20 } },
    "1",
  );
  assert.ok(busy instanceof LockBusy);
  assert.deepEqual([busy.owner, busy.fence, busy.expiresInMs, busy.availableInMs], ["w-1", 7, 10, 20]);
});

test("a lost session is a lost lease, with its own reason", () => {
  const lost = errorFromResponse(409, { error: { code: "session_lost", message: "m" } }, null);
  assert.ok(lost instanceof SessionLost && lost instanceof LeaseLost);
  assert.deepEqual([lost.reason, lost.status], ["session_lost", 409]);
  const full = errorFromResponse(409, { error: { code: "session_full", message: "m" } }, null);
  assert.ok(full instanceof SessionFull && !(full instanceof LeaseLost));
});
