// Errors of the Servo worker SDK. Two families, as in the Go and Python
// SDKs: TaskError and its subclasses are what a handler throws to report a
// failure with a category (docs/contract.md §6.1); StopCause and its
// subclasses are why task.signal aborted (task.signal.reason).

/** Error categories of docs/contract.md §6.1. */
export type Category = "USER_CODE" | "DATA_QUALITY" | "INFRASTRUCTURE" | "CONFIGURATION" | "TIMEOUT" | "CONFLICT" | "CANCELLED";

/** A failure with a category; `retryable` is advice to Servo (undefined: the category's default). */
export class TaskError extends Error {
  readonly category: Category;
  readonly retryable: boolean | undefined;
  constructor(category: Category, message: string, options?: { retryable?: boolean; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "TaskError";
    this.category = category;
    this.retryable = options?.retryable;
  }
}

/** FAILED/USER_CODE: a bug in the worker's code. */
export class UserCodeError extends TaskError {
  constructor(message: string, options?: { retryable?: boolean; cause?: unknown }) {
    super("USER_CODE", message, options);
    this.name = "UserCodeError";
  }
}

/** FAILED/DATA_QUALITY: the input is bad; retrying will not help. */
export class DataQualityError extends TaskError {
  constructor(message: string, options?: { retryable?: boolean; cause?: unknown }) {
    super("DATA_QUALITY", message, options);
    this.name = "DataQualityError";
  }
}

/** FAILED/INFRASTRUCTURE: a dependency failed; retryable. */
export class InfrastructureError extends TaskError {
  constructor(message: string, options?: { retryable?: boolean; cause?: unknown }) {
    super("INFRASTRUCTURE", message, options);
    this.name = "InfrastructureError";
  }
}

/** FAILED/CONFIGURATION: the worker or task is misconfigured. */
export class ConfigurationError extends TaskError {
  constructor(message: string, options?: { retryable?: boolean; cause?: unknown }) {
    super("CONFIGURATION", message, options);
    this.name = "ConfigurationError";
  }
}

/** FAILED/TIMEOUT: the work took too long. */
export class TaskTimeoutError extends TaskError {
  constructor(message: string, options?: { retryable?: boolean; cause?: unknown }) {
    super("TIMEOUT", message, options);
    this.name = "TaskTimeoutError";
  }
}

/** FAILED/CONFLICT: a compare-and-swap or optimistic-concurrency conflict; retryable, with a backoff of its own. */
export class ConflictError extends TaskError {
  constructor(message: string, options?: { retryable?: boolean; cause?: unknown }) {
    super("CONFLICT", message, options);
    this.name = "ConflictError";
  }
}

/** CANCELLED: the worker's own decision to cancel (the last checkpoint is partialProgress). */
export class TaskCancelledError extends TaskError {
  constructor(message = "cancelled by the worker") {
    super("CANCELLED", message);
    this.name = "TaskCancelledError";
  }
}

/** Why the attempt must stop: task.signal.reason. */
export class StopCause extends Error {
  constructor(message: string) {
    super(message);
    this.name = "StopCause";
  }
}

/** Servo asked the attempt to stop (a heartbeat answered shouldCancel): reported CANCELLED. */
export class CancelRequested extends StopCause {
  readonly reason: string;
  constructor(reason: string) {
    super("task cancelled by Servo" + (reason ? ": " + reason : ""));
    this.name = "CancelRequested";
    this.reason = reason;
  }
}

/** Codes of a LeaseLostError the SDK decides itself. */
export const CODE_HEARTBEAT_TIMEOUT = "heartbeat_timeout";
export const CODE_SERVO_UNREACHABLE = "servo_unreachable";

/**
 * The attempt lost its authority: Servo answered 409/410, no heartbeat was
 * acknowledged within heartbeatTimeoutMs (fenced), or the token expired while
 * Servo could not be reached. Stop at once; nothing more is reported.
 */
export class LeaseLostError extends StopCause {
  readonly code: string;
  readonly status: number;
  constructor(code: string, message: string, status = 0) {
    super(`lease lost: ${code} (HTTP ${status}): ${message}`);
    this.name = "LeaseLostError";
    this.code = code;
    this.status = status;
  }
}

/** Servo refused a callback as invalid (REJECTED); nothing more is reported. */
export class RejectedError extends StopCause {
  readonly op: string;
  readonly status: number;
  readonly code: string;
  readonly field: string;
  constructor(op: string, status: number, code: string, field: string, message: string) {
    super(`callback rejected by Servo: ${op}: ${code} (HTTP ${status})${field ? " field " + field : ""}${message ? ": " + message : ""}`);
    this.name = "RejectedError";
    this.op = op;
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

/** The task's deadline passed: an error thrown after it is FAILED/TIMEOUT. */
export class DeadlineExceededError extends StopCause {
  constructor() {
    super("task deadline exceeded");
    this.name = "DeadlineExceededError";
  }
}

/** A pull worker stopped the attempt at the end of its grace period: FAILED/INFRASTRUCTURE, retryable. */
export class WorkerStopping extends StopCause {
  constructor() {
    super("worker stopping: the grace period for running tasks is over");
    this.name = "WorkerStopping";
  }
}

/** A claim refused for good (4xx): pull() rejects with it. */
export class ClaimRefused extends Error {
  readonly status: number;
  readonly code: string;
  readonly field: string;
  constructor(status: number, code: string, message: string, field = "") {
    super(`claim refused: HTTP ${status} ${code}${field ? " field " + field : ""}${message ? ": " + message : ""}`);
    this.name = "ClaimRefused";
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

/** A checkpoint's JSON exceeds 64 KiB. */
export class CheckpointTooLargeError extends RangeError {
  constructor(size: number) {
    super(`checkpoint is ${size} bytes; the limit is ${64 << 10}`);
    this.name = "CheckpointTooLargeError";
  }
}
