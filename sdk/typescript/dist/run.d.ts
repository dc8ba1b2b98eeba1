import { StopCause } from "./errors.js";
export declare const MAX_ENVELOPE_BYTES: number;
export declare const MAX_CHECKPOINT_BYTES: number;
export declare const MAX_OUTPUT_BYTES: number;
export declare const MAX_MESSAGE_BYTES: number;
export declare const MAX_STACK_TRACE_BYTES: number;
export declare const USER_AGENT = "servo-worker-typescript/1";
/** The envelope Servo delivers for one attempt (docs/contract.md §3). */
export interface Envelope {
    taskId: string;
    runId?: string;
    assetId?: string;
    taskKey?: string;
    tenantId?: string;
    workspaceId?: string;
    attempt: number;
    worker?: string;
    payload?: unknown;
    resources?: unknown;
    resumeFrom?: unknown;
    enqueuedAt?: string;
    deadline?: string;
    callbackBaseUrl: string;
    taskToken: string;
    tokenExpiresAt: string;
    heartbeatIntervalMs: number;
    heartbeatTimeoutMs?: number;
    cancelGracePeriodMs?: number;
}
/** A log record's level, least severe first. */
export type LogLevel = "debug" | "info" | "warn" | "error";
/** Log records: level, message and fields (never a task token). */
export type LogFn = (level: LogLevel, message: string, fields: Record<string, unknown>) => void;
/** The default logger: one JSON line per record on stderr (Cloud Logging's severity). */
export declare const jsonLogger: LogFn;
/** Options of every mode. */
export interface WorkerOptions {
    /** Reported to Servo; unique per process (default $K_REVISION/hostname-<random>). */
    workerId?: string;
    /** Receives the SDK's log records (default: JSON lines on stderr). */
    logger?: LogFn;
    /**
     * The least severe level passed to logger, whichever it is (default "info"). "debug" adds
     * one record per callback answered, heartbeats included.
     */
    logLevel?: LogLevel;
    /** Per callback request, ms (default 30 000). */
    requestTimeoutMs?: number;
    /** [initial, max] ms of the callbacks' exponential backoff (default [250, 15 000]), jittered in [d/2, d). */
    retryBackoffMs?: [number, number];
    /** How long `started` is retried while Servo cannot be reached, ms (default 60 000). */
    startRetryWindowMs?: number;
}
export interface Config {
    workerId: string;
    log: LogFn;
    requestTimeoutMs: number;
    backoffInitial: number;
    backoffMax: number;
    startRetryWindowMs: number;
}
export declare function defaultWorkerId(): string;
export declare function config(o?: WorkerOptions): Config;
/** A delivery that is not a valid Servo envelope. */
export declare class EnvelopeError extends Error {
    constructor(message: string);
}
/** Decodes and checks an envelope, like the Go SDK's parseEnvelope. */
export declare function parseEnvelope(raw: string | Uint8Array | unknown): Envelope;
type Disposition = "CONTINUE" | "COMMITTED" | "CANCELLED" | "REJECTED" | "RETRY";
export interface Reply {
    status: number;
    body: Record<string, unknown>;
    disposition: Disposition;
    retryAfterMs: number;
    /** When the request that got this answer was sent (performance.now()). */
    sentAt: number;
}
/** What one answer means (docs/contract.md §4.7): a Servo body is obeyed whatever its status. */
export declare function judge(op: string, status: number, text: string, retryAfter: string | null, backoffMax: number): Omit<Reply, "sentAt">;
export declare function parseRetryAfter(h: string | null): number;
/** Exponential from initial, capped at max, jittered uniformly in [d/2, d). */
export declare function backoff(attempt: number, initial: number, max: number): number;
/** A W3C trace context: every callback carries a traceparent of this trace. */
export declare class Trace {
    readonly traceId: string;
    readonly flags: string;
    constructor(traceparent?: string | null);
    /** A traceparent for a new child span of this trace. */
    child(): string;
}
/**
 * What a handler gets: the envelope, progress, checkpoints, and the stop
 * signal. Payload is the type of the task's payload and Checkpoint that of
 * its checkpoints (and so of resumeFrom); both are unknown unless a handler
 * names them (Handler<Payload, Checkpoint, Output>). The SDK does not check
 * them: they describe what the submitter and the handler agree on.
 */
export declare class Task<Payload = unknown, Checkpoint = unknown> {
    #private;
    readonly taskId: string;
    readonly runId: string;
    readonly tenantId: string;
    readonly attempt: number;
    readonly workerId: string;
    readonly payload: Payload;
    /** The last checkpoint of an earlier attempt (undefined if none). */
    readonly resumeFrom: Checkpoint | undefined;
    /** The task's deadline, if it has one. */
    readonly deadline: Date | undefined;
    /** Aborted when the attempt must stop; its reason is a StopCause (CancelRequested, LeaseLostError, ...). */
    readonly signal: AbortSignal;
    /** Logs with taskId, attempt, tenantId, runId and workerId. */
    readonly log: (level: LogLevel, message: string, fields?: Record<string, unknown>) => void;
    constructor(env: Envelope, workerId: string, log: (level: LogLevel, message: string, fields?: Record<string, unknown>) => void, flush: () => void);
    /** The envelope without its token. */
    get envelope(): Omit<Envelope, "taskToken">;
    /** Why the attempt must stop, once it must. */
    get cancelCause(): StopCause | undefined;
    /** Throws the StopCause when the attempt must stop. */
    throwIfCancelled(): void;
    /** Sleeps ms, resolving at once when the attempt must stop; resolves true if it must. */
    sleep(ms: number): Promise<boolean>;
    /** Records progress (0–100, message ≤ 4 KiB); the next heartbeat carries the latest. */
    progress(pct: number, message?: string): void;
    /** Names the phase reported as cancelledDuringPhase on a cancel. */
    setPhase(phase: string): void;
    /** Records a checkpoint (JSON ≤ 64 KiB), sent with an early heartbeat; a retry's resumeFrom. */
    checkpoint(state: Checkpoint): void;
    /** The last checkpoint recorded (undefined if none). */
    get lastCheckpoint(): Checkpoint | undefined;
    /** @internal */
    _stop(cause: StopCause): boolean;
    /** @internal the heartbeat body and the checkpoint and progress versions it carries. */
    _heartbeat(workerId: string): [Record<string, unknown>, [number, number]];
    /** @internal */
    _acked(v: [number, number]): void;
    /** @internal whether a heartbeat would carry something new (a checkpoint, a progress or message) Servo has not acknowledged: only a plain heartbeat waits for Servo's pacing hint. */
    _changed(): boolean;
    /** @internal */
    _dirty(): boolean;
    /** @internal */
    _phaseAndCheckpoint(): [string, unknown];
}
/**
 * A handler does the work of one attempt: it returns the output (JSON;
 * undefined for none) or throws. Its type parameters type the payload, the
 * checkpoints (checkpoint() and resumeFrom) and the output; all are
 * unknown by default.
 */
export type Handler<Payload = unknown, Checkpoint = unknown, Output = unknown> = (task: Task<Payload, Checkpoint>) => Output | Promise<Output>;
/** The answer of one attempt (to Cloud Tasks, in push mode). */
export interface Answer {
    result: string;
    code?: string;
    outcome?: string;
    finalState?: string;
    detail?: string;
}
export declare class Run {
    #private;
    readonly env: Envelope;
    readonly task: Task;
    readonly done: Promise<[number, Answer]>;
    constructor(cfg: Config, handler: Handler, env: Envelope, traceparent?: string | null, claimedAt?: number);
    log(level: LogLevel, message: string, fields?: Record<string, unknown>): void;
    stopped(): StopCause | undefined;
    /** Runs the attempt; resolves to the answer (HTTP status to Cloud Tasks, and its body). */
    execute(): Promise<[number, Answer]>;
}
/** Maps what the handler did to the `completed` report, as the Go SDK does (worker/doc.go, Outcomes). */
export declare function outcome(cause: StopCause | undefined, out: unknown, exc: unknown, threw: boolean, task: Task): Record<string, unknown>;
export {};
