// Acquire, extend and release a lockbroker lock with fetch, print the fence, and
// handle a busy lock. Node 18+ and no dependencies.
//
//   LOCKBROKER_URL=http://127.0.0.1:7700 [LOCKBROKER_API_KEY=...] node lock.mjs [NAME]
//
// The token is a secret: it is kept in memory and never printed.

const baseUrl = process.env.LOCKBROKER_URL ?? "http://127.0.0.1:7700";
const apiKey = process.env.LOCKBROKER_API_KEY;
const name = process.argv[2] ?? "example-node";

/** A non-2xx answer: `code` is the broker's error code (lock_busy, lease_lost, ...). */
class BrokerError extends Error {
  constructor(status, error, retryAfter) {
    super(`${error.code} (${status}): ${error.message}`);
    Object.assign(this, error, { status, retryAfter });
  }
}

/** POSTs `body` to `path`; resolves to the JSON answer, rejects with BrokerError. */
async function call(path, body, timeoutMs = 15000) {
  const headers = { "content-type": "application/json" };
  if (apiKey) headers.authorization = `Bearer ${apiKey}`;
  const response = await fetch(baseUrl + path, {
    method: "POST",
    headers,
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = data.error ?? { code: `http_${response.status}`, message: response.statusText };
    throw new BrokerError(response.status, error, response.headers.get("retry-after"));
  }
  return data;
}

const lockPath = (action) => `/v1/locks/${encodeURIComponent(name)}/${action}`;
const acquire = (owner, ttlMs, waitMs = 0) =>
  call(lockPath("acquire"), { ttl_ms: ttlMs, wait_ms: waitMs, owner }, 15000 + waitMs);

async function main() {
  let lease;
  try {
    lease = await acquire("node-example", 10000);
  } catch (error) {
    if (error.code === "lock_busy") {
      console.log(`busy: ${name} is held by ${error.owner} (fence ${error.fence}); retry in ${error.retryAfter}s`);
      return 75;
    }
    throw error;
  }
  console.log(`acquired ${name} with fence ${lease.fence}`);

  // Another worker asking now is told who holds the lock and when to retry.
  try {
    await acquire("second-worker", 10000, 200);
    throw new Error("expected lock_busy for a second acquire");
  } catch (error) {
    if (error.code !== "lock_busy") throw error;
    console.log(`second worker: busy, held by ${error.owner} with fence ${error.fence}, retry in ${error.retryAfter}s`);
  }

  const renewal = await call(lockPath("extend"), { token: lease.token, ttl_ms: 20000 });
  console.log(`extended: fence ${renewal.fence}, ttl ${renewal.ttl_ms} ms`);

  try {
    const released = await call(lockPath("release"), { token: lease.token });
    console.log(`released: fence ${released.fence}`);
  } catch (error) {
    if (error.code === "lease_lost") {
      console.error("lease lost before release: treat the work as possibly duplicated");
      return 1;
    }
    throw error;
  }
  return 0;
}

main().then(
  (code) => process.exit(code),
  (error) => {
    console.error(`error: ${error.message}`);
    process.exit(1);
  },
);
