/**
 * HTTPS with a private CA: the client leaves trust to the runtime, so on Node
 * NODE_EXTRA_CA_CERTS adds the CA. Certificates come from the openssl command;
 * the test skips without it.
 */

import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";

import { Broker, Servers, workdir } from "./harness.js";

const servers = new Servers();
let broker: Broker | undefined;
let caPath = "";
let missing = "";

/** A private CA and a certificate for 127.0.0.1 signed by it. */
function certificates(): { ca: string; cert: string; key: string } {
  const dir = mkdtempSync(join(workdir, "tls-"));
  const openssl = (...args: string[]): void => {
    execFileSync("openssl", args, { cwd: dir, stdio: "ignore" });
  };
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  openssl("req", "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=lockbroker test CA");
  openssl("req", ...ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1");
  writeFileSync(join(dir, "ext"), "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
  openssl(
    "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
    "-out", "server.pem", "-days", "1", "-extfile", "ext",
  );
  return { ca: join(dir, "ca.pem"), cert: join(dir, "server.pem"), key: join(dir, "server.key") };
}

before(async () => {
  let files;
  try {
    files = certificates();
  } catch (error) {
    missing = `openssl could not make certificates: ${String(error)}`;
    return;
  }
  caPath = files.ca;
  broker = await servers.broker(await servers.redis(), {
    LOCKBROKER_HTTP_TLS_CERT_PATH: files.cert,
    LOCKBROKER_HTTP_TLS_KEY_PATH: files.key,
  });
});
after(() => servers.stopAll());

/** Runs a status call in a fresh Node process (the CA is read at its start). */
async function statusIn(env: Record<string, string>): Promise<string> {
  const script = `
    import { Client } from "lockbroker";
    try {
      const status = await new Client(${JSON.stringify(broker!.url)}).status("tls-probe");
      console.log("held=" + status.held);
    } catch (error) {
      console.log(error.name + ": " + error.message);
    }`;
  const { stdout } = await promisify(execFile)(process.execPath, ["--input-type=module", "-e", script], {
    env: { PATH: process.env["PATH"] ?? "", ...env },
    cwd: process.cwd(),
    timeout: 30_000,
  });
  return stdout.trim();
}

test("https needs the private CA, and NODE_EXTRA_CA_CERTS gives it", async (t) => {
  if (!broker) return t.skip(missing);
  assert.match(await statusIn({}), /^BrokerUnavailable: .*certificate/);
  assert.equal(await statusIn({ NODE_EXTRA_CA_CERTS: caPath }), "held=false");
});
