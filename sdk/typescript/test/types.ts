// Type-level tests of the SDK's declarations, compiled by `tsc -p test`
// (npm test and go test ./sdk/typescript/), never run: every check sits in
// a function nobody calls. A `// @ts-expect-error` line must not compile;
// tsc fails if it does.

import http from "node:http";
import { mainJob, pull, pushHandler, runJob, type Handler, type LogLevel, type Task, type WorkerOptions } from "@servo-dev/worker";

interface Payload {
  rows: number;
}
interface Checkpoint {
  next: number;
}
interface Output {
  rows: number;
}

export function typedHandlers(): void {
  // A typed handler: the payload, the checkpoint (checkpoint() and resumeFrom) and the output.
  const handle: Handler<Payload, Checkpoint, Output> = async (task) => {
    const rows: number = task.payload.rows;
    const start: number = task.resumeFrom?.next ?? 0;
    for (let i = start; i < rows; i++) task.checkpoint({ next: i + 1 });
    const last: Checkpoint | undefined = task.lastCheckpoint;
    void last;
    return { rows };
  };
  http.createServer(pushHandler(handle));
  void pull(handle, { api: "http://localhost:8080", pool: "p" });
  // More pools, in priority order: a mutable or a readonly array.
  void pull(handle, { api: "http://localhost:8080", pool: "p", thenPools: ["q", "r"] });
  const pools: readonly string[] = ["q"];
  void pull(handle, { api: "http://localhost:8080", pool: "p", thenPools: pools });
  void runJob(handle);
  void mainJob(handle);

  // The type parameters inferred from the task's annotation.
  pushHandler(async (task: Task<Payload, Checkpoint>) => ({ rows: task.payload.rows }));

  // Named explicitly on the mode's function: the handler's types follow.
  pushHandler<Payload, Checkpoint, Output>((task) => {
    task.checkpoint({ next: task.payload.rows });
    return { rows: 1 };
  });
}

export function wrongTypes(): void {
  // @ts-expect-error thenPools is an array of pool names, not one name
  void pull(() => 1, { api: "http://localhost:8080", pool: "p", thenPools: "q" });
  pushHandler<Payload, Checkpoint, Output>((task) => {
    // @ts-expect-error the payload has no field cols
    void task.payload.cols;
    // @ts-expect-error a checkpoint of the wrong shape
    task.checkpoint({ next: "3" });
    // @ts-expect-error resumeFrom may be undefined (no earlier checkpoint)
    void task.resumeFrom.next;
    return { rows: 1 };
  });
  // @ts-expect-error the output is not an Output
  pushHandler<Payload, Checkpoint, Output>(() => ({ rows: "many" }));
  // @ts-expect-error an async handler's output is checked too
  const h: Handler<Payload, Checkpoint, Output> = async () => "done";
  void h;
  // @ts-expect-error a handler of another payload is not this one's
  const other: Handler<Payload> = (task: Task<{ cols: string }>) => task.payload.cols;
  void other;
}

export function untypedStillWorks(): void {
  // Untyped users: everything is unknown, as before; any output, any checkpoint.
  const h = pushHandler(async (task) => {
    const p = task.payload as { rows?: number };
    task.checkpoint({ anything: [1, "two"] });
    task.checkpoint(7);
    const u: unknown = task.resumeFrom;
    void u;
    // @ts-expect-error the payload is unknown until it is typed
    void task.payload.rows;
    return p.rows ?? "none";
  });
  const t: Task = undefined as unknown as Task;
  const hh: Handler = (task: Task) => task.payload;
  void t;
  void hh;
  void h;
}

export function logLevels(): void {
  const levels: LogLevel[] = ["debug", "info", "warn", "error"];
  const o: WorkerOptions = { logLevel: "warn" };
  // @ts-expect-error not a level
  const bad: WorkerOptions = { logLevel: "verbose" };
  void levels;
  void o;
  void bad;
}
