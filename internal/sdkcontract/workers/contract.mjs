// The contract worker of the shared SDK contract test (package sdkcontract),
// on the TypeScript SDK: node contract.mjs push PORT | pull API POOL
// [MAX_WAIT_MS [GRACE_MS]] | job. A pull worker stops on SIGTERM (the SDK's
// own handler) and then prints STOPPING.

import http from "node:http";
import * as sw from "../../../sdk/typescript/dist/index.js";

// The SDK's error classes by category name: payload failCategory (default
// INFRASTRUCTURE) is the class of the failAttempts' errors.
const categories = {
  USER_CODE: sw.UserCodeError, DATA_QUALITY: sw.DataQualityError, INFRASTRUCTURE: sw.InfrastructureError,
  CONFIGURATION: sw.ConfigurationError, TIMEOUT: sw.TaskTimeoutError, CONFLICT: sw.ConflictError,
  CANCELLED: sw.TaskCancelledError,
};

async function handle(t) {
  const p = t.payload ?? {};
  const failCategory = p.failCategory ?? "INFRASTRUCTURE";
  if (!Object.hasOwn(categories, failCategory)) throw new sw.DataQualityError(`unknown failCategory ${JSON.stringify(failCategory)}`);
  const Fail = categories[failCategory];
  process.stdout.write(`RUN ${t.taskId} ${t.attempt}\n`);
  const steps = p.steps ?? 3;
  const stepMs = p.stepMs ?? 20;
  const start = t.resumeFrom?.next ?? 0;
  t.setPhase("processing");
  for (let i = start; i < steps; i++) {
    if (await t.sleep(stepMs)) t.throwIfCancelled();
    t.checkpoint({ next: i + 1 });
    t.progress((100 * (i + 1)) / steps);
    if (i + 1 === Math.floor(steps / 2) && t.attempt <= (p.crashAttempts ?? 0)) {
      await t.sleep(1000); // the checkpoint's heartbeat goes out first
      process.exit(3);
    }
    // Attempts up to failAttempts fail at the half-way step, or at their
    // first step when they resumed past it.
    if (i + 1 >= Math.floor(steps / 2) && t.attempt <= (p.failAttempts ?? 0)) {
      throw new Fail(`planned failure at step ${i + 1}`);
    }
  }
  return { attempt: t.attempt, resumedFrom: start, processed: steps - start };
}

const [mode, a, b] = process.argv.slice(2);
if (mode === "push") {
  const srv = http.createServer(sw.pushHandler(handle));
  srv.listen(Number(a), "127.0.0.1", () => process.stdout.write(`listening on http://127.0.0.1:${srv.address().port}/\n`));
} else if (mode === "pull") {
  const maxWaitMs = process.argv[5] ? Number(process.argv[5]) : 2000;
  const graceMs = process.argv[6] ? Number(process.argv[6]) : 5000;
  const pulling = sw.pull(handle, { api: a, pool: b, concurrency: 2, maxWaitMs, graceMs, devIdentity: "contract-worker" });
  // After the SDK's SIGTERM listener (added as pull began): pull sees the stop from now on.
  process.once("SIGTERM", () => process.stdout.write("STOPPING\n"));
  await pulling;
} else if (mode === "job") {
  await sw.mainJob(handle);
}
