/** The event-stream parser, and a resume's repeats left out, against a scripted server. */

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";

import { Client, type WatchEvent } from "lockbroker";

import { SseParser } from "../src/sse.js";

test("the parser takes lines split anywhere, CRLF or CR or LF, and skips comments", () => {
  const parser = new SseParser();
  const text = ': keep-alive\r\nevent: acquired\r\nid: 7\r\ndata: {"a":\r\ndata: 1}\r\n\r\nevent: released\rdata: x\r\rdata: y\n\n';
  const messages = [];
  for (let i = 0; i < text.length; i += 3) messages.push(...parser.feed(text.slice(i, i + 3)));
  assert.deepEqual(
    messages.map((m) => [m.event, m.data, m.id, m.lastEventId]),
    [
      ["acquired", '{"a":\n1}', "7", "7"],
      ["released", "x", undefined, "7"],
      ["message", "y", undefined, "7"],
    ],
  );
});

function change(type: string, id: number, fence: number): string {
  return `event: ${type}\nid: ${id}\ndata: ${JSON.stringify({ name: "job", fence, mode: "exclusive", owner: "w", expires_in_ms: 0 })}\n\n`;
}

test("a watch reconnects with Last-Event-ID and drops the events a resume repeats", async () => {
  const seenHeaders: Array<string | undefined> = [];
  const server = createServer((request, response) => {
    seenHeaders.push(request.headers["last-event-id"] as string | undefined);
    response.writeHead(200, { "content-type": "text/event-stream" });
    if (seenHeaders.length === 1) {
      response.end(change("acquired", 1, 10) + change("extended", 2, 10)); // then the stream is cut
    } else {
      // A broker may repeat what came before the id it was given.
      response.write(change("extended", 2, 10) + change("released", 3, 10));
    }
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  const watch = new Client(`http://127.0.0.1:${port}`).watch("job");
  const events: WatchEvent[] = [];
  try {
    for await (const event of watch) {
      events.push(event);
      if (events.length === 3) break;
    }
  } finally {
    watch.close();
    server.closeAllConnections();
    server.close();
  }
  assert.deepEqual(
    events.map((e) => [e.type, e.id]),
    [
      ["acquired", 1],
      ["extended", 2],
      ["released", 3],
    ],
  );
  assert.deepEqual(seenHeaders, [undefined, "2"]);
  assert.equal(watch.lastEventId, "3");
});
