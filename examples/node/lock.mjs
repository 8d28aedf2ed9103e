// Take a lockbroker lock with the TypeScript client (clients/typescript), print
// the fence, show what a second worker sees, and release the lock. A lock
// already held makes it print "busy: ..." and exit 75 (EX_TEMPFAIL).
// Node 18+; build the client first (cd clients/typescript && npm ci && npm run build).
//
//   LOCKBROKER_URL=http://127.0.0.1:7700 [LOCKBROKER_API_KEY=...] node lock.mjs [NAME]
//
// The token is a secret: it stays in the lease and is never printed.

import { Client, LeaseLost, LockBusy } from "../../clients/typescript/dist/index.js";

const name = process.argv[2] ?? "example-node";
const client = Client.fromEnv();

async function main() {
  let lease;
  try {
    // lock() renews the lease every ttlMs / 3 until release().
    lease = await client.lock(name, { ttlMs: 10_000, owner: "node-example" });
  } catch (error) {
    if (error instanceof LockBusy) {
      console.log(`busy: ${name} is held by ${error.owner} (fence ${error.fence}); retry in ${error.retryAfterMs / 1000}s`);
      return 75;
    }
    throw error;
  }
  try {
    console.log(`acquired ${name} with fence ${lease.fence}`);

    // Another worker asking now is told who holds the lock and when to retry.
    try {
      await client.acquire(name, { ttlMs: 10_000, waitMs: 200, owner: "second-worker" });
      throw new Error("expected lock_busy for a second acquire");
    } catch (error) {
      if (!(error instanceof LockBusy)) throw error;
      console.log(`second worker: busy, held by ${error.owner} with fence ${error.fence}, retry in ${error.retryAfterMs / 1000}s`);
    }

    // The work: lease.signal aborts the moment the lease is lost.
    await new Promise((resolve) => setTimeout(resolve, 100));
    lease.signal.throwIfAborted();
  } finally {
    try {
      await lease.release();
    } catch (error) {
      if (error instanceof LeaseLost) {
        console.error("lease lost before release: treat the work as possibly duplicated");
        return 1;
      }
      throw error;
    }
  }
  console.log(`released: fence ${lease.fence}`);
  return 0;
}

main().then(
  (code) => process.exit(code),
  (error) => {
    console.error(`error: ${error.message}`);
    process.exit(1);
  },
);
