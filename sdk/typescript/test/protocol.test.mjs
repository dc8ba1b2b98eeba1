// Protocol unit tests of the TypeScript SDK against a scripted callback
// server (docs/contract.md §4.4 as the worker sees it), with Node's own
// test runner: node --test test/ (after tsc). They assert counts and
// events, never durations. Run by `go test ./sdk/typescript/`.

import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { Readable } from "node:stream";
import * as sw from "../dist/index.js";
import { judge, outcome, Task } from "../dist/run.js";

const TOKEN = "tok-SECRET-4f9a1c.initial";
const REFRESHED = "tok-SECRET-77b2e0.refreshed";

// fakeServo answers callbacks with respond(op, n, body) → {status, body, raw, headers, delayMs} (undefined: accept).
async function fakeServo(respond = () => undefined) {
  const calls = [];
  const srv = http.createServer(async (req, res) => {
    let raw = "";
    for await (const c of req) raw += c;
    const op = req.url.split("/").pop();
    const n = calls.filter((c) => c.op === op).length + 1;
    const body = raw ? JSON.parse(raw) : {};
    calls.push({ op, body, auth: req.headers.authorization, traceparent: req.headers.traceparent });
    let a = respond(op, n, body) ?? accept(op);
    if (a.delayMs) await new Promise((r) => setTimeout(r, a.delayMs));
    if (a.status === undefined) a = { ...accept(op), ...a };
    res.writeHead(a.status, { "Content-Type": a.raw !== undefined ? "text/html" : "application/json", ...(a.headers ?? {}) });
    res.end(a.raw !== undefined ? a.raw : JSON.stringify(a.body));
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${srv.address().port}`;
  return {
    calls,
    url,
    ops: (op) => calls.filter((c) => c.op === op),
    close: () => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }),
    envelope: (over = {}) => ({
      taskId: "task_01TEST", runId: "run_01TEST", taskKey: "k", tenantId: "acme", workspaceId: "ws", attempt: 1,
      worker: "ts", payload: { rows: 3 }, callbackBaseUrl: url + "/", taskToken: TOKEN,
      tokenExpiresAt: new Date(Date.now() + 3600_000).toISOString(), heartbeatIntervalMs: 100, heartbeatTimeoutMs: 60_000,
      cancelGracePeriodMs: 300, ...over,
    }),
  };
}

function accept(op) {
  if (op === "completed") return { status: 200, body: { acknowledged: true, disposition: "COMMITTED", finalState: "SUCCEEDED" } };
  if (op === "heartbeat") return { status: 200, body: { acknowledged: true, disposition: "CONTINUE", shouldCancel: false } };
  return { status: 200, body: { acknowledged: true, disposition: "CONTINUE" } };
}

const refuse = (status, error, disposition) => ({ status, body: { disposition, error, message: error + " (fake)" } });

function logs() {
  const lines = [];
  const logger = (level, message, fields) => lines.push(JSON.stringify({ level, message, ...fields }));
  return { lines, logger };
}

// deliver POSTs an envelope to a push handler as node:http would, and returns [status, answer].
async function deliver(handler, body, { method = "POST", headers = {}, parsed } = {}) {
  const data = typeof body === "string" ? body : JSON.stringify(body);
  const req = Readable.from(parsed === undefined ? [Buffer.from(data)] : []);
  Object.assign(req, { method, headers: { "content-type": "application/json", ...headers } });
  if (parsed !== undefined) req.body = parsed;
  return await new Promise((resolve) => {
    const res = {
      headersSent: false,
      writeHead(status, h) { this.status = status; this.h = h; this.headersSent = true; },
      end(b) { resolve([this.status, JSON.parse(b)]); },
    };
    handler(req, res);
  });
}

const opts = (l) => ({ workerId: "ts-test", logger: l.logger, retryBackoffMs: [1, 10], requestTimeoutMs: 5000 });

test("started, heartbeats, then completed once; every callback with a traceparent continuing the delivery's", async (t) => {
  const f = await fakeServo();
  t.after(f.close);
  const l = logs();
  const h = sw.pushHandler(async (task) => {
    task.checkpoint({ next: 1 });
    await task.sleep(350);
    return { rows: task.payload.rows };
  }, opts(l));
  const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  const [status, ans] = await deliver(h, f.envelope(), { headers: { traceparent: tp } });
  assert.equal(status, 200);
  assert.equal(ans.result, "committed");
  assert.equal(f.calls[0].op, "started");
  assert.equal(f.ops("completed").length, 1);
  assert.deepEqual(f.ops("completed")[0].body.output, { rows: 3 });
  assert.ok(f.ops("heartbeat").length >= 1);
  assert.deepEqual(f.ops("heartbeat")[0].body.checkpoint, { next: 1 });
  for (const c of f.calls) {
    assert.match(c.traceparent, /^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/);
    assert.equal(c.auth, "Bearer " + TOKEN);
  }
  assert.ok(!l.lines.join("\n").includes(TOKEN), "a task token was logged");
});

test("Express-style: a body already parsed by express.json()", async (t) => {
  const f = await fakeServo();
  t.after(f.close);
  const h = sw.pushHandler(() => 1, opts(logs()));
  const [status, ans] = await deliver(h, "", { parsed: f.envelope() });
  assert.deepEqual([status, ans.result], [200, "committed"]);
});

test("bad deliveries", async () => {
  const h = sw.pushHandler(() => 1, opts(logs()));
  assert.deepEqual((await deliver(h, "{}", { method: "GET" }))[0], 405);
  const [s1, a1] = await deliver(h, "not json");
  assert.deepEqual([s1, a1.result], [400, "bad_envelope"]);
  const [s2, a2] = await deliver(h, { taskId: "t", attempt: 1 });
  assert.deepEqual([s2, a2.result], [400, "bad_envelope"]);
  const [s3, a3] = await deliver(h, "x".repeat((1 << 20) + 1));
  assert.deepEqual([s3, a3.result], [413, "envelope_too_large"]);
});

test("refused at started: the handler never runs", async (t) => {
  for (const [status, code, disp, result] of [
    [409, "task_already_terminal", "CANCELLED", "not_started"],
    [409, "attempt_already_started", "CANCELLED", "not_started"],
    [410, "task_expired", "CANCELLED", "not_started"],
    [401, "invalid_token", "REJECTED", "rejected"],
    [500, "internal", "REJECTED", "rejected"],
  ]) {
    const f = await fakeServo((op) => (op === "started" ? refuse(status, code, disp) : undefined));
    t.after(f.close);
    let ran = 0;
    const [s, a] = await deliver(sw.pushHandler(() => ran++, opts(logs())), f.envelope());
    assert.deepEqual([s, a.result, ran, f.calls.length], [200, result, 0, 1], `${status} ${code}`);
  }
});

test("503 RETRY and gateway pages are retried with the same body; a Servo REJECTED 500 is final", async (t) => {
  const f = await fakeServo((op, n) => {
    if (op === "completed" && n === 1) return { ...refuse(503, "unavailable", "RETRY"), headers: { "Retry-After": "0" } };
    if (op === "completed" && n === 2) return { status: 502, raw: "<html>bad gateway</html>" };
    return undefined;
  });
  t.after(f.close);
  const [s, a] = await deliver(sw.pushHandler(() => ({ x: 1 }), opts(logs())), f.envelope());
  assert.deepEqual([s, a.result], [200, "committed"]);
  const done = f.ops("completed");
  assert.equal(done.length, 3);
  assert.deepEqual(done[1].body, done[0].body);
  assert.deepEqual(done[2].body, done[0].body);

  const g = await fakeServo((op) => (op === "completed" ? refuse(500, "internal", "REJECTED") : undefined));
  t.after(g.close);
  const [s2, a2] = await deliver(sw.pushHandler(() => 1, opts(logs())), g.envelope());
  assert.deepEqual([s2, a2.result, g.ops("completed").length], [200, "rejected", 1]);
});

test("Servo unreachable at started: 503 so Cloud Tasks redelivers", async (t) => {
  const f = await fakeServo(() => refuse(503, "unavailable", "RETRY"));
  t.after(f.close);
  const [s, a] = await deliver(sw.pushHandler(() => 1, { ...opts(logs()), startRetryWindowMs: 200 }), f.envelope());
  assert.deepEqual([s, a.result], [503, "servo_unreachable"]);
  assert.ok(f.ops("started").length > 1);
});

test("410 on a heartbeat: the signal aborts with LeaseLostError and nothing more is sent", async (t) => {
  const f = await fakeServo((op, n) => (op === "heartbeat" && n === 2 ? refuse(410, "task_expired", "CANCELLED") : undefined));
  t.after(f.close);
  let cause;
  const [s, a] = await deliver(sw.pushHandler(async (task) => {
    await task.sleep(20_000);
    cause = task.signal.reason;
    return "late";
  }, opts(logs())), f.envelope());
  assert.ok(cause instanceof sw.LeaseLostError);
  assert.equal(cause.code, "task_expired");
  assert.deepEqual([s, a.result, f.ops("completed").length, f.ops("heartbeat").length], [200, "lease_lost", 0, 2]);
});

test("shouldCancel: CANCELLED with the checkpoint and the phase", async (t) => {
  const f = await fakeServo((op, n) => (op === "heartbeat" && n === 2
    ? { status: 200, body: { disposition: "CONTINUE", shouldCancel: true, cancelReason: "user_requested" } } : undefined));
  t.after(f.close);
  const [s, a] = await deliver(sw.pushHandler(async (task) => {
    task.setPhase("rows");
    task.checkpoint({ next: 4 });
    await task.sleep(20_000);
    task.throwIfCancelled();
  }, opts(logs())), f.envelope());
  assert.deepEqual([s, a.result, a.outcome], [200, "committed", "CANCELLED"]);
  const done = f.ops("completed")[0].body;
  assert.deepEqual([done.outcome, done.cancelledDuringPhase, done.partialProgress], ["CANCELLED", "rows", { next: 4 }]);
});

test("a refreshed token is adopted for every later callback and never logged", async (t) => {
  const f = await fakeServo((op, n) => (op === "heartbeat" && n === 1
    ? { status: 200, body: { disposition: "CONTINUE", shouldCancel: false, taskToken: REFRESHED, tokenExpiresAt: new Date(Date.now() + 7200_000).toISOString() } }
    : undefined));
  t.after(f.close);
  const l = logs();
  await deliver(sw.pushHandler(async (task) => { await task.sleep(350); return 1; }, opts(l)), f.envelope());
  assert.equal(f.ops("heartbeat")[0].auth, "Bearer " + TOKEN);
  assert.equal(f.ops("completed")[0].auth, "Bearer " + REFRESHED);
  const all = l.lines.join("\n");
  assert.ok(!all.includes(TOKEN) && !all.includes(REFRESHED), "a task token was logged");
});

test("the fence counts from when the acknowledged heartbeat was sent", async (t) => {
  // Every heartbeat answered after D = 1 s; interval I = 200 ms; T = 1.8 s:
  // D+I < T < 2D+I. From the answers' arrival the fence never falls; from
  // the sending, as Servo counts the lease, it falls before the second answer.
  const f = await fakeServo((op) => (op === "heartbeat" ? { delayMs: 1000 } : undefined));
  t.after(f.close);
  let cause;
  const [s, a] = await deliver(sw.pushHandler(async (task) => {
    if (await task.sleep(12_000)) cause = task.signal.reason;
    return 1;
  }, opts(logs())), f.envelope({ heartbeatIntervalMs: 200, heartbeatTimeoutMs: 1800 }));
  assert.ok(cause instanceof sw.LeaseLostError, `cause ${cause}`);
  assert.equal(cause.code, "heartbeat_timeout");
  assert.deepEqual([s, a.result, f.ops("completed").length], [200, "lease_lost", 0]);
});

test("a duplicate delivery joins the running attempt", async (t) => {
  const f = await fakeServo();
  t.after(f.close);
  let runs = 0;
  const h = sw.pushHandler(async (task) => { runs++; await task.sleep(300); return 1; }, opts(logs()));
  const [a, b] = await Promise.all([deliver(h, f.envelope()), deliver(h, f.envelope())]);
  assert.deepEqual(a, b);
  assert.deepEqual([runs, f.ops("started").length, f.ops("completed").length], [1, 1, 1]);
});

test("judge: a Servo body is obeyed whatever its status", () => {
  const body = (d) => JSON.stringify({ disposition: d });
  assert.equal(judge("completed", 500, body("REJECTED"), null, 15000).disposition, "REJECTED");
  assert.equal(judge("heartbeat", 429, body("CONTINUE"), null, 15000).disposition, "CONTINUE");
  const r = judge("started", 503, body("RETRY"), "3", 15000);
  assert.deepEqual([r.disposition, r.retryAfterMs], ["RETRY", 3000]);
  assert.equal(judge("heartbeat", 502, "<html>", null, 15000).disposition, "RETRY");
  assert.equal(judge("heartbeat", 410, "", null, 15000).disposition, "CANCELLED");
  assert.equal(judge("completed", 204, "", null, 15000).disposition, "COMMITTED");
  assert.equal(judge("heartbeat", 418, "", null, 15000).disposition, "REJECTED");
});

test("outcomes", () => {
  const task = new Task({ taskId: "t", attempt: 1, heartbeatIntervalMs: 100 }, "w", () => {}, () => {});
  const cat = (e, cause) => outcome(cause, undefined, e, true, task);
  assert.equal(cat(new sw.DataQualityError("bad")).error.category, "DATA_QUALITY");
  assert.equal(cat(new sw.InfrastructureError("down", { retryable: false })).error.retryable, false);
  const u = cat(new TypeError("boom"));
  assert.deepEqual([u.error.category, u.error.message], ["USER_CODE", "TypeError: boom"]);
  assert.match(u.error.stackTrace, /TypeError: boom/);
  assert.equal(cat(new sw.TaskCancelledError()).outcome, "CANCELLED");
  assert.equal(cat(new Error("x"), new sw.DeadlineExceededError()).error.category, "TIMEOUT");
  const st = cat(new Error("x"), new sw.WorkerStopping());
  assert.deepEqual([st.error.category, st.error.retryable], ["INFRASTRUCTURE", true]);
  assert.equal(cat(new sw.DataQualityError("real"), new sw.CancelRequested("r")).outcome, "FAILED");
  assert.equal(cat(new Error("stopped"), new sw.CancelRequested("r")).outcome, "CANCELLED");
  assert.deepEqual(outcome(undefined, { a: 1 }, undefined, false, task), { outcome: "SUCCEEDED", output: { a: 1 } });
  const big = outcome(undefined, "x".repeat(300 << 10), undefined, false, task);
  assert.deepEqual([big.outcome, big.error.retryable], ["FAILED", false]);
  assert.throws(() => task.checkpoint("x".repeat(65 << 10)), sw.CheckpointTooLargeError);
});

test("logLevel: the default logger writes no line per heartbeat (default info); logLevel debug adds them; the level filters any logger", async (t) => {
  const f = await fakeServo();
  t.after(f.close);
  const task = async (task) => {
    const n = f.ops("heartbeat").length;
    while (!(await task.sleep(50)) && f.ops("heartbeat").length < n + 3);
    return 1;
  };
  const write = process.stderr.write;
  const lines = [];
  process.stderr.write = (chunk, ...rest) => {
    if (String(chunk).startsWith("{")) { lines.push(...String(chunk).trim().split("\n")); return true; }
    return write.call(process.stderr, chunk, ...rest);
  };
  try {
    const [status] = await deliver(sw.pushHandler(task, { workerId: "ts-quiet", retryBackoffMs: [1, 10] }), f.envelope());
    assert.equal(status, 200);
  } finally {
    process.stderr.write = write;
  }
  assert.ok(f.ops("heartbeat").length >= 3);
  const recs = lines.map((l) => JSON.parse(l)).filter((r) => r.workerId === "ts-quiet");
  assert.ok(recs.some((r) => r.message === "attempt started" && r.severity === "INFO"), "info records are written");
  assert.deepEqual(recs.filter((r) => r.severity === "DEBUG" || r.op === "heartbeat"), [], "no record per heartbeat at the default level");

  const l = logs();
  await deliver(sw.pushHandler(task, { ...opts(l), logLevel: "debug" }), f.envelope({ taskId: "task_02" }));
  assert.ok(l.lines.filter((x) => JSON.parse(x).op === "heartbeat").length >= 3, "logLevel debug: one record per heartbeat");
  const w = logs();
  await deliver(sw.pushHandler(task, { ...opts(w), logLevel: "warn" }), f.envelope({ taskId: "task_03" }));
  assert.deepEqual(w.lines, [], "logLevel warn: a good attempt logs nothing");
  assert.throws(() => sw.pushHandler(task, { logLevel: "verbose" }), TypeError);
});
