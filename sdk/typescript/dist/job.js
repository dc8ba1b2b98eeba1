// Job mode: one attempt per Cloud Run Job execution, its envelope in the
// environment (docs/contract.md §11), like the Go SDK's worker.RunJob.
import { config, EnvelopeError, parseEnvelope, Run } from "./run.js";
/** The environment variable Servo's jobs dispatch puts the envelope in. */
export const ENVELOPE_ENV = "SERVO_ENVELOPE";
/** The attempt's fate was settled with Servo, whatever it was. */
export const EXIT_SETTLED = 0;
/** No valid envelope, or Servo could not be reached: the attempt is Servo's to re-drive. */
export const EXIT_NOT_RUN = 1;
/** The execution's worker id: CLOUD_RUN_EXECUTION, task index and Cloud Run's attempt ("" outside a job). */
export function jobWorkerId() {
    const ex = process.env.CLOUD_RUN_EXECUTION;
    if (!ex)
        return "";
    return [ex, "task-" + (process.env.CLOUD_RUN_TASK_INDEX || "0"), "try-" + (process.env.CLOUD_RUN_TASK_ATTEMPT || "0")].join("/");
}
/**
 * Runs the one attempt of this Cloud Run Job execution (envelope in
 * SERVO_ENVELOPE) under the same protocol as push mode, and resolves to the
 * process's exit code: EXIT_SETTLED (0) once the attempt was settled with
 * Servo whatever its fate (so that Cloud Run's own retries never rerun an
 * attempt Servo decided), EXIT_NOT_RUN (1) without a valid envelope or when
 * Servo could not be reached.
 */
export async function runJob(fn, options = {}) {
    const cfg = config({ ...options, workerId: options.workerId || jobWorkerId() || undefined });
    const raw = process.env[ENVELOPE_ENV];
    if (!raw) {
        cfg.log("error", `no Servo envelope in ${ENVELOPE_ENV}: this process was not started by Servo's jobs dispatch`, { workerId: cfg.workerId });
        return EXIT_NOT_RUN;
    }
    let env;
    try {
        env = parseEnvelope(raw);
    }
    catch (e) {
        if (!(e instanceof EnvelopeError))
            throw e;
        cfg.log("error", `the envelope in ${ENVELOPE_ENV} is not valid`, { workerId: cfg.workerId, error: e.message });
        return EXIT_NOT_RUN;
    }
    const run = new Run(cfg, fn, env, process.env.TRACEPARENT);
    const [status, answer] = await run.execute();
    if (answer.result === "servo_unreachable" || answer.result === "internal_error") {
        run.log("error", "job attempt not settled with Servo", { result: answer.result, status, detail: answer.detail });
        return EXIT_NOT_RUN;
    }
    run.log("info", "job attempt settled with Servo", { result: answer.result, outcome: answer.outcome, finalState: answer.finalState });
    return EXIT_SETTLED;
}
/** runJob, then process.exit with its code: the whole main of a job worker. */
export async function mainJob(fn, options = {}) {
    const code = await runJob(fn, options);
    process.exit(code);
}
