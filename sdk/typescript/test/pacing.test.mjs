// Paced heartbeats (docs/contract.md §5.7): a plain heartbeat (nothing new)
// waits for the last answer's nextHeartbeatInMs when it is longer than the
// interval; changed progress still goes out at the interval, a checkpoint at
// once; without the field (an older Servo) or with a hint under the
// interval, every heartbeat comes at the interval. The handler runs 2.5 s
// with a 100 ms interval: some 25 heartbeats at the interval, 2 or 3 a
// second apart. Counts with wide margins, never durations: a loaded machine
// only makes timers late, so fewer heartbeats.

import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { Readable } from "node:stream";
import * as sw from "../dist/index.js";

const RUN_MS = 2500;

async function fakeServo(hints) {
  const calls = [];
  const srv = http.createServer(async (req, res) => {
    let raw = "";
    for await (const c of req) raw += c;
    const op = req.url.split("/").pop();
    calls.push({ op, body: raw ? JSON.parse(raw) : {} });
    const body = op === "completed"
      ? { acknowledged: true, disposition: "COMMITTED", finalState: "SUCCEEDED" }
      : { acknowledged: true, disposition: "CONTINUE", ...(op === "heartbeat" ? { shouldCancel: false } : {}) };
    const h = hints[op];
    if (h !== undefined) body.nextHeartbeatInMs = h;
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify(body));
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${srv.address().port}`;
  return {
    ops: (op) => calls.filter((c) => c.op === op),
    close: () => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }),
    envelope: () => ({
      taskId: "task_01TEST", runId: "run_01TEST", taskKey: "k", tenantId: "acme", workspaceId: "ws", attempt: 1,
      worker: "ts", payload: {}, callbackBaseUrl: url + "/", taskToken: "tok-1",
      tokenExpiresAt: new Date(Date.now() + 3600_000).toISOString(), heartbeatIntervalMs: 100, heartbeatTimeoutMs: 60_000,
      cancelGracePeriodMs: 300,
    }),
  };
}

async function deliver(handler, body) {
  const req = Readable.from([Buffer.from(JSON.stringify(body))]);
  Object.assign(req, { method: "POST", headers: { "content-type": "application/json" } });
  return await new Promise((resolve) => {
    const res = {
      headersSent: false,
      writeHead(status) { this.status = status; this.headersSent = true; },
      end(b) { resolve([this.status, JSON.parse(b)]); },
    };
    handler(req, res);
  });
}

const cases = [
  { name: "paced: plain heartbeats wait for the hint", hints: { heartbeat: 1000 }, min: 1, max: 4 },
  { name: "paced from the started answer", hints: { started: 1000, heartbeat: 1000 }, min: 1, max: 3 },
  { name: "no hint (an older Servo): the interval", hints: {}, min: 8, max: 100 },
  { name: "a hint under the interval: the interval", hints: { heartbeat: 50 }, min: 8, max: 100 },
  { name: "changing progress: the interval", hints: { heartbeat: 1000 }, progress: true, min: 8, max: 100 },
  { name: "a checkpoint goes out at once", hints: { started: 5000, heartbeat: 5000 }, checkpoint: true, min: 1, max: 1 },
];

for (const c of cases) {
  test(`paced heartbeats: ${c.name}`, async (t) => {
    const f = await fakeServo(c.hints);
    t.after(f.close);
    const h = sw.pushHandler(async (task) => {
      const end = performance.now() + RUN_MS;
      for (let i = 0; performance.now() < end; i++) {
        if (c.progress) task.progress(i % 100);
        if (c.checkpoint && i === 10) task.checkpoint({ i });
        await task.sleep(20);
      }
      return 1;
    }, { workerId: "ts-test", logger: () => {}, retryBackoffMs: [1, 10], requestTimeoutMs: 5000 });
    const [s, a] = await deliver(h, f.envelope());
    assert.equal(s, 200);
    assert.equal(a.result, "committed");
    const beats = f.ops("heartbeat");
    assert.ok(beats.length >= c.min && beats.length <= c.max, `${beats.length} heartbeats in ${RUN_MS} ms, want ${c.min} to ${c.max}`);
    if (c.checkpoint) assert.deepEqual(beats[0].body.checkpoint, { i: 10 });
  });
}
