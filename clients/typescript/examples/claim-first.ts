/**
 * Claim-first writes: a PostgreSQL row that refuses a stale lock holder.
 *
 * A lease can lapse while its holder is stalled (a GC pause, swapping, a slow
 * disk), and the next holder then gets a larger fence. The row remembers the
 * largest fence that claimed it, so a holder that wakes up late with a smaller
 * one changes nothing:
 *
 * 1. claim: UPDATE t SET fence = $f WHERE id = $id AND fence < $f RETURNING value
 * 2. write: UPDATE t SET value = ... WHERE id = $id AND fence = $f
 *    (0 rows: a newer holder claimed the row; you are stale, redo with a new lease)
 *
 * The claim commits on its own, before the work, so a newer holder is visible to
 * a stale one however long the work takes.
 *
 * Run it against a broker and a database (with `pg` installed):
 *
 *     npm run build && npm run build:test
 *     LOCKBROKER_URL=http://127.0.0.1:7700 \
 *     DATABASE_URL=postgres://postgres@127.0.0.1:5432/test node build/examples/claim-first.js
 */

import { argv, env } from "node:process";
import { pathToFileURL } from "node:url";

import pg from "pg";

import { Client, type Lease } from "lockbroker";

/** A newer lease has claimed the row; this holder must not write. */
export class StaleFence extends Error {
  override name = "StaleFence";
}

const ident = (table: string): string => pg.escapeIdentifier(table);

/** A table of counters, each row with the last fence that claimed it. */
export async function createTable(db: pg.ClientBase, table: string): Promise<void> {
  await db.query(
    `CREATE TABLE IF NOT EXISTS ${ident(table)} (` +
      "id bigint PRIMARY KEY, fence bigint NOT NULL DEFAULT 0, value bigint NOT NULL DEFAULT 0)",
  );
}

/**
 * Step 1: records `fence` on the row if it is the largest yet; returns the row's
 * value. Throws {@link StaleFence} if a newer (or the same) fence got there first.
 */
export async function claim(db: pg.ClientBase, table: string, id: number, fence: number): Promise<number> {
  const result = await db.query<{ value: string }>(
    `UPDATE ${ident(table)} SET fence = $1 WHERE id = $2 AND fence < $1 RETURNING value`,
    [fence, id],
  );
  if (result.rowCount === 0) throw new StaleFence(`row ${id} was claimed by a fence newer than ${fence}`);
  return Number(result.rows[0]!.value);
}

/** Step 2: writes `value` only while the row still carries `fence`. */
export async function write(db: pg.ClientBase, table: string, id: number, fence: number, value: number): Promise<void> {
  const result = await db.query(`UPDATE ${ident(table)} SET value = $1 WHERE id = $2 AND fence = $3`, [
    value,
    id,
    fence,
  ]);
  if (result.rowCount === 0) throw new StaleFence(`row ${id} was claimed by a fence newer than ${fence}`);
}

/**
 * Claims the row with the lease's fence, computes the new value from the old
 * one, and writes it. Returns the value written.
 */
export async function updateRow(
  db: pg.ClientBase,
  table: string,
  id: number,
  lease: Lease,
  compute: (value: number) => number,
): Promise<number> {
  const current = await claim(db, table, id, lease.fence);
  const value = compute(current);
  lease.throwIfLost(); // a cheap early exit; the fence check in write() is the real guard
  await write(db, table, id, lease.fence, value);
  return value;
}

/** Adds one to the counter in row 1 of `table`, under the lock `<table>:1`. */
export async function main(): Promise<void> {
  const table = env["CLAIM_FIRST_TABLE"] || "claim_first_demo";
  const client = Client.fromEnv();
  const db = new pg.Client({ connectionString: env["DATABASE_URL"] || "postgres://postgres@127.0.0.1:5432/test" });
  await db.connect();
  try {
    await createTable(db, table);
    await db.query(`INSERT INTO ${ident(table)} (id) VALUES (1) ON CONFLICT DO NOTHING`);
    await using lease = await client.lock(`${table}:1`, { ttlMs: 10_000, waitMs: 10_000 });
    const value = await updateRow(db, table, 1, lease, (v) => v + 1);
    console.log(`fence ${lease.fence}: counter is now ${value}`);
  } finally {
    await db.end();
  }
}

if (argv[1] && import.meta.url === pathToFileURL(argv[1]).href) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}
