// Numbers the charts show, computed from the per-step samples of the metrics API/stream.
import type { Metric } from "../api/types";

export type Sample = Pick<
  Metric,
  | "id"
  | "run_id"
  | "ts"
  | "step"
  | "rows_in"
  | "rows_out"
  | "step_ms"
  | "spark_ms"
  | "engine_ms"
  | "commit_ms"
  | "state_rows"
  | "state_bytes"
  | "spine_batches"
  | "merge_backlog"
  | "memory_bytes"
  | "memory_budget_bytes"
  | "dead_letters"
  | "late_rows"
  | "latency_ms"
>;

/** The q-quantile (0..1) of `values`, interpolating linearly between the closest ranks
 * (numpy's default); undefined for no values. */
export function quantile(values: readonly number[], q: number): number | undefined {
  const xs = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (xs.length === 0) return undefined;
  const pos = Math.min(Math.max(q, 0), 1) * (xs.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  const a = xs[lo] as number;
  const b = xs[hi] as number;
  return a + (b - a) * (pos - lo);
}

export interface ThroughputPoint {
  ts: number;
  step: number;
  inPerS: number;
  outPerS: number;
}

/** Rows per second in and out: each sample's rows divided by the seconds since the previous
 * sample. The first sample, one not later than its predecessor, and the first of a new run
 * (the time since the previous run's last step includes the restart) have no rate. */
export function throughput(samples: readonly Sample[]): ThroughputPoint[] {
  const out: ThroughputPoint[] = [];
  for (let i = 1; i < samples.length; i++) {
    const prev = samples[i - 1] as Sample;
    const cur = samples[i] as Sample;
    const dt = cur.ts - prev.ts;
    if (!(dt > 0)) continue;
    if (cur.run_id !== null && prev.run_id !== null && cur.run_id !== prev.run_id) continue;
    out.push({ ts: cur.ts, step: cur.step, inPerS: cur.rows_in / dt, outPerS: cur.rows_out / dt });
  }
  return out;
}

/** The newest rows-in rate, or undefined with fewer than two samples. */
export function latestThroughput(samples: readonly Sample[]): number | undefined {
  const t = throughput(samples.slice(-2));
  return t.length ? (t[t.length - 1] as ThroughputPoint).inPerS : undefined;
}

export interface LatencyPoint {
  ts: number;
  step: number;
  p50: number;
  p99: number;
  /** The step's end-to-end latency (sink write done - its oldest event time), when the
   * pipeline has an event-time column. */
  e2e: number | null;
}

/** Step latency p50/p99 over a sliding window of the last `window` steps (inclusive), with
 * each step's end-to-end latency. */
export function latency(samples: readonly Sample[], window = 30): LatencyPoint[] {
  const out: LatencyPoint[] = [];
  for (let i = 0; i < samples.length; i++) {
    const w = samples.slice(Math.max(0, i - window + 1), i + 1).map((s) => s.step_ms);
    const cur = samples[i] as Sample;
    out.push({
      ts: cur.ts,
      step: cur.step,
      p50: quantile(w, 0.5) ?? 0,
      p99: quantile(w, 0.99) ?? 0,
      e2e: cur.latency_ms ?? null,
    });
  }
  return out;
}

/** Append `incoming` to `samples`, dropping ids already held, keeping the newest `keep`,
 * ordered by id. Returns `samples` itself when nothing was new. */
export function appendSamples<T extends { id: number }>(
  samples: readonly T[],
  incoming: readonly T[],
  keep = 300,
): readonly T[] {
  const last = samples.length ? (samples[samples.length - 1] as T).id : -Infinity;
  const fresh = incoming.filter((s) => s.id > last);
  if (fresh.length === 0) return samples;
  const merged = samples.concat(fresh);
  return merged.length > keep ? merged.slice(merged.length - keep) : merged;
}
