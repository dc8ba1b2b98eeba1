import type { Handler, WorkerOptions } from "./run.js";
/** Carries PullOptions.devIdentity: the identity `servo dev` takes on trust (production ignores it). */
export declare const DEV_IDENTITY_HEADER = "X-Servo-Dev-Identity";
export interface PullOptions extends WorkerOptions {
    /** The base URL that serves POST /v1/pools/{pool}/claim (the ServoClaim function's, or `servo dev`'s). */
    api: string;
    /** The pull pool's name. */
    pool: string;
    /**
     * Further pull pools to claim from, in priority order after pool: each
     * claim takes an attempt of the first of pool, thenPools[0], thenPools[1],
     * ... that has one (docs/contract.md §10). At most 9, distinct, none equal
     * to pool, each one the caller may claim from: Servo refuses the claim
     * otherwise (400 invalid_request, or 403 permission_denied for a pool the
     * caller may not claim from; the field is thenPools[i], or thenPools for
     * too many) and pull rejects with ClaimRefused. Empty (the default): pool
     * alone.
     */
    thenPools?: readonly string[];
    /** Attempts run at once (default 1); a claim is made only while a slot is free. */
    concurrency?: number;
    /** Each claim's long-poll, ms (default 20 000, at most 60 000). */
    maxWaitMs?: number;
    /** Once signal aborts, how long running attempts may go on, ms (default 30 000). */
    graceMs?: number;
    /** Stops pulling (default: SIGTERM or SIGINT). */
    signal?: AbortSignal;
    /** Sent in X-Servo-Dev-Identity: `servo dev`'s caller identity. */
    devIdentity?: string;
    /** Returns an ID token for each claim (required for an https API); see metadataIdToken. */
    idToken?: () => Promise<string>;
}
/** An ID token for audience from the metadata server (Cloud Run, GKE, Compute Engine), cached for 55 minutes. */
export declare function metadataIdToken(audience: string): () => Promise<string>;
/**
 * Claims attempts from a pull pool and runs fn for each, at most concurrency
 * at a time, with push mode's machinery (heartbeats, checkpoints, cancel,
 * the lease fence, exactly one `completed`); the claim is the attempt's
 * `started`. Empty claims and Servo's 503 are followed by a backoff; a
 * claim refused for good (4xx) rejects with ClaimRefused. When signal
 * aborts, no new claim is made; running attempts have graceMs to finish,
 * then their task.signal aborts with WorkerStopping (reported
 * FAILED/INFRASTRUCTURE, retryable), and pull resolves once every report is in.
 * The claim open when signal aborts is abandoned at once (its request is
 * aborted, so Servo hands the attempt to another worker); a claim whose
 * answer had begun to arrive is read in full, and an attempt in it is not
 * started: it is reported FAILED/INFRASTRUCTURE, retryable, without running
 * fn, so that Servo retries it after the task's retry backoff rather than
 * when its lease runs out.
 */
export declare function pull<Payload = unknown, Checkpoint = unknown, Output = unknown>(fn: Handler<Payload, Checkpoint, Output>, o: PullOptions): Promise<void>;
