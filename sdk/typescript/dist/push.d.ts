import type { IncomingMessage, ServerResponse } from "node:http";
import type { Answer, Envelope, Handler, WorkerOptions } from "./run.js";
/** A request handler for node:http (http.createServer(h)) and Express (app.post("/", h)). */
export type PushHandler = ((req: IncomingMessage & {
    body?: unknown;
}, res: ServerResponse) => void) & {
    /** Runs one parsed envelope's attempt (or joins this process's run of it); resolves to the answer. */
    deliver(env: Envelope, traceparent?: string | null): Promise<[number, Answer]>;
    /** The worker id reported to Servo. */
    readonly workerId: string;
};
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
export declare function pushHandler<Payload = unknown, Checkpoint = unknown, Output = unknown>(fn: Handler<Payload, Checkpoint, Output>, options?: WorkerOptions): PushHandler;
