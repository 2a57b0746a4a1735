// A partitioned pipeline's operator-shards (parallelism > 1): each shard's figures in the
// newest step, and how uneven they are (skew: the largest over the mean, 1 when even).
import type { ShardStep } from "../api/types";

export const SHARD_FIGURES = ["rows_in", "rows_out", "step_ms", "state_rows", "state_bytes"] as const;
export type ShardFigure = (typeof SHARD_FIGURES)[number];

/** The largest value over the values' mean: 1 when even, P when one of P has it all; null
 * with nothing to compare (no values, or all 0). */
export function skew(values: number[]): number | null {
  if (values.length === 0) return null;
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  return mean > 0 ? Math.max(...values) / mean : null;
}

export function formatSkew(x: number | null): string {
  return x === null ? "—" : `${x.toFixed(2)}×`;
}

export interface ShardTable {
  shards: ShardStep[]; // in shard order
  max: Record<ShardFigure, number>; // per figure, the largest shard's (the bars' scale)
  skew: Record<ShardFigure, number | null>;
}

export function shardTable(shards: ShardStep[]): ShardTable {
  const sorted = [...shards].sort((a, b) => a.shard - b.shard);
  const max = {} as Record<ShardFigure, number>;
  const sk = {} as Record<ShardFigure, number | null>;
  for (const f of SHARD_FIGURES) {
    const values = sorted.map((s) => s[f]);
    max[f] = values.length ? Math.max(...values) : 0;
    sk[f] = skew(values);
  }
  return { shards: sorted, max, skew: sk };
}

/** A value's share of the largest, 0..1 (a bar's length). */
export function share(value: number, max: number): number {
  return max > 0 ? Math.min(1, Math.max(0, value / max)) : 0;
}

/** The line a sharded operator's box adds: "3 shards · skew 1.80× in, 1.50× time". */
export function shardLine(shards: ShardStep[]): string {
  const t = shardTable(shards);
  return `${shards.length} shards · skew ${formatSkew(t.skew.rows_in)} in, ${formatSkew(t.skew.step_ms)} time`;
}
