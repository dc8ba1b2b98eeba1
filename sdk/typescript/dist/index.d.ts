export * from "./errors.js";
export { Task, parseEnvelope, EnvelopeError, defaultWorkerId, jsonLogger } from "./run.js";
export type { Envelope, Handler, WorkerOptions, LogFn, LogLevel, Answer } from "./run.js";
export { pushHandler } from "./push.js";
export type { PushHandler } from "./push.js";
export { pull, metadataIdToken, DEV_IDENTITY_HEADER } from "./pull.js";
export type { PullOptions } from "./pull.js";
export { runJob, mainJob, jobWorkerId, ENVELOPE_ENV, EXIT_SETTLED, EXIT_NOT_RUN } from "./job.js";
