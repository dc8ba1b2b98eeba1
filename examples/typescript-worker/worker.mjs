// The example TypeScript worker: the `partitions` worker of
// examples/worker and examples/python-worker on the TypeScript SDK
// (sdk/typescript), in all three modes:
//
//   PORT=8092 node worker.mjs                       push: Cloud Tasks → this HTTP server
//   node worker.mjs --pull API POOL [--dev-identity ID]  pull: claims from a pull pool
//   node worker.mjs --job                           job: one attempt, envelope in SERVO_ENVELOPE
//
// Payload: {"partitions": n, "partitionMs": ms, "failAttempts": k, "invalid": bool}.

import http from "node:http";
import { createHash } from "node:crypto";
import * as sw from "../../sdk/typescript/dist/index.js";

async function processPartitions(task) {
  const p = task.payload ?? {};
  if (p.invalid) throw new sw.DataQualityError("payload marked invalid");
  const n = Number(p.partitions ?? 4);
  const ms = Number(p.partitionMs ?? 100);
  if (!Number.isInteger(n) || n < 1) throw new sw.DataQualityError("partitions must be a positive integer");
  const from = task.resumeFrom?.nextPartition ?? 0;
  const digest = createHash("sha256");
  task.setPhase("processing");
  for (let i = from; i < n; i++) {
    if (await task.sleep(ms)) task.throwIfCancelled(); // Servo asked to stop, or the lease is gone
    digest.update(`${task.taskId}/${i}`);
    task.checkpoint({ nextPartition: i + 1 });
    task.progress((100 * (i + 1)) / n, `partition ${i + 1}/${n}`);
    if (i + 1 === Math.floor(n / 2) && task.attempt <= (p.failAttempts ?? 0)) {
      throw new sw.InfrastructureError(`partition ${i + 1}: simulated outage`); // retried from the checkpoint
    }
  }
  return { partitions: n, processed: n - from, resumedFrom: from, attempt: task.attempt, digest: digest.digest("hex").slice(0, 16) };
}

const args = process.argv.slice(2);
if (args[0] === "--job") {
  await sw.mainJob(processPartitions);
} else if (args[0] === "--pull") {
  const i = args.indexOf("--dev-identity");
  await sw.pull(processPartitions, {
    api: args[1],
    pool: args[2],
    concurrency: Number(process.env.CONCURRENCY ?? 1),
    devIdentity: i > 0 ? args[i + 1] : undefined,
    idToken: args[1].startsWith("https:") ? sw.metadataIdToken(args[1]) : undefined,
  });
} else {
  const handler = sw.pushHandler(processPartitions);
  const srv = http.createServer((req, res) => {
    if (req.method === "GET" && req.url === "/healthz") return res.end("ok\n");
    handler(req, res);
  });
  const port = Number(process.env.PORT ?? 8080);
  srv.listen(port, process.env.HOST ?? "0.0.0.0", () => console.log(`listening on http://127.0.0.1:${srv.address().port}/`));
  process.once("SIGTERM", () => srv.close());
}
