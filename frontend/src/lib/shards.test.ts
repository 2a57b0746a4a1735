import { describe, expect, it } from "vitest";
import type { ShardStep } from "../api/types";
import { formatSkew, shardLine, shardTable, share, skew } from "./shards";

function shard(i: number, rowsIn: number, stepMs: number, stateRows: number): ShardStep {
  return { shard: i, rows_in: rowsIn, rows_out: rowsIn / 2, step_ms: stepMs, state_rows: stateRows, state_bytes: 100 * stateRows };
}

describe("skew", () => {
  it("is the largest over the mean", () => {
    expect(skew([1, 1, 1])).toBe(1);
    expect(skew([90, 10])).toBeCloseTo(1.8, 9);
    expect(skew([3, 0, 0])).toBe(3);
    expect(skew([0, 0])).toBeNull();
    expect(skew([])).toBeNull();
    expect(formatSkew(1.8)).toBe("1.80×");
    expect(formatSkew(null)).toBe("—");
  });
});

describe("shardTable", () => {
  it("orders the shards and gives each figure's largest and skew", () => {
    const t = shardTable([shard(1, 10, 3, 30), shard(0, 90, 9, 30), shard(2, 20, 3, 0)]);
    expect(t.shards.map((s) => s.shard)).toEqual([0, 1, 2]);
    expect(t.max.rows_in).toBe(90);
    expect(t.max.state_bytes).toBe(3000);
    expect(t.skew.rows_in).toBeCloseTo(90 / 40, 9);
    expect(t.skew.step_ms).toBeCloseTo(9 / 5, 9);
    expect(t.skew.state_rows).toBeCloseTo(1.5, 9);
    expect(share(45, t.max.rows_in)).toBe(0.5);
    expect(share(1, 0)).toBe(0);
  });

  it("has nothing to compare on an idle step", () => {
    const t = shardTable([shard(0, 0, 0, 5), shard(1, 0, 0, 5)]);
    expect(t.skew.rows_in).toBeNull();
    expect(t.skew.state_rows).toBe(1);
    expect(shardLine(t.shards)).toBe("2 shards · skew — in, — time");
  });

  it("says how uneven a box's shards are", () => {
    expect(shardLine([shard(0, 90, 9, 1), shard(1, 10, 3, 1)])).toBe("2 shards · skew 1.80× in, 1.50× time");
  });
});
