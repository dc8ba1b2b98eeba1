/** Error categories of docs/contract.md §6.1. */
export type Category = "USER_CODE" | "DATA_QUALITY" | "INFRASTRUCTURE" | "CONFIGURATION" | "TIMEOUT" | "CONFLICT" | "CANCELLED";
/** A failure with a category; `retryable` is advice to Servo (undefined: the category's default). */
export declare class TaskError extends Error {
    readonly category: Category;
    readonly retryable: boolean | undefined;
    constructor(category: Category, message: string, options?: {
        retryable?: boolean;
        cause?: unknown;
    });
}
/** FAILED/USER_CODE: a bug in the worker's code. */
export declare class UserCodeError extends TaskError {
    constructor(message: string, options?: {
        retryable?: boolean;
        cause?: unknown;
    });
}
/** FAILED/DATA_QUALITY: the input is bad; retrying will not help. */
export declare class DataQualityError extends TaskError {
    constructor(message: string, options?: {
        retryable?: boolean;
        cause?: unknown;
    });
}
/** FAILED/INFRASTRUCTURE: a dependency failed; retryable. */
export declare class InfrastructureError extends TaskError {
    constructor(message: string, options?: {
        retryable?: boolean;
        cause?: unknown;
    });
}
/** FAILED/CONFIGURATION: the worker or task is misconfigured. */
export declare class ConfigurationError extends TaskError {
    constructor(message: string, options?: {
        retryable?: boolean;
        cause?: unknown;
    });
}
/** FAILED/TIMEOUT: the work took too long. */
export declare class TaskTimeoutError extends TaskError {
    constructor(message: string, options?: {
        retryable?: boolean;
        cause?: unknown;
    });
}
/** FAILED/CONFLICT: a compare-and-swap or optimistic-concurrency conflict; retryable, with a backoff of its own. */
export declare class ConflictError extends TaskError {
    constructor(message: string, options?: {
        retryable?: boolean;
        cause?: unknown;
    });
}
/** CANCELLED: the worker's own decision to cancel (the last checkpoint is partialProgress). */
export declare class TaskCancelledError extends TaskError {
    constructor(message?: string);
}
/** Why the attempt must stop: task.signal.reason. */
export declare class StopCause extends Error {
    constructor(message: string);
}
/** Servo asked the attempt to stop (a heartbeat answered shouldCancel): reported CANCELLED. */
export declare class CancelRequested extends StopCause {
    readonly reason: string;
    constructor(reason: string);
}
/** Codes of a LeaseLostError the SDK decides itself. */
export declare const CODE_HEARTBEAT_TIMEOUT = "heartbeat_timeout";
export declare const CODE_SERVO_UNREACHABLE = "servo_unreachable";
/**
 * The attempt lost its authority: Servo answered 409/410, no heartbeat was
 * acknowledged within heartbeatTimeoutMs (fenced), or the token expired while
 * Servo could not be reached. Stop at once; nothing more is reported.
 */
export declare class LeaseLostError extends StopCause {
    readonly code: string;
    readonly status: number;
    constructor(code: string, message: string, status?: number);
}
/** Servo refused a callback as invalid (REJECTED); nothing more is reported. */
export declare class RejectedError extends StopCause {
    readonly op: string;
    readonly status: number;
    readonly code: string;
    readonly field: string;
    constructor(op: string, status: number, code: string, field: string, message: string);
}
/** The task's deadline passed: an error thrown after it is FAILED/TIMEOUT. */
export declare class DeadlineExceededError extends StopCause {
    constructor();
}
/** A pull worker stopped the attempt at the end of its grace period: FAILED/INFRASTRUCTURE, retryable. */
export declare class WorkerStopping extends StopCause {
    constructor();
}
/** A claim refused for good (4xx): pull() rejects with it. */
export declare class ClaimRefused extends Error {
    readonly status: number;
    readonly code: string;
    readonly field: string;
    constructor(status: number, code: string, message: string, field?: string);
}
/** A checkpoint's JSON exceeds 64 KiB. */
export declare class CheckpointTooLargeError extends RangeError {
    constructor(size: number);
}
