// Pull mode and job mode against scripted servers: the claim is the
// attempt's `started`, claim backoff and refusals, the grace period, a
// stop abandoning the open claim, and runJob's exit codes (as the Go SDK's worker.Pull and worker.RunJob).

import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import * as sw from "../dist/index.js";

async function server(handle) {
  const srv = http.createServer(async (req, res) => {
    let raw = "";
    for await (const c of req) raw += c;
    const [status, body, headers] = await handle(req, raw ? JSON.parse(raw) : {});
    res.writeHead(status, { "Content-Type": "application/json", ...(headers ?? {}) });
    res.end(typeof body === "string" ? body : JSON.stringify(body));
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${srv.address().port}`, close: () => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }) };
}

// servo records callbacks and accepts them.
async function servo() {
  const calls = [];
  const s = await server((req, body) => {
    const op = req.url.split("/").pop();
    calls.push({ op, body });
    if (op === "completed") return [200, { disposition: "COMMITTED", finalState: "SUCCEEDED" }];
    return [200, { disposition: "CONTINUE", shouldCancel: false }];
  });
  const envelope = (over = {}) => ({
    taskId: "task_01", runId: "run_01", tenantId: "acme", attempt: 1, payload: {}, callbackBaseUrl: s.url,
    taskToken: "tok", tokenExpiresAt: new Date(Date.now() + 3600_000).toISOString(), heartbeatIntervalMs: 100,
    heartbeatTimeoutMs: 60_000, ...over,
  });
  return { ...s, calls, envelope, ops: (op) => calls.filter((c) => c.op === op) };
}

const quiet = () => {};
const EMPTY = [200, { claimed: false, disposition: "CONTINUE" }];
const until = async (ok) => { for (let i = 0; i < 400 && !ok(); i++) await new Promise((r) => setTimeout(r, 50)); };

test("pull: the claim is started; 503 and gateway claims are retried; a claim carries workerId, maxWaitMs and the dev identity", async (t) => {
  const f = await servo();
  t.after(f.close);
  const claims = [];
  const c = await server((req, body) => {
    claims.push({ body, identity: req.headers["x-servo-dev-identity"] });
    const n = claims.length;
    if (n === 1) return [503, { disposition: "RETRY", error: "unavailable" }, { "Retry-After": "0" }];
    if (n === 2) return [502, "<html>bad gateway</html>"];
    if (n === 3) return [200, { claimed: true, envelope: f.envelope(), disposition: "CONTINUE" }];
    return EMPTY;
  });
  t.after(c.close);
  const ctl = new AbortController();
  const ran = [];
  const p = sw.pull((task) => { ran.push(task.attempt); return { ok: true }; },
    { api: c.url, pool: "gpu", signal: ctl.signal, maxWaitMs: 200, devIdentity: "me", workerId: "ts-pull", logger: quiet, retryBackoffMs: [1, 10] });
  await until(() => f.ops("completed").length > 0);
  ctl.abort();
  await p;
  assert.deepEqual(ran, [1]);
  assert.deepEqual(f.calls.filter((x) => x.op !== "heartbeat").map((x) => x.op), ["completed"], "no `started`: the claim was it");
  assert.deepEqual(claims[0], { body: { workerId: "ts-pull", maxWaitMs: 200 }, identity: "me" });
});

test("pull: thenPools is sent on every claim, in order; without it the claim body has no thenPools", async (t) => {
  for (const [thenPools, want] of [[["spot", "cpu", "a/b"], ["spot", "cpu", "a/b"]], [undefined, undefined], [[], undefined]]) {
    const claims = [];
    const c = await server((req, body) => {
      claims.push({ path: req.url, body });
      return EMPTY;
    });
    t.after(c.close);
    const ctl = new AbortController();
    const p = sw.pull(() => 1, { api: c.url, pool: "gpu", thenPools, signal: ctl.signal, maxWaitMs: 200, workerId: "ts-pull", logger: quiet, retryBackoffMs: [1, 10] });
    await until(() => claims.length >= 2);
    ctl.abort();
    await p;
    assert.ok(claims.length >= 2, `${claims.length} claims, want 2 or more`);
    for (const { path, body } of claims) {
      assert.equal(path, "/v1/pools/gpu/claim");
      const expected = { workerId: "ts-pull", maxWaitMs: 200 };
      if (want) expected.thenPools = want;
      assert.deepEqual(body, expected, `thenPools ${JSON.stringify(thenPools)}`);
    }
  }
});

test("pull: a claim refused for its thenPools rejects with ClaimRefused naming the field", async (t) => {
  const claims = [];
  const c = await server((req, body) => {
    claims.push(body);
    return [400, { disposition: "REJECTED", error: "invalid_request", field: "thenPools[1]", message: "a pool named twice" }];
  });
  t.after(c.close);
  await assert.rejects(sw.pull(() => 1, { api: c.url, pool: "gpu", thenPools: ["cpu", "cpu"], signal: new AbortController().signal, logger: quiet }),
    (e) => e instanceof sw.ClaimRefused && e.status === 400 && e.code === "invalid_request" && e.field === "thenPools[1]");
  assert.equal(claims.length, 1, "a refused claim is not retried");
  assert.deepEqual(claims[0].thenPools, ["cpu", "cpu"]);
  await assert.rejects(sw.pull(() => 1, { api: c.url, pool: "gpu", thenPools: "cpu", signal: new AbortController().signal, logger: quiet }), TypeError);
  assert.equal(claims.length, 1, "a string thenPools is refused before any claim");
});

test("pull: a refused claim rejects with ClaimRefused and is not retried", async (t) => {
  let n = 0;
  const c = await server(() => { n++; return [403, { disposition: "REJECTED", error: "forbidden", message: "no" }]; });
  t.after(c.close);
  await assert.rejects(sw.pull(() => 1, { api: c.url, pool: "gpu", signal: new AbortController().signal, logger: quiet }),
    (e) => e instanceof sw.ClaimRefused && e.status === 403 && e.code === "forbidden");
  assert.equal(n, 1);
});

test("pull: after the grace period a running attempt is stopped and reported FAILED/INFRASTRUCTURE, retryable", async (t) => {
  const f = await servo();
  t.after(f.close);
  let n = 0;
  const c = await server(() => (++n === 1 ? [200, { claimed: true, envelope: f.envelope(), disposition: "CONTINUE" }] : EMPTY));
  t.after(c.close);
  const ctl = new AbortController();
  let started = false;
  const p = sw.pull(async (task) => {
    task.checkpoint({ next: 7 });
    started = true;
    await task.sleep(30_000);
    task.throwIfCancelled();
  }, { api: c.url, pool: "gpu", signal: ctl.signal, maxWaitMs: 200, graceMs: 300, logger: quiet, retryBackoffMs: [1, 10] });
  await until(() => started);
  ctl.abort();
  await p;
  const done = f.ops("completed");
  assert.equal(done.length, 1);
  assert.deepEqual([done[0].body.outcome, done[0].body.error.category, done[0].body.error.retryable], ["FAILED", "INFRASTRUCTURE", true]);
  assert.ok(f.ops("heartbeat").some((h) => h.body.checkpoint?.next === 7), "the checkpoint is stored before completed");
});

test("runJob: exit codes as worker.RunJob, and the execution's worker id", async (t) => {
  const f = await servo();
  t.after(f.close);
  const saved = { ...process.env };
  t.after(() => { process.env = saved; });
  Object.assign(process.env, { CLOUD_RUN_EXECUTION: "job-abc", CLOUD_RUN_TASK_INDEX: "0", CLOUD_RUN_TASK_ATTEMPT: "2" });
  process.env.SERVO_ENVELOPE = JSON.stringify(f.envelope());
  assert.equal(await sw.runJob(() => ({ n: 1 }), { logger: quiet }), sw.EXIT_SETTLED);
  assert.deepEqual(f.calls.map((c) => c.op), ["started", "completed"]);
  assert.equal(f.calls[0].body.workerId, "job-abc/task-0/try-2");

  const down = await server(() => [503, { disposition: "RETRY", error: "unavailable" }]);
  t.after(down.close);
  process.env.SERVO_ENVELOPE = JSON.stringify(f.envelope({ callbackBaseUrl: down.url }));
  assert.equal(await sw.runJob(() => 1, { logger: quiet, retryBackoffMs: [1, 10], startRetryWindowMs: 200 }), sw.EXIT_NOT_RUN);

  const gone = await server(() => [409, { disposition: "CANCELLED", error: "task_already_terminal" }]);
  t.after(gone.close);
  process.env.SERVO_ENVELOPE = JSON.stringify(f.envelope({ callbackBaseUrl: gone.url }));
  assert.equal(await sw.runJob(() => 1, { logger: quiet }), sw.EXIT_SETTLED, "refused at started is settled: exit 0");

  delete process.env.SERVO_ENVELOPE;
  assert.equal(await sw.runJob(() => 1, { logger: quiet }), sw.EXIT_NOT_RUN, "no envelope");
  process.env.SERVO_ENVELOPE = "{\"taskId\": 1}";
  assert.equal(await sw.runJob(() => 1, { logger: quiet }), sw.EXIT_NOT_RUN, "a bad envelope");
});

test("pull: stopping abandons the open claim; a task it would have answered after the stop is not started", async (t) => {
  const f = await servo();
  t.after(f.close);
  let answer;
  const held = new Promise((r) => (answer = r));
  let claims = 0;
  let left = false;
  const c = await server(async (req) => {
    claims++;
    req.socket.once("close", () => (left = true));
    await held; // a long-poll that finds a task only after the worker was told to stop
    return [200, { claimed: true, envelope: f.envelope(), disposition: "CONTINUE" }];
  });
  t.after(c.close);
  const ctl = new AbortController();
  const ran = [];
  const p = sw.pull((task) => { ran.push(task.attempt); return 1; },
    { api: c.url, pool: "gpu", signal: ctl.signal, maxWaitMs: 60_000, logger: quiet, retryBackoffMs: [1, 10] });
  await until(() => claims === 1);
  ctl.abort();
  const stopped = await Promise.race([p.then(() => true), new Promise((r) => setTimeout(() => r(false), 2000))]);
  answer();
  await p;
  await new Promise((r) => setTimeout(r, 200));
  assert.ok(stopped, "pull returns at once, without waiting for the open long-poll");
  assert.ok(left, "the claim's request was aborted, so Servo hands the message back");
  assert.deepEqual(ran, [], "the handler never ran");
  assert.equal(claims, 1);
  assert.deepEqual(f.calls, [], "nothing was reported for an attempt the worker never got");
});

test("pull: an attempt whose claim is answered all the same after the stop is not started: reported FAILED/INFRASTRUCTURE, retryable", async (t) => {
  const f = await servo();
  t.after(f.close);
  const c = await server(() => [200, { claimed: true, envelope: f.envelope(), disposition: "CONTINUE" }]);
  t.after(c.close);
  const ctl = new AbortController();
  // The answer beats the abort: the stop comes once the claim's answer is in.
  const real = globalThis.fetch;
  t.after(() => { globalThis.fetch = real; });
  globalThis.fetch = async (url, init) => {
    const res = await real(url, init);
    if (!String(url).endsWith("/claim")) return res;
    const body = await res.text();
    ctl.abort();
    return new Response(body, { status: res.status, headers: res.headers });
  };
  const ran = [];
  await sw.pull((task) => { ran.push(task.attempt); return 1; },
    { api: c.url, pool: "gpu", signal: ctl.signal, maxWaitMs: 200, logger: quiet, retryBackoffMs: [1, 10] });
  assert.deepEqual(ran, [], "the handler never ran");
  const done = f.ops("completed");
  assert.equal(done.length, 1);
  assert.deepEqual([done[0].body.outcome, done[0].body.error.category, done[0].body.error.retryable], ["FAILED", "INFRASTRUCTURE", true]);
});

test("pull: a claim whose answer began before the stop is read, not aborted: its attempt is handed back (FAILED/INFRASTRUCTURE) rather than lost until its lease runs out", async (t) => {
  const f = await servo();
  t.after(f.close);
  let release;
  const released = new Promise((r) => (release = r));
  let claims = 0;
  let left = false;
  const srv = http.createServer(async (req, res) => {
    for await (const _ of req);
    claims++;
    req.socket.once("close", () => (left = true));
    // The answer begins (status and headers) before the stop; its envelope comes after.
    const body = JSON.stringify({ claimed: true, envelope: f.envelope(), disposition: "CONTINUE" });
    res.writeHead(200, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) });
    res.flushHeaders();
    await released;
    res.end(body);
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }));
  const real = globalThis.fetch;
  t.after(() => { globalThis.fetch = real; });
  let headersIn;
  const headers = new Promise((r) => (headersIn = r));
  globalThis.fetch = async (url, init) => {
    const res = await real(url, init);
    if (String(url).endsWith("/claim")) headersIn();
    return res;
  };
  const ctl = new AbortController();
  const ran = [];
  const p = sw.pull((task) => { ran.push(task.attempt); return 1; },
    { api: `http://127.0.0.1:${srv.address().port}`, pool: "gpu", signal: ctl.signal, maxWaitMs: 60_000, logger: quiet, retryBackoffMs: [1, 10] });
  await headers;
  await new Promise((r) => setTimeout(r, 20)); // pull has the answer's headers
  ctl.abort();
  await new Promise((r) => setTimeout(r, 100));
  release();
  await p;
  assert.equal(left, false, "the claim was abandoned although its answer had begun");
  assert.deepEqual(ran, [], "the handler never ran");
  assert.equal(claims, 1, "no claim after the stop");
  const done = f.ops("completed");
  assert.equal(done.length, 1);
  assert.deepEqual([done[0].body.outcome, done[0].body.error.category, done[0].body.error.retryable], ["FAILED", "INFRASTRUCTURE", true]);
});
