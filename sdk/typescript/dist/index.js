// Servo's TypeScript worker SDK: the worker side of Servo's callback
// contract (docs/contract.md §4, §14), with the obligations of the Go SDK
// (worker/doc.go), in three modes: push (pushHandler), pull (pull) and job
// (runJob). No runtime dependency beyond Node's own modules.
export * from "./errors.js";
export { Task, parseEnvelope, EnvelopeError, defaultWorkerId, jsonLogger } from "./run.js";
export { pushHandler } from "./push.js";
export { pull, metadataIdToken, DEV_IDENTITY_HEADER } from "./pull.js";
export { runJob, mainJob, jobWorkerId, ENVELOPE_ENV, EXIT_SETTLED, EXIT_NOT_RUN } from "./job.js";
