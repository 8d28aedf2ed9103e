/**
 * The test harness: a real redis-server and lockbroker on free loopback ports.
 * Each test file starts the pair it needs, most through `brokerForFile()` (node
 * --test runs files in their own processes); tests that pause, stop or
 * configure a broker start their own.
 *
 * With LOCKBROKER_TEST_MODE=quorum every broker started here runs in quorum
 * mode, over its Redis and two more started for that Redis
 * (`RedisServer.quorumNodes()`), so the same tests check the client against
 * quorum mode's answers.
 */

import { spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { request as httpsRequest } from "node:https";
import { createServer, connect } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { Client } from "lockbroker";

const here = dirname(fileURLToPath(import.meta.url));
/** The repository root (this file runs from clients/typescript/build/test). */
export const REPO = resolve(here, "../../../..");
const BROKER_BIN = process.env["LOCKBROKER_BIN"] || join(REPO, "target/debug/lockbroker");
const TEST_MODE = process.env["LOCKBROKER_TEST_MODE"] ?? "";

export const workdir = mkdtempSync(join(tmpdir(), "lockbroker-ts-"));
process.on("exit", () => rmSync(workdir, { recursive: true, force: true }));

export function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => done(typeof address === "object" && address ? address.port : 0));
    });
  });
}

/** Polls `check` every 20 ms for up to `timeoutMs`. */
export async function waitUntil(check: () => Promise<boolean> | boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await sleep(20);
  }
  return false;
}

async function stopProcess(child: ChildProcess | undefined, graceMs: number): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((done) => child.once("exit", done));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(timer);
}

/**
 * A redis-server that keeps nothing on disk; a replica of `replicaOf` when
 * given. In quorum mode it has two peers, the other nodes of its brokers'
 * quorum, which stop with it.
 */
export class RedisServer {
  port = 0;
  child: ChildProcess | undefined;
  #peers: Promise<RedisServer[]> | undefined;

  get url(): string {
    return `redis://127.0.0.1:${this.port}/0`;
  }

  static async start(replicaOf?: RedisServer): Promise<RedisServer> {
    const server = new RedisServer();
    server.port = await freePort();
    const dir = mkdtempSync(join(workdir, "redis-"));
    const args = ["--port", String(server.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir];
    if (replicaOf) {
      // The primary would otherwise wait 5 s for more replicas before a sync.
      await replicaOf.command("CONFIG SET repl-diskless-sync-delay 0");
      args.push("--replicaof", "127.0.0.1", String(replicaOf.port));
    }
    server.child = spawn("redis-server", args, { stdio: "ignore" });
    if (!(await waitUntil(() => server.pings(), 10_000))) {
      await server.stop();
      throw new Error(`redis-server did not answer on port ${server.port}`);
    }
    if (replicaOf && !(await waitUntil(() => server.synced(replicaOf), 10_000))) {
      await server.stop();
      throw new Error(`the replica on port ${server.port} did not sync with port ${replicaOf.port}`);
    }
    return server;
  }

  /** This server and its two peers (started on the first call), as quorum mode's `redis.nodes`. */
  async quorumNodes(): Promise<string[]> {
    this.#peers ??= Promise.all([RedisServer.start(), RedisServer.start()]);
    return [this.url, ...(await this.#peers).map((peer) => peer.url)];
  }

  /**
   * Whether this replica's link to `primary` is up and the primary counts it:
   * for up to a second after the link is up, a WAIT on the primary may not.
   */
  async synced(primary: RedisServer): Promise<boolean> {
    try {
      if (!(await this.command("INFO replication")).includes("master_link_status:up")) return false;
      const acked = await primary.command("SET lockbroker-ts:probe 1", "DEL lockbroker-ts:probe", "WAIT 1 100");
      return acked === "1";
    } catch {
      return false;
    }
  }

  /**
   * Sends inline commands on one connection; resolves to the answer to the
   * last: a simple or bulk string, or an integer as text.
   */
  command(...lines: string[]): Promise<string> {
    return new Promise((done, fail) => {
      const socket = connect(this.port, "127.0.0.1");
      let data = Buffer.alloc(0);
      const answers: string[] = [];
      const finish = (error: Error | undefined): void => {
        socket.destroy();
        if (error) fail(error);
        else done(answers[answers.length - 1] ?? "");
      };
      socket.setTimeout(1000);
      socket.once("connect", () => socket.write(lines.map((line) => `${line}\r\n`).join("")));
      socket.on("data", (chunk: Buffer) => {
        data = Buffer.concat([data, chunk]);
        for (;;) {
          const end = data.indexOf("\r\n");
          if (end < 0) return;
          const head = data.subarray(0, end).toString();
          let rest = end + 2;
          if (head.startsWith("+") || head.startsWith(":")) {
            answers.push(head.slice(1));
          } else if (head === "$-1") {
            answers.push("");
          } else if (head.startsWith("$")) {
            const size = Number(head.slice(1));
            if (data.length < rest + size + 2) return;
            answers.push(data.subarray(rest, rest + size).toString());
            rest += size + 2;
          } else {
            return finish(new Error(`redis answered ${head} to ${lines[answers.length]}`));
          }
          data = data.subarray(rest);
          if (answers.length === lines.length) return finish(undefined);
        }
      });
      socket.once("error", (error) => finish(error));
      socket.once("timeout", () => finish(new Error(`redis did not answer ${lines.join("; ")}`)));
    });
  }

  /** SIGSTOP: the port stays open but nothing answers (a paused replica acknowledges nothing). */
  pause(): void {
    this.child?.kill("SIGSTOP");
  }

  resume(): void {
    this.child?.kill("SIGCONT");
  }

  pings(): Promise<boolean> {
    return new Promise((done) => {
      const socket = connect(this.port, "127.0.0.1");
      socket.setTimeout(1000);
      socket.once("connect", () => socket.write("PING\r\n"));
      socket.once("data", (data) => {
        done(data.toString().startsWith("+PONG"));
        socket.destroy();
      });
      socket.once("error", () => done(false));
      socket.once("timeout", () => {
        done(false);
        socket.destroy();
      });
    });
  }

  async stop(): Promise<void> {
    this.resume();
    await stopProcess(this.child, 5000);
    const peers = await this.#peers?.catch(() => []);
    for (const peer of peers ?? []) await peer.stop();
  }
}

/** A lockbroker process pointed at a RedisServer. */
export class Broker {
  url = "";
  child: ChildProcess | undefined;
  log = "";

  static async start(redis: RedisServer, env: Record<string, string> = {}): Promise<Broker> {
    if (!existsSync(BROKER_BIN)) {
      throw new Error(`no broker binary at ${BROKER_BIN}: run \`cargo build -p lockbroker-server\` or set LOCKBROKER_BIN`);
    }
    env = { ...(await testModeEnv(redis, env)), ...env };
    const broker = new Broker();
    broker.log = join(workdir, `broker-${Math.random().toString(16).slice(2, 10)}.log`);
    for (let attempt = 0; attempt < 3; attempt++) {
      // A free port can be taken between the probe and the bind.
      const port = await freePort();
      const out = openSync(broker.log, "a");
      const scheme = env["LOCKBROKER_HTTP_TLS_CERT_PATH"] ? "https" : "http";
      broker.url = `${scheme}://127.0.0.1:${port}`;
      broker.child = spawn(BROKER_BIN, [], {
        env: {
          PATH: process.env["PATH"] ?? "/usr/bin:/bin",
          LOCKBROKER_LISTEN: `127.0.0.1:${port}`,
          LOCKBROKER_REDIS_URL: redis.url,
          LOCKBROKER_LOG_LEVEL: "info",
          ...env,
        },
        stdio: ["ignore", out, out],
      });
      if (await waitUntil(() => broker.ready(), 15_000)) return broker;
      await broker.stop();
    }
    throw new Error(`lockbroker did not start; its log:\n${readFileSync(broker.log, "utf8").slice(-3000)}`);
  }

  async ready(): Promise<boolean> {
    if (!this.child || this.child.exitCode !== null) return false;
    if (this.url.startsWith("https:")) return this.#readyOverTls();
    try {
      const response = await fetch(`${this.url}/readyz`, { signal: AbortSignal.timeout(1000) });
      return response.status === 200;
    } catch {
      return false;
    }
  }

  /** /readyz over TLS, trusting any certificate: it only waits for the broker. */
  #readyOverTls(): Promise<boolean> {
    return new Promise((done) => {
      const request = httpsRequest(`${this.url}/readyz`, { rejectUnauthorized: false, timeout: 1000 }, (response) => {
        response.resume();
        done(response.statusCode === 200);
      });
      request.once("error", () => done(false));
      request.once("timeout", () => request.destroy());
      request.end();
    });
  }

  /** SIGSTOP: the port stays open but nothing answers. */
  pause(): void {
    this.child?.kill("SIGSTOP");
  }

  resume(): void {
    this.child?.kill("SIGCONT");
  }

  async stop(): Promise<void> {
    this.resume();
    await stopProcess(this.child, 10_000);
  }
}

/**
 * What LOCKBROKER_TEST_MODE adds to a broker's settings, unless `env` sets a
 * mode: for quorum, the mode and its nodes, each node's timeout the command
 * timeout (as the Rust test harness sets them).
 */
async function testModeEnv(redis: RedisServer, env: Record<string, string>): Promise<Record<string, string>> {
  if (TEST_MODE !== "quorum" || env["LOCKBROKER_REDIS_MODE"]) return {};
  return {
    LOCKBROKER_REDIS_MODE: "quorum",
    LOCKBROKER_REDIS_NODES: (await redis.quorumNodes()).join(","),
    LOCKBROKER_REDIS_NODE_TIMEOUT_MS: env["LOCKBROKER_REDIS_COMMAND_TIMEOUT_MS"] ?? "1000",
  };
}

/** Stops every server it started, at the end of a test file. */
export class Servers {
  #started: Array<RedisServer | Broker> = [];

  async redis(replicaOf?: RedisServer): Promise<RedisServer> {
    const server = await RedisServer.start(replicaOf);
    this.#started.push(server);
    return server;
  }

  async broker(redis: RedisServer, env: Record<string, string> = {}): Promise<Broker> {
    const server = await Broker.start(redis, env);
    this.#started.push(server);
    return server;
  }

  async stopAll(): Promise<void> {
    for (const server of this.#started.reverse()) await server.stop();
    this.#started = [];
  }
}

/** What `brokerForFile()` starts for one test file. */
export interface FileBroker {
  /** Starts more servers for single tests; they stop with the file's. */
  servers: Servers;
  redis: RedisServer;
  broker: Broker;
  /** A client of `broker` with a 5 s timeout. */
  client: Client;
}

/**
 * Starts a Redis and a broker on it (`env` configures the broker) for the test
 * file that awaits it at its top level, and stops them, with every server its
 * tests start through `servers`, once the file's tests are done:
 *
 *     const { broker, client } = await brokerForFile();
 */
export async function brokerForFile(env: Record<string, string> = {}): Promise<FileBroker> {
  const servers = new Servers();
  after(() => servers.stopAll());
  try {
    const redis = await servers.redis();
    const broker = await servers.broker(redis, env);
    return { servers, redis, broker, client: new Client(broker.url, { timeoutMs: 5000 }) };
  } catch (error) {
    await servers.stopAll(); // the file fails before its tests, and leaves nothing running
    throw error;
  }
}

let counter = 0;

/** A lock name of the test's own. */
export function lockName(label: string): string {
  counter += 1;
  return `${label.replace(/[^A-Za-z0-9._:-]/g, "-").slice(0, 60)}-${process.pid}-${counter}`;
}

/** Ends whatever lease holds `name`, as an operator would. */
export async function forceRelease(url: string, name: string): Promise<void> {
  const response = await fetch(`${url}/v1/locks/${encodeURIComponent(name)}`, { method: "DELETE" });
  if (response.status !== 200) throw new Error(`force release answered ${response.status}`);
}

/** Writes an API keys file with one key of these scopes and prefixes; returns its path. */
export function keysFile(key: string, scopes: string[], prefixes: string[]): string {
  const sum = createHash("sha256").update(key).digest("hex");
  const list = (items: string[]): string => `[${items.map((i) => JSON.stringify(i)).join(", ")}]`;
  const path = join(workdir, `keys-${Math.random().toString(16).slice(2, 10)}.toml`);
  writeFileSync(
    path,
    `[[keys]]\nid = "ts-tests"\nsha256 = "${sum}"\nscopes = ${list(scopes)}\nprefixes = ${list(prefixes)}\n`,
  );
  return path;
}

export { sleep };
