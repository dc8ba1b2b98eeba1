// One attempt in this process: the protocol around one call of the handler
// (started, heartbeats, the lease fence, completed), as worker/doc.go says.
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { CancelRequested, CheckpointTooLargeError, CODE_HEARTBEAT_TIMEOUT, CODE_SERVO_UNREACHABLE, DeadlineExceededError, LeaseLostError, RejectedError, StopCause, TaskError, WorkerStopping, } from "./errors.js";
export const MAX_ENVELOPE_BYTES = 1 << 20;
export const MAX_CHECKPOINT_BYTES = 64 << 10;
export const MAX_OUTPUT_BYTES = 256 << 10;
export const MAX_MESSAGE_BYTES = 4 << 10;
export const MAX_STACK_TRACE_BYTES = 16 << 10;
const MAX_RESPONSE_BYTES = 64 << 10;
export const USER_AGENT = "servo-worker-typescript/1";
const LEVELS = { debug: 0, info: 1, warn: 2, error: 3 };
/** The default logger: one JSON line per record on stderr (Cloud Logging's severity). */
export const jsonLogger = (level, message, fields) => {
    const severity = { debug: "DEBUG", info: "INFO", warn: "WARNING", error: "ERROR" }[level];
    process.stderr.write(JSON.stringify({ severity, message, time: new Date().toISOString(), ...fields }) + "\n");
};
export function defaultWorkerId() {
    const parts = [];
    if (process.env.K_REVISION)
        parts.push(process.env.K_REVISION);
    const h = hostname();
    if (h && h !== "localhost")
        parts.push(h);
    if (parts.length === 0)
        parts.push("worker");
    return parts.join("/").slice(0, 200) + "-" + randomBytes(4).toString("hex");
}
export function config(o = {}) {
    const [bi, bm] = o.retryBackoffMs ?? [250, 15_000];
    const initial = Math.max(bi, 1);
    const level = o.logLevel ?? "info";
    if (!(level in LEVELS))
        throw new TypeError(`servo worker: logLevel must be "debug", "info", "warn" or "error", not ${JSON.stringify(level)}`);
    const logger = o.logger ?? jsonLogger;
    const min = LEVELS[level];
    return {
        workerId: (o.workerId || defaultWorkerId()).slice(0, 256),
        log: (l, message, fields) => {
            if (LEVELS[l] >= min)
                logger(l, message, fields);
        },
        requestTimeoutMs: Math.max(o.requestTimeoutMs ?? 30_000, 1),
        backoffInitial: initial,
        backoffMax: Math.max(bm, initial),
        startRetryWindowMs: o.startRetryWindowMs ?? 60_000,
    };
}
/** A delivery that is not a valid Servo envelope. */
export class EnvelopeError extends Error {
    constructor(message) {
        super(message);
        this.name = "EnvelopeError";
    }
}
/** Decodes and checks an envelope, like the Go SDK's parseEnvelope. */
export function parseEnvelope(raw) {
    let env = raw;
    if (typeof raw === "string" || raw instanceof Uint8Array) {
        try {
            env = JSON.parse(typeof raw === "string" ? raw : new TextDecoder().decode(raw));
        }
        catch (e) {
            throw new EnvelopeError(`decode envelope: ${e.message}`);
        }
    }
    if (typeof env !== "object" || env === null || Array.isArray(env))
        throw new EnvelopeError("decode envelope: not a JSON object");
    const e = env;
    if (typeof e.taskId !== "string" || !e.taskId || Buffer.byteLength(e.taskId) > 256)
        throw new EnvelopeError("taskId is required (at most 256 bytes)");
    if (!Number.isInteger(e.attempt) || e.attempt < 1)
        throw new EnvelopeError("attempt must be a positive integer");
    if (typeof e.taskToken !== "string" || !e.taskToken)
        throw new EnvelopeError("taskToken is required");
    if (typeof e.heartbeatIntervalMs !== "number" || !(e.heartbeatIntervalMs > 0))
        throw new EnvelopeError("heartbeatIntervalMs must be positive");
    let u;
    try {
        u = new URL(String(e.callbackBaseUrl));
    }
    catch {
        u = undefined;
    }
    if (!u || (u.protocol !== "http:" && u.protocol !== "https:"))
        throw new EnvelopeError("callbackBaseUrl must be an absolute http(s) URL");
    e.callbackBaseUrl = String(e.callbackBaseUrl).replace(/\/+$/, "");
    const exp = typeof e.tokenExpiresAt === "string" ? Date.parse(e.tokenExpiresAt) : tokenExpiry(e.taskToken);
    if (!Number.isFinite(exp))
        throw new EnvelopeError("tokenExpiresAt is required");
    e.tokenExpiresAt = new Date(exp).toISOString();
    return e;
}
/** The exp claim of a JWT-shaped token, in ms since the epoch (NaN if none). */
function tokenExpiry(tok) {
    const parts = tok.split(".");
    if (parts.length !== 3)
        return NaN;
    try {
        const claims = JSON.parse(Buffer.from(parts[1], "base64url").toString());
        return typeof claims.exp === "number" ? claims.exp * 1000 : NaN;
    }
    catch {
        return NaN;
    }
}
const DISPOSITIONS = new Set(["CONTINUE", "COMMITTED", "CANCELLED", "REJECTED", "RETRY"]);
const GATEWAY_STATUSES = new Set([408, 429, 500, 502, 503, 504]);
/** What one answer means (docs/contract.md §4.7): a Servo body is obeyed whatever its status. */
export function judge(op, status, text, retryAfter, backoffMax) {
    let body = {};
    let servo = false;
    try {
        const b = JSON.parse(text);
        if (typeof b === "object" && b !== null && !Array.isArray(b)) {
            body = b;
            servo = typeof body.disposition === "string" && DISPOSITIONS.has(body.disposition);
        }
    }
    catch {
        // a proxy's page: the status decides
    }
    let d;
    if (servo)
        d = body.disposition;
    else if (status >= 200 && status < 300)
        d = op === "completed" ? "COMMITTED" : "CONTINUE";
    else if (status === 409 || status === 410)
        d = "CANCELLED";
    else if (GATEWAY_STATUSES.has(status))
        d = "RETRY";
    else
        d = "REJECTED";
    return { status, body: servo ? body : {}, disposition: d, retryAfterMs: d === "RETRY" ? Math.min(parseRetryAfter(retryAfter), backoffMax) : 0 };
}
export function parseRetryAfter(h) {
    const s = Number.parseInt((h ?? "").trim(), 10);
    return Number.isFinite(s) && s > 0 && String(s) === (h ?? "").trim() ? s * 1000 : 0;
}
/** Exponential from initial, capped at max, jittered uniformly in [d/2, d). */
export function backoff(attempt, initial, max) {
    let d = initial;
    for (let i = 0; i < attempt && d < max; i++)
        d *= 2;
    d = Math.min(d, max);
    return d / 2 + (Math.random() * d) / 2;
}
class Unreachable extends Error {
}
class Stopped extends Error {
}
/** A W3C trace context: every callback carries a traceparent of this trace. */
export class Trace {
    traceId;
    flags;
    constructor(traceparent) {
        const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec((traceparent ?? "").trim());
        if (m && !/^0+$/.test(m[1])) {
            this.traceId = m[1];
            this.flags = m[3];
        }
        else {
            this.traceId = randomBytes(16).toString("hex");
            this.flags = "01";
        }
    }
    /** A traceparent for a new child span of this trace. */
    child() {
        return `00-${this.traceId}-${randomBytes(8).toString("hex")}-${this.flags}`;
    }
}
function sleep(ms, signal) {
    return new Promise((resolve) => {
        if (signal?.aborted)
            return resolve();
        const t = setTimeout(done, Math.max(ms, 0));
        function done() {
            clearTimeout(t);
            signal?.removeEventListener("abort", done);
            resolve();
        }
        signal?.addEventListener("abort", done, { once: true });
    });
}
// --- the Task ----------------------------------------------------------
/**
 * What a handler gets: the envelope, progress, checkpoints, and the stop
 * signal. Payload is the type of the task's payload and Checkpoint that of
 * its checkpoints (and so of resumeFrom); both are unknown unless a handler
 * names them (Handler<Payload, Checkpoint, Output>). The SDK does not check
 * them: they describe what the submitter and the handler agree on.
 */
export class Task {
    taskId;
    runId;
    tenantId;
    attempt;
    workerId;
    payload;
    /** The last checkpoint of an earlier attempt (undefined if none). */
    resumeFrom;
    /** The task's deadline, if it has one. */
    deadline;
    /** Aborted when the attempt must stop; its reason is a StopCause (CancelRequested, LeaseLostError, ...). */
    signal;
    /** Logs with taskId, attempt, tenantId, runId and workerId. */
    log;
    #env;
    #ctl;
    #flush;
    #pct;
    #msg = "";
    #cp;
    #cpVersion = 0;
    #cpAcked = 0;
    #prVersion = 0; // changes of the progress or the message
    #prAcked = 0; // the latest of them a heartbeat Servo acknowledged carried
    #phase = "";
    constructor(env, workerId, log, flush) {
        this.#env = env;
        this.taskId = env.taskId;
        this.runId = env.runId ?? "";
        this.tenantId = env.tenantId ?? "";
        this.attempt = env.attempt;
        this.workerId = workerId;
        this.payload = env.payload;
        this.resumeFrom = env.resumeFrom === null ? undefined : env.resumeFrom;
        this.deadline = env.deadline ? new Date(env.deadline) : undefined;
        this.#ctl = new AbortController();
        this.signal = this.#ctl.signal;
        this.log = log;
        this.#flush = flush;
    }
    /** The envelope without its token. */
    get envelope() {
        const { taskToken: _t, ...rest } = this.#env;
        return rest;
    }
    /** Why the attempt must stop, once it must. */
    get cancelCause() {
        return this.signal.aborted ? this.signal.reason : undefined;
    }
    /** Throws the StopCause when the attempt must stop. */
    throwIfCancelled() {
        if (this.signal.aborted)
            throw this.signal.reason;
    }
    /** Sleeps ms, resolving at once when the attempt must stop; resolves true if it must. */
    async sleep(ms) {
        await sleep(ms, this.signal);
        return this.signal.aborted;
    }
    /** Records progress (0–100, message ≤ 4 KiB); the next heartbeat carries the latest. */
    progress(pct, message = "") {
        const p = Math.max(0, Math.min(100, Math.round(pct)));
        const m = truncate(message, MAX_MESSAGE_BYTES);
        if (p !== this.#pct || m !== this.#msg)
            this.#prVersion++;
        this.#pct = p;
        this.#msg = m;
    }
    /** Names the phase reported as cancelledDuringPhase on a cancel. */
    setPhase(phase) {
        this.#phase = phase;
    }
    /** Records a checkpoint (JSON ≤ 64 KiB), sent with an early heartbeat; a retry's resumeFrom. */
    checkpoint(state) {
        const s = JSON.stringify(state);
        if (s === undefined)
            throw new TypeError("checkpoint: not JSON-encodable");
        const n = Buffer.byteLength(s);
        if (n > MAX_CHECKPOINT_BYTES)
            throw new CheckpointTooLargeError(n);
        this.#cp = s;
        this.#cpVersion++;
        this.#flush();
    }
    /** The last checkpoint recorded (undefined if none). */
    get lastCheckpoint() {
        return this.#cp === undefined ? undefined : JSON.parse(this.#cp);
    }
    /** @internal */
    _stop(cause) {
        if (this.signal.aborted)
            return false;
        this.#ctl.abort(cause);
        return true;
    }
    /** @internal the heartbeat body and the checkpoint and progress versions it carries. */
    _heartbeat(workerId) {
        const b = { attempt: this.attempt, workerId, heartbeatAt: new Date().toISOString() };
        if (this.#pct !== undefined)
            b.progressPct = this.#pct;
        if (this.#msg)
            b.message = this.#msg;
        if (this.#cp !== undefined && this.#cpVersion > this.#cpAcked)
            b.checkpoint = JSON.parse(this.#cp);
        return [b, [this.#cpVersion, this.#prVersion]];
    }
    /** @internal */
    _acked(v) {
        this.#cpAcked = Math.max(this.#cpAcked, v[0]);
        this.#prAcked = Math.max(this.#prAcked, v[1]);
    }
    /** @internal whether a heartbeat would carry something new (a checkpoint, a progress or message) Servo has not acknowledged: only a plain heartbeat waits for Servo's pacing hint. */
    _changed() {
        return this._dirty() || this.#prVersion > this.#prAcked;
    }
    /** @internal */
    _dirty() {
        return this.#cp !== undefined && this.#cpVersion > this.#cpAcked;
    }
    /** @internal */
    _phaseAndCheckpoint() {
        return [this.#phase, this.lastCheckpoint];
    }
}
function truncate(s, max) {
    const b = Buffer.from(s);
    return b.length <= max ? s : b.subarray(0, max).toString().replace(/\uFFFD+$/, "");
}
function clean(a) {
    const o = {};
    for (const [k, v] of Object.entries(a))
        if (v !== undefined && v !== null && v !== "")
            o[k] = v;
    return o;
}
// --- the attempt -------------------------------------------------------
export class Run {
    env;
    task;
    done;
    #resolve;
    #cfg;
    #handler;
    #trace;
    #fields;
    #tok;
    #tokUntil; // epoch ms
    #stop;
    #cancelSeen = false;
    #claimedAt;
    #fenceAt = Infinity; // performance.now() ms
    #hbTimeout;
    #wake;
    #flushReq = false;
    #quit = new AbortController(); // heartbeats must end
    // The last acknowledged answer's nextHeartbeatInMs: how long the next plain heartbeat may wait (0: the interval; an older Servo). docs/contract.md §5.7.
    #pace = 0;
    #inflight = new AbortController(); // aborts the heartbeat in flight (fenced)
    constructor(cfg, handler, env, traceparent, claimedAt) {
        this.#cfg = cfg;
        this.#handler = handler;
        this.env = env;
        this.#trace = new Trace(traceparent);
        this.#claimedAt = claimedAt;
        this.#fields = { taskId: env.taskId, attempt: env.attempt, tenantId: env.tenantId ?? "", runId: env.runId ?? "", workerId: cfg.workerId };
        this.#tok = env.taskToken;
        this.#tokUntil = Date.parse(env.tokenExpiresAt);
        this.#hbTimeout = env.heartbeatTimeoutMs && env.heartbeatTimeoutMs > 0 ? env.heartbeatTimeoutMs : 0;
        this.task = new Task(env, cfg.workerId, (level, message, fields) => this.log(level, message, fields), () => this.#flush());
        this.done = new Promise((r) => (this.#resolve = r));
    }
    log(level, message, fields = {}) {
        this.#cfg.log(level, message, { ...this.#fields, ...fields });
    }
    #flush() {
        this.#flushReq = true;
        this.#wake?.();
    }
    stopped() {
        return this.#stop;
    }
    #adopt(rep) {
        const tok = rep.body.taskToken;
        if (typeof tok !== "string" || !tok)
            return;
        const exp = typeof rep.body.tokenExpiresAt === "string" ? Date.parse(rep.body.tokenExpiresAt) : tokenExpiry(tok);
        this.#tok = tok;
        if (Number.isFinite(exp))
            this.#tokUntil = exp;
        this.log("info", "adopted a refreshed task token", { tokenExpiresAt: Number.isFinite(exp) ? new Date(exp).toISOString() : "" });
    }
    /** Records the pacing hint of an acknowledged answer (none: 0). */
    #paced(rep) {
        const h = rep.body.nextHeartbeatInMs;
        this.#pace = typeof h === "number" && Number.isFinite(h) && h > 0 ? h : 0;
    }
    /** How long after the last answer a plain heartbeat waits, when one that carries something new waits `wait` (the jittered interval): Servo's hint, jittered down by up to 15%, when longer than the interval; else `wait`. */
    #plainWait(interval, wait) {
        return this.#pace <= interval ? wait : Math.max(wait, jitter(this.#pace));
    }
    /** Servo acknowledged a request sent at sentAt: the fence is heartbeatTimeoutMs from the sending. */
    #ack(sentAt) {
        if (this.#hbTimeout <= 0)
            return;
        const at = sentAt + this.#hbTimeout;
        this.#fenceAt = this.#fenceAt === Infinity ? at : Math.max(this.#fenceAt, at);
    }
    /** performance.now() of the token's expiry. */
    #tokenUntil() {
        return performance.now() + (this.#tokUntil - Date.now());
    }
    #lose(cause) {
        if (this.#stop === undefined) {
            this.#stop = cause;
            this.log("warn", "attempt lost its authority: cancelling the handler; nothing more will be reported", { cause: cause.message });
        }
        this.task._stop(cause);
        this.#quit.abort();
        this.#wake?.();
    }
    #cancelBy(reason) {
        if (this.#cancelSeen)
            return;
        this.#cancelSeen = true;
        this.log("info", "Servo asked to cancel the attempt; cancelling the handler", { cancelReason: reason });
        this.task._stop(new CancelRequested(reason));
    }
    #fenced() {
        if (performance.now() < this.#fenceAt)
            return false;
        this.#lose(new LeaseLostError(CODE_HEARTBEAT_TIMEOUT, `no heartbeat acknowledged for ${this.#hbTimeout} ms (heartbeatTimeoutMs): Servo has expired the lease or will`));
        this.#inflight.abort();
        return true;
    }
    /** One POST with the current token; undefined on a transport failure. */
    async #once(op, body, signal) {
        const url = `${this.env.callbackBaseUrl}/v1/tasks/${encodeURIComponent(this.env.taskId)}/${op}`;
        const sentAt = performance.now();
        const sigs = [AbortSignal.timeout(this.#cfg.requestTimeoutMs)];
        if (signal)
            sigs.push(signal);
        try {
            const res = await fetch(url, {
                method: "POST",
                body,
                headers: {
                    "Content-Type": "application/json",
                    Authorization: "Bearer " + this.#tok,
                    "User-Agent": USER_AGENT,
                    traceparent: this.#trace.child(),
                },
                signal: AbortSignal.any(sigs),
            });
            const text = (await res.text()).slice(0, MAX_RESPONSE_BYTES);
            const rep = judge(op, res.status, text, res.headers.get("retry-after"), this.#cfg.backoffMax);
            this.log("debug", "callback answered", { op, status: res.status, disposition: rep.body.disposition, code: rep.body.error });
            return { ...rep, sentAt };
        }
        catch (e) {
            const err = e;
            return `${err.name}: ${err.message}${err.cause ? " (" + String(err.cause.message ?? err.cause) + ")" : ""}`;
        }
    }
    /** Delivers one callback with retries while the next try can start before until() (performance.now() ms). */
    async #post(op, body, until, stop) {
        for (let attempt = 0;; attempt++) {
            const rep = await this.#once(op, body(), op === "heartbeat" ? this.#inflight.signal : undefined);
            if (typeof rep !== "string" && rep.disposition !== "RETRY")
                return rep;
            if (this.#inflight.signal.aborted && op === "heartbeat")
                throw new Stopped();
            const why = typeof rep === "string" ? rep : `HTTP ${rep.status} ${String(rep.body.error ?? "")}`.trim();
            const delay = Math.max(backoff(attempt, this.#cfg.backoffInitial, this.#cfg.backoffMax), typeof rep === "string" ? 0 : rep.retryAfterMs);
            if (performance.now() + delay >= until()) {
                this.log("error", "servo unreachable; giving up on callback", { op, tries: attempt + 1, lastError: why });
                throw new Unreachable(`servo unreachable: ${op}: ${attempt + 1} tries, last: ${why}`);
            }
            this.log("warn", "callback failed; retrying", { op, try: attempt + 1, error: why, retryInMs: Math.round(delay) });
            await sleep(delay, stop);
            if (stop?.aborted)
                throw new Stopped();
        }
    }
    /** Runs the attempt; resolves to the answer (HTTP status to Cloud Tasks, and its body). */
    async execute() {
        let r;
        try {
            r = await this.#execute();
        }
        catch (e) {
            this.log("error", "internal error running the attempt", { error: String(e) });
            r = [500, { result: "internal_error", detail: String(e) }];
        }
        this.#resolve(r);
        return r;
    }
    async #execute() {
        const cfg = this.#cfg;
        const startedBody = JSON.stringify({ attempt: this.env.attempt, workerId: cfg.workerId, startedAt: new Date().toISOString() });
        const windowEnd = performance.now() + cfg.startRetryWindowMs;
        let rep;
        if (this.#claimedAt !== undefined) {
            // A pull-pool claim was the attempt's `started`.
            rep = { status: 200, body: {}, disposition: "CONTINUE", retryAfterMs: 0, sentAt: this.#claimedAt };
        }
        else {
            try {
                rep = await this.#post("started", () => startedBody, () => Math.min(windowEnd, this.#tokenUntil()));
            }
            catch (e) {
                this.log("error", "could not reach Servo to start the attempt; answering 503 so Cloud Tasks redelivers it", { error: String(e) });
                return [503, { result: "servo_unreachable", detail: String(e) }];
            }
        }
        this.#adopt(rep);
        if (rep.disposition === "CANCELLED") {
            this.log("info", "Servo declined the attempt; the handler is not run", { status: rep.status, code: rep.body.error, state: rep.body.state });
            return [200, clean({ result: "not_started", code: rep.body.error, finalState: rep.body.state })];
        }
        if (rep.disposition !== "CONTINUE") {
            this.log("error", "Servo rejected `started`; the handler is not run (protocol error, not retried)", { status: rep.status, code: rep.body.error, message: rep.body.message });
            return [200, clean({ result: "rejected", code: rep.body.error, detail: rep.body.message })];
        }
        this.#ack(rep.sentAt);
        this.#paced(rep);
        // The fence and the deadline.
        let supTimer;
        const supervise = () => {
            if (this.#stop !== undefined)
                return;
            if (this.#fenced())
                return;
            const now = performance.now();
            let next = this.#fenceAt - now;
            if (this.task.deadline) {
                const d = this.task.deadline.getTime() - Date.now();
                if (d <= 0) {
                    if (!this.task.signal.aborted) {
                        this.log("info", "the task's deadline passed; stopping the handler");
                        this.task._stop(new DeadlineExceededError());
                    }
                }
                else
                    next = Math.min(next, d);
            }
            if (Number.isFinite(next))
                supTimer = setTimeout(supervise, Math.max(next, 0) + 1);
        };
        supervise();
        const hb = this.#heartbeatLoop();
        this.log("info", "attempt started");
        const cpu0 = process.cpuUsage();
        let out;
        let exc;
        let threw = false;
        try {
            out = await this.#handler(this.task);
        }
        catch (e) {
            exc = e;
            threw = true;
        }
        const cause = this.task.cancelCause;
        const cpu = process.cpuUsage(cpu0);
        this.#quit.abort();
        this.#wake?.();
        await hb;
        clearTimeout(supTimer);
        if (this.#stop === undefined)
            this.#fenced();
        if (this.#stop !== undefined)
            return [200, lostAnswer(this.#stop)];
        const req = outcome(cause, out, exc, threw, this.task);
        Object.assign(req, { attempt: this.env.attempt, workerId: cfg.workerId, completedAt: new Date().toISOString() });
        const metrics = {};
        const cpuMs = Math.floor((cpu.user + cpu.system) / 1000);
        if (cpuMs > 0)
            metrics.cpuTimeMs = cpuMs;
        const rss = process.resourceUsage().maxRSS * 1024;
        if (rss > 0)
            metrics.peakMemoryBytes = rss;
        if (Object.keys(metrics).length)
            req.metrics = metrics;
        if (req.outcome === "FAILED" && this.task._dirty()) {
            // Store the last checkpoint first: a retry resumes from it.
            await this.#heartbeatOnce(undefined);
            if (this.#stop === undefined)
                this.#fenced();
            if (this.#stop !== undefined)
                return [200, lostAnswer(this.#stop)];
        }
        const body = JSON.stringify(req);
        const oc = req.outcome;
        try {
            rep = await this.#post("completed", () => body, () => this.#tokenUntil());
        }
        catch (e) {
            this.log("error", "could not report `completed`; answering 503 so Cloud Tasks redelivers", { outcome: oc, error: String(e) });
            return [503, { result: "servo_unreachable", outcome: oc, detail: String(e) }];
        }
        if (rep.disposition === "COMMITTED") {
            this.log("info", "attempt reported", { outcome: oc, finalState: rep.body.finalState, retryScheduled: rep.body.retryScheduled });
            return [200, clean({ result: "committed", outcome: oc, finalState: rep.body.finalState })];
        }
        if (rep.disposition === "CANCELLED") {
            this.log("warn", "Servo discarded the attempt's result: the attempt had no authority any more", { outcome: oc, status: rep.status, code: rep.body.error });
            return [200, clean({ result: "discarded", outcome: oc, code: rep.body.error })];
        }
        this.log("error", "Servo rejected `completed` (protocol error, not retried)", { outcome: oc, status: rep.status, code: rep.body.error, message: rep.body.message });
        return [200, clean({ result: "rejected", outcome: oc, code: rep.body.error, detail: rep.body.message })];
    }
    /**
     * Heartbeats: every interval (jittered down by up to 15%) while the progress or the message changed, early after a
     * checkpoint (at most every interval/4), and otherwise (a plain heartbeat, nothing new to say) only once Servo's
     * pacing hint (the last answer's nextHeartbeatInMs, docs/contract.md §5.7) has passed since that answer, when it is
     * longer than the interval. Without a hint (an older Servo) every heartbeat comes at the interval.
     */
    async #heartbeatLoop() {
        const interval = this.env.heartbeatIntervalMs;
        const gap = interval / 4;
        let last = performance.now();
        let wait = jitter(interval);
        let next = last + wait;
        let plainAt = last + this.#plainWait(interval, wait);
        for (;;) {
            await new Promise((resolve) => {
                const t = setTimeout(done, Math.max(next - performance.now(), 0));
                function done() {
                    clearTimeout(t);
                    resolve();
                }
                this.#wake = done;
            });
            this.#wake = undefined;
            if (this.#quit.signal.aborted)
                return;
            const now = performance.now();
            if (this.#flushReq) {
                this.#flushReq = false;
                next = Math.min(next, Math.max(last + gap, now));
            }
            if (now < next)
                continue;
            if (now < plainAt && !this.task._changed()) {
                // Nothing new: wait for the hint, looking again every interval in case the progress changes.
                next = Math.min(plainAt, now + jitter(interval));
                continue;
            }
            if (!(await this.#heartbeatOnce(this.#quit.signal)))
                return;
            last = performance.now();
            wait = jitter(interval);
            next = last + wait;
            plainAt = last + this.#plainWait(interval, wait);
        }
    }
    /** One heartbeat with the latest progress and any unstored checkpoint; whether the attempt may go on. */
    async #heartbeatOnce(stop) {
        let version = [0, 0];
        const body = () => {
            const [b, v] = this.task._heartbeat(this.#cfg.workerId);
            version = v;
            return JSON.stringify(b);
        };
        let rep;
        try {
            rep = await this.#post("heartbeat", body, () => Math.min(this.#tokenUntil(), this.#fenceAt), stop);
        }
        catch (e) {
            if (e instanceof Stopped)
                return false;
            if (this.#fenceAt <= this.#tokenUntil()) {
                this.#lose(new LeaseLostError(CODE_HEARTBEAT_TIMEOUT, "no heartbeat acknowledged within heartbeatTimeoutMs: " + String(e)));
            }
            else {
                this.#lose(new LeaseLostError(CODE_SERVO_UNREACHABLE, "Servo could not be reached before the task token expired: " + String(e)));
            }
            return false;
        }
        this.#adopt(rep);
        if (rep.disposition === "CONTINUE") {
            if (this.#stop !== undefined)
                return false; // fenced meanwhile: a late acknowledgement does not undo it
            this.#ack(rep.sentAt);
            this.#paced(rep);
            this.task._acked(version);
            if (rep.body.shouldCancel === true)
                this.#cancelBy(String(rep.body.cancelReason ?? ""));
            return true;
        }
        if (rep.disposition === "CANCELLED") {
            this.#lose(new LeaseLostError(String(rep.body.error ?? ""), String(rep.body.message ?? ""), rep.status));
        }
        else {
            this.#lose(new RejectedError("heartbeat", rep.status, String(rep.body.error ?? ""), String(rep.body.field ?? ""), String(rep.body.message ?? "")));
        }
        return false;
    }
}
function jitter(d) {
    return d - Math.random() * 0.15 * d;
}
function lostAnswer(stop) {
    if (stop instanceof RejectedError)
        return clean({ result: "rejected", code: stop.code, detail: stop.message });
    return clean({ result: "lease_lost", code: stop instanceof LeaseLostError ? stop.code : "", detail: stop.message });
}
function causedByStop(e) {
    for (let i = 0; i < 32 && e; i++) {
        if (e instanceof StopCause)
            return true;
        e = e.cause;
    }
    return false;
}
function stackOf(e) {
    const s = e instanceof Error ? (e.stack ?? String(e)) : String(e);
    const b = Buffer.from(s);
    return b.length <= MAX_STACK_TRACE_BYTES ? s : b.subarray(b.length - MAX_STACK_TRACE_BYTES).toString();
}
/** Maps what the handler did to the `completed` report, as the Go SDK does (worker/doc.go, Outcomes). */
export function outcome(cause, out, exc, threw, task) {
    const fail = (category, msg, stack, retryable) => {
        const err = { category, message: truncate(msg || category, MAX_MESSAGE_BYTES) };
        if (stack)
            err.stackTrace = stack;
        if (retryable !== undefined)
            err.retryable = retryable;
        return { outcome: "FAILED", error: err };
    };
    const cancelled = () => {
        const [phase, cp] = task._phaseAndCheckpoint();
        const r = { outcome: "CANCELLED" };
        if (phase)
            r.cancelledDuringPhase = phase;
        if (cp !== undefined)
            r.partialProgress = cp;
        return r;
    };
    if (!threw) {
        if (out === undefined || out === null)
            return { outcome: "SUCCEEDED" };
        let s;
        try {
            s = JSON.stringify(out);
        }
        catch (e) {
            return fail("USER_CODE", `encode output: ${e.message}`, "", false);
        }
        if (s === undefined)
            return fail("USER_CODE", "encode output: not JSON-encodable", "", false);
        const n = Buffer.byteLength(s);
        if (n > MAX_OUTPUT_BYTES)
            return fail("USER_CODE", `output is ${n} bytes; the limit is ${MAX_OUTPUT_BYTES}`, "", false);
        return { outcome: "SUCCEEDED", output: JSON.parse(s) };
    }
    const explicit = exc instanceof TaskError;
    const msg = explicit ? exc.message : exc instanceof Error ? `${exc.name}: ${exc.message}` : String(exc);
    if (cause instanceof CancelRequested && (!explicit || exc.category === "CANCELLED" || causedByStop(exc)))
        return cancelled();
    if (explicit && exc.category === "CANCELLED")
        return cancelled();
    if (explicit)
        return fail(exc.category, msg, stackOf(exc), exc.retryable);
    if (cause instanceof DeadlineExceededError)
        return fail("TIMEOUT", msg, stackOf(exc), undefined);
    if (cause instanceof WorkerStopping)
        return fail("INFRASTRUCTURE", msg, stackOf(exc), true);
    return fail("USER_CODE", msg, stackOf(exc), undefined);
}
