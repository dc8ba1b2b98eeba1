import type { Handler, WorkerOptions } from "./run.js";
/** The environment variable Servo's jobs dispatch puts the envelope in. */
export declare const ENVELOPE_ENV = "SERVO_ENVELOPE";
/** The attempt's fate was settled with Servo, whatever it was. */
export declare const EXIT_SETTLED = 0;
/** No valid envelope, or Servo could not be reached: the attempt is Servo's to re-drive. */
export declare const EXIT_NOT_RUN = 1;
/** The execution's worker id: CLOUD_RUN_EXECUTION, task index and Cloud Run's attempt ("" outside a job). */
export declare function jobWorkerId(): string;
/**
 * Runs the one attempt of this Cloud Run Job execution (envelope in
 * SERVO_ENVELOPE) under the same protocol as push mode, and resolves to the
 * process's exit code: EXIT_SETTLED (0) once the attempt was settled with
 * Servo whatever its fate (so that Cloud Run's own retries never rerun an
 * attempt Servo decided), EXIT_NOT_RUN (1) without a valid envelope or when
 * Servo could not be reached.
 */
export declare function runJob<Payload = unknown, Checkpoint = unknown, Output = unknown>(fn: Handler<Payload, Checkpoint, Output>, options?: WorkerOptions): Promise<number>;
/** runJob, then process.exit with its code: the whole main of a job worker. */
export declare function mainJob<Payload = unknown, Checkpoint = unknown, Output = unknown>(fn: Handler<Payload, Checkpoint, Output>, options?: WorkerOptions): Promise<never>;
