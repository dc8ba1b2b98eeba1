// Pull mode: claim attempts from a pull pool (docs/contract.md §10) and run
// them under the same protocol as push mode, like the Go SDK's worker.Pull.

import { ClaimRefused, InfrastructureError, WorkerStopping } from "./errors.js";
import { backoff, config, EnvelopeError, MAX_ENVELOPE_BYTES, parseEnvelope, parseRetryAfter, Run, USER_AGENT } from "./run.js";
import type { Handler, WorkerOptions } from "./run.js";

/** Carries PullOptions.devIdentity: the identity `servo dev` takes on trust (production ignores it). */
export const DEV_IDENTITY_HEADER = "X-Servo-Dev-Identity";

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
export function metadataIdToken(audience: string): () => Promise<string> {
  let tok = "";
  let until = 0;
  return async () => {
    if (tok && performance.now() < until) return tok;
    const u = "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/identity?format=full&audience=" + encodeURIComponent(audience);
    const res = await fetch(u, { headers: { "Metadata-Flavor": "Google" }, signal: AbortSignal.timeout(10_000) });
    if (!res.ok) throw new Error(`metadata server: HTTP ${res.status}`);
    tok = await res.text();
    until = performance.now() + 55 * 60_000;
    return tok;
  };
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });

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
export async function pull<Payload = unknown, Checkpoint = unknown, Output = unknown>(
  fn: Handler<Payload, Checkpoint, Output>,
  o: PullOptions,
): Promise<void> {
  if (!o.api || !o.pool) throw new Error("servo worker: pull needs api and pool");
  if (typeof (o.thenPools as unknown) === "string") throw new TypeError("servo worker: pull's thenPools is an array of pool names, not one string");
  if (new URL(o.api).protocol === "https:" && !o.idToken) {
    throw new Error(`servo worker: idToken is required for the https API ${o.api}: claims need an ID token (metadataIdToken(api) on Google Cloud)`);
  }
  const cfg = config(o);
  const concurrency = Math.max(o.concurrency ?? 1, 1);
  const maxWait = Math.min(Math.max(o.maxWaitMs ?? 20_000, 1), 60_000);
  const grace = o.graceMs ?? 30_000;
  let stop = o.signal;
  let unhook = () => {};
  if (!stop) {
    const ctl = new AbortController();
    const on = () => ctl.abort();
    process.once("SIGTERM", on);
    process.once("SIGINT", on);
    unhook = () => {
      process.off("SIGTERM", on);
      process.off("SIGINT", on);
    };
    stop = ctl.signal;
  }
  // A copy: the caller's array may change while pull runs.
  const thenPools = [...(o.thenPools ?? [])];
  const fields = { pool: o.pool, workerId: cfg.workerId, ...(thenPools.length > 0 ? { thenPools } : {}) };
  const claimBody = JSON.stringify({ workerId: cfg.workerId, maxWaitMs: maxWait, ...(thenPools.length > 0 ? { thenPools } : {}) });
  const running = new Set<Run>();
  const settled = new Set<Promise<unknown>>();
  let free = concurrency;
  let slotWaiter: (() => void) | undefined;
  const url = o.api.replace(/\/+$/, "") + "/v1/pools/" + encodeURIComponent(o.pool) + "/claim";
  let fatal: ClaimRefused | undefined;
  let empty = 0;
  cfg.log("info", "pulling", { ...fields, concurrency });
  while (!stop.aborted) {
    if (free === 0) {
      const signal = stop;
      await new Promise<void>((r) => {
        const done = () => {
          signal.removeEventListener("abort", done);
          r();
        };
        slotWaiter = done;
        signal.addEventListener("abort", done, { once: true });
      });
      slotWaiter = undefined;
      continue;
    }
    free--;
    let wait = 0;
    let err = "";
    let env;
    let claimedAt = 0;
    try {
      const headers: Record<string, string> = { "Content-Type": "application/json", "User-Agent": USER_AGENT };
      if (o.devIdentity) headers[DEV_IDENTITY_HEADER] = o.devIdentity;
      if (o.idToken) headers.Authorization = "Bearer " + (await o.idToken());
      // Stopping abandons the open long-poll: Servo hands back a message
      // that comes after the caller left (docs/contract.md §10). Once the
      // answer has begun (its status and headers are in) a stop lets it be
      // read: an attempt in it is handed back below rather than lost until
      // its lease runs out.
      const abandon = new AbortController();
      const onStop = () => abandon.abort(stop.reason);
      if (stop.aborted) abandon.abort(stop.reason);
      else stop.addEventListener("abort", onStop, { once: true });
      let res: Response;
      try {
        res = await fetch(url, {
          method: "POST",
          headers,
          body: claimBody,
          signal: AbortSignal.any([AbortSignal.timeout(maxWait + cfg.requestTimeoutMs), abandon.signal]),
        });
      } finally {
        stop.removeEventListener("abort", onStop);
      }
      const text = (await res.text()).slice(0, MAX_ENVELOPE_BYTES + 65536);
      claimedAt = performance.now();
      let body: Record<string, unknown> | undefined;
      try {
        const b = JSON.parse(text) as unknown;
        if (typeof b === "object" && b !== null) body = b as Record<string, unknown>;
      } catch {
        body = undefined;
      }
      const servo = typeof body?.disposition === "string" && ["CONTINUE", "COMMITTED", "CANCELLED", "REJECTED", "RETRY"].includes(body.disposition);
      if (res.status === 200 && servo) {
        if (body!.claimed === true) {
          try {
            env = parseEnvelope(body!.envelope);
          } catch (e) {
            if (!(e instanceof EnvelopeError)) throw e;
            err = "claimed an envelope that is not valid (its lease expires and Servo retries it): " + e.message;
          }
        }
      } else if ((servo && body!.disposition === "RETRY") || (!servo && [408, 429, 500, 502, 503, 504].includes(res.status))) {
        err = `claim answered ${res.status}`;
        wait = parseRetryAfter(res.headers.get("retry-after"));
      } else {
        fatal = new ClaimRefused(res.status, String(body?.error ?? ""), String(body?.message ?? ""), String(body?.field ?? ""));
        cfg.log("error", "claim refused; stopping", { ...fields, status: res.status, code: fatal.code, field: fatal.field, message: fatal.message });
        free++;
        break;
      }
    } catch (e) {
      err = String(e);
    }
    if (stop.aborted && !env) {
      free++;
      break;
    }
    if (!env) {
      free++;
      empty++;
      if (err) {
        cfg.log("warn", "claim failed; backing off", { ...fields, error: err });
        wait = Math.max(wait, backoff(empty, cfg.backoffInitial, cfg.backoffMax));
      } else {
        wait = Math.max(wait, backoff(Math.min(empty, 3), cfg.backoffInitial, cfg.backoffMax));
      }
      await sleep(wait, stop);
      continue;
    }
    empty = 0;
    let handler = fn as Handler;
    if (stop.aborted) {
      // Claimed as the worker stopped (the answer beat the abort): the
      // attempt is ours (the claim was its `started`), but it is not begun.
      // Reporting it FAILED/INFRASTRUCTURE lets Servo schedule its retry
      // now (after the retry backoff) rather than when its lease runs out.
      handler = () => {
        throw new InfrastructureError("claimed as the worker was stopping; not started (worker stopping)", { retryable: true });
      };
      cfg.log("warn", "claimed an attempt after stopping; not starting it, reporting it FAILED/INFRASTRUCTURE (retryable)", { ...fields, taskId: env.taskId, attempt: env.attempt });
    }
    const run = new Run(cfg, handler, env, undefined, claimedAt);
    running.add(run);
    const p: Promise<unknown> = run.execute().finally(() => {
      running.delete(run);
      settled.delete(p);
      free++;
      slotWaiter?.();
    });
    settled.add(p);
  }
  unhook();
  if (running.size > 0) {
    const timer = new Promise<void>((r) => setTimeout(r, grace).unref());
    await Promise.race([Promise.allSettled([...settled]), timer]);
    for (const run of running) {
      run.log("warn", "grace period over; stopping the handler");
      run.task._stop(new WorkerStopping());
    }
    await Promise.allSettled([...settled]);
  }
  if (fatal) throw fatal;
}
