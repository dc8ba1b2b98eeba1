// Push mode: the request handler Cloud Tasks delivers envelopes to, for a
// plain node:http server or an Express-style app.

import type { IncomingMessage, ServerResponse } from "node:http";
import { config, EnvelopeError, MAX_ENVELOPE_BYTES, parseEnvelope, Run } from "./run.js";
import type { Answer, Envelope, Handler, WorkerOptions } from "./run.js";

/** A request handler for node:http (http.createServer(h)) and Express (app.post("/", h)). */
export type PushHandler = ((req: IncomingMessage & { body?: unknown }, res: ServerResponse) => void) & {
  /** Runs one parsed envelope's attempt (or joins this process's run of it); resolves to the answer. */
  deliver(env: Envelope, traceparent?: string | null): Promise<[number, Answer]>;
  /** The worker id reported to Servo. */
  readonly workerId: string;
};

function readBody(req: IncomingMessage): Promise<Buffer | "too_large"> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let n = 0;
    let over = false;
    req.on("data", (c: Buffer) => {
      n += c.length;
      if (n > MAX_ENVELOPE_BYTES) over = true;
      else chunks.push(c);
    });
    req.on("end", () => resolve(over ? "too_large" : Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

/**
 * Returns the handler of a push worker: Cloud Tasks POSTs each attempt's
 * envelope; the handler sends `started` (the function runs only if Servo
 * answers CONTINUE), heartbeats while it runs, then exactly one `completed`,
 * and answers Cloud Tasks 200 once the attempt is settled (503 only when
 * Servo could not be reached, so that Cloud Tasks redelivers). A delivery
 * of an attempt this process is already running waits for it and gets the
 * same answer. With Express, mount it before any body parser or after
 * express.json() (req.body is then used).
 */
export function pushHandler<Payload = unknown, Checkpoint = unknown, Output = unknown>(
  fn: Handler<Payload, Checkpoint, Output>,
  options: WorkerOptions = {},
): PushHandler {
  const cfg = config(options);
  const inflight = new Map<string, Run>();

  const deliver = async (env: Envelope, traceparent?: string | null): Promise<[number, Answer]> => {
    const key = `${env.taskId}\u0000${env.attempt}`;
    const cur = inflight.get(key);
    if (cur) {
      cur.log("info", "duplicate delivery of an attempt this worker is running; waiting for it");
      return cur.done;
    }
    const run = new Run(cfg, fn as Handler, env, traceparent);
    inflight.set(key, run);
    try {
      return await run.execute();
    } finally {
      inflight.delete(key);
    }
  };

  const handle = async (req: IncomingMessage & { body?: unknown }, res: ServerResponse): Promise<void> => {
    const send = (status: number, a: Answer & Record<string, unknown>, headers: Record<string, string> = {}) => {
      const data = JSON.stringify({ ...a, workerId: cfg.workerId }) + "\n";
      res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(data), ...headers });
      res.end(data);
    };
    if (req.method !== "POST") return send(405, { result: "method_not_allowed" }, { Allow: "POST" });
    let raw: unknown;
    if (req.body !== undefined && !(typeof req.body === "object" && req.body !== null && Object.keys(req.body).length === 0 && !req.readableEnded)) {
      // Express with a body parser: the body was read already.
      raw = Buffer.isBuffer(req.body) ? new Uint8Array(req.body) : req.body;
    } else {
      const b = await readBody(req);
      if (b === "too_large") {
        cfg.log("error", "BAD DELIVERY: envelope too large; Cloud Tasks retries 4xx answers until the queue's retry limit", { workerId: cfg.workerId, limit: MAX_ENVELOPE_BYTES });
        return send(413, { result: "envelope_too_large" });
      }
      raw = new Uint8Array(b);
    }
    let env: Envelope;
    try {
      env = parseEnvelope(raw);
    } catch (e) {
      if (!(e instanceof EnvelopeError)) throw e;
      cfg.log("error", "BAD DELIVERY: not a valid Servo envelope; answering 400 (Cloud Tasks retries it until the queue's retry limit)", { workerId: cfg.workerId, error: e.message });
      return send(400, { result: "bad_envelope", detail: e.message });
    }
    const tp = req.headers["traceparent"];
    const [status, answer] = await deliver(env, Array.isArray(tp) ? tp[0] : tp);
    send(status, { ...answer, taskId: env.taskId, attempt: env.attempt });
  };

  const h = ((req: IncomingMessage & { body?: unknown }, res: ServerResponse) => {
    handle(req, res).catch((e: unknown) => {
      cfg.log("error", "internal error handling a delivery", { workerId: cfg.workerId, error: String(e) });
      if (!res.headersSent) {
        res.writeHead(500, { "Content-Type": "application/json" });
        res.end(JSON.stringify({ result: "internal_error", detail: String(e) }));
      }
    });
  }) as PushHandler;
  Object.defineProperty(h, "deliver", { value: deliver });
  Object.defineProperty(h, "workerId", { value: cfg.workerId });
  return h;
}
