/**
 * The claim-first PostgreSQL example: a stalled holder whose lease lapsed cannot
 * overwrite the work of the holder after it.
 *
 * PostgreSQL comes from LOCKBROKER_TEST_PG_URL, or 127.0.0.1:5432 with trust
 * auth, user postgres, database test; the tests skip when it is unreachable.
 */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, test, type TestContext } from "node:test";

import pg from "pg";

import { StaleFence, claim, createTable, updateRow, write } from "../examples/claim-first.js";
import { brokerForFile, sleep } from "./harness.js";

const PG_URL = process.env["LOCKBROKER_TEST_PG_URL"] || "postgres://postgres@127.0.0.1:5432/test";
const EXAMPLE = join(dirname(fileURLToPath(import.meta.url)), "../examples/claim-first.js");

const { broker, client } = await brokerForFile();
let db: pg.Client | undefined;
let unreachable = "";

before(async () => {
  const candidate = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 3000 });
  try {
    await candidate.connect();
    db = candidate;
  } catch (error) {
    unreachable = `PostgreSQL is unreachable (${PG_URL}): ${String(error)}`;
  }
});
after(() => db?.end());

let tables = 0;

/** A counters table of this test's own, with row 1 at value 0, dropped after. */
async function table(t: TestContext): Promise<string | undefined> {
  if (!db) {
    t.skip(unreachable);
    return undefined;
  }
  tables += 1;
  const name = `claim_first_ts_${process.pid}_${tables}`;
  await createTable(db, name);
  await db.query(`INSERT INTO ${pg.escapeIdentifier(name)} (id) VALUES (1)`);
  t.after(() => db?.query(`DROP TABLE IF EXISTS ${pg.escapeIdentifier(name)}`));
  return name;
}

async function row(name: string): Promise<[number, number]> {
  const result = await db!.query<{ fence: string; value: string }>(
    `SELECT fence, value FROM ${pg.escapeIdentifier(name)} WHERE id = 1`,
  );
  return [Number(result.rows[0]!.fence), Number(result.rows[0]!.value)];
}

test("a holder whose lease lapsed cannot write after the next holder claimed", async (t) => {
  const name = await table(t);
  if (!name) return;
  const stalled = await client.acquire(name, { ttlMs: 400 });
  assert.equal(await claim(db!, name, 1, stalled.fence), 0);
  await sleep(600); // the stall outlives the lease

  const current = await client.lock(name, { ttlMs: 5000 });
  assert.ok(current.fence > stalled.fence);
  assert.equal(await updateRow(db!, name, 1, current, (v) => v + 1), 1);
  await current.release();

  await assert.rejects(write(db!, name, 1, stalled.fence, 100), StaleFence);
  await assert.rejects(claim(db!, name, 1, stalled.fence), StaleFence);
  assert.deepEqual(await row(name), [current.fence, 1]);
});

test("each new lease claims and writes in turn", async (t) => {
  const name = await table(t);
  if (!name) return;
  for (const expected of [1, 2, 3]) {
    await using lease = await client.lock(name, { ttlMs: 5000 });
    assert.equal(await updateRow(db!, name, 1, lease, (v) => v + 1), expected);
  }
});

test("the example runs as a script", async (t) => {
  const name = await table(t);
  if (!name) return;
  const env = { ...process.env, LOCKBROKER_URL: broker.url, DATABASE_URL: PG_URL, CLAIM_FIRST_TABLE: name };
  for (const expected of [1, 2]) {
    const { stdout } = await promisify(execFile)(process.execPath, [EXAMPLE], { env, timeout: 60_000 });
    assert.match(stdout, new RegExp(`counter is now ${expected}\\b`));
  }
});
