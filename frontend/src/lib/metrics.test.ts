import { describe, expect, it } from "vitest";
import { appendSamples, latency, latestThroughput, quantile, throughput, type Sample } from "./metrics";

function sample(id: number, ts: number, rowsIn: number, stepMs = 10, rowsOut = rowsIn / 2): Sample {
  return {
    id,
    run_id: 1,
    ts,
    step: id,
    rows_in: rowsIn,
    rows_out: rowsOut,
    step_ms: stepMs,
    spark_ms: stepMs / 2,
    engine_ms: stepMs / 4,
    commit_ms: stepMs / 4,
    state_rows: 0,
    state_bytes: 0,
    spine_batches: 0,
    merge_backlog: 0,
    memory_bytes: 0,
    memory_budget_bytes: 0,
    dead_letters: 0,
    late_rows: 0,
    latency_ms: null,
  };
}

describe("quantile", () => {
  it("interpolates between ranks", () => {
    expect(quantile([], 0.5)).toBeUndefined();
    expect(quantile([5], 0.99)).toBe(5);
    expect(quantile([3, 1, 2], 0.5)).toBe(2);
    expect(quantile([1, 2, 3, 4], 0.5)).toBe(2.5);
    expect(quantile([10, 20, 30, 40, 50], 0)).toBe(10);
    expect(quantile([10, 20, 30, 40, 50], 1)).toBe(50);
    const hundred = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(quantile(hundred, 0.99)).toBeCloseTo(99.01, 6);
  });
});

describe("throughput", () => {
  it("divides each sample's rows by the time since the previous one", () => {
    const s = [sample(1, 100, 50), sample(2, 100.5, 1000), sample(3, 102.5, 1000)];
    expect(throughput(s)).toEqual([
      { ts: 100.5, step: 2, inPerS: 2000, outPerS: 1000 },
      { ts: 102.5, step: 3, inPerS: 500, outPerS: 250 },
    ]);
    expect(latestThroughput(s)).toBe(500);
    expect(latestThroughput(s.slice(0, 1))).toBeUndefined();
  });

  it("skips samples that are not later than their predecessor", () => {
    expect(throughput([sample(1, 10, 5), sample(2, 10, 5), sample(3, 9, 5)])).toEqual([]);
  });

  it("has no rate for the first sample of a new run", () => {
    const s = [sample(1, 10, 5), { ...sample(2, 70, 600), run_id: 2 }, { ...sample(3, 71, 600), run_id: 2 }];
    expect(throughput(s).map((p) => p.inPerS)).toEqual([600]);
  });
});

describe("latency", () => {
  it("uses a sliding window of the last N steps", () => {
    const s = Array.from({ length: 40 }, (_, i) => sample(i + 1, i, 1, i < 10 ? 1000 : 10));
    const l = latency(s, 30);
    expect(l).toHaveLength(40);
    expect(l[0]?.p50).toBe(1000);
    // At index 38 the window is indexes 9..38: one slow step (index 9) among 30.
    expect(l[38]?.p50).toBe(10);
    // Sorted: 29 x 10 then 1000; p99 sits at rank 0.99 * 29 = 28.71, between them.
    expect(l[38]?.p99).toBeCloseTo(10 + (1000 - 10) * 0.71, 6);
    // At index 39 the window (10..39) holds only fast steps.
    expect(l[39]?.p99).toBe(10);
  });

  it("carries each step's end-to-end latency, null when the pipeline has no event time", () => {
    const s = [sample(1, 1, 1), { ...sample(2, 2, 1), latency_ms: 5200 }];
    expect(latency(s).map((p) => p.e2e)).toEqual([null, 5200]);
  });
});

describe("appendSamples", () => {
  it("drops known ids and keeps the newest N", () => {
    const a = [sample(1, 1, 1), sample(2, 2, 1)];
    expect(appendSamples(a, [sample(2, 2, 1)])).toBe(a);
    const b = appendSamples(a, [sample(2, 2, 1), sample(3, 3, 1), sample(4, 4, 1)], 3);
    expect(b.map((x) => x.id)).toEqual([2, 3, 4]);
  });
});
