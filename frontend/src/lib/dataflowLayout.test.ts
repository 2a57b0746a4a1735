import { describe, expect, it } from "vitest";
import type { DataflowNode } from "../api/types";
import { layoutDataflow, NODE_H, OPERATOR_H, SHARDED_H } from "./dataflowLayout";

function node(id: string, operator: string | null = null): DataflowNode {
  return { id, kind: operator ? "aggregate" : "project", label: id, view: null, operator, metrics: null };
}

describe("layoutDataflow", () => {
  const flow = {
    nodes: [node("table:t"), node("v.project1"), node("v.agg0", "v.agg0"), node("view:v"), node("sink:s")],
    edges: [
      { source: "table:t", target: "v.project1" },
      { source: "v.project1", target: "v.agg0" },
      { source: "v.agg0", target: "view:v" },
      { source: "view:v", target: "sink:s" },
      { source: "view:gone", target: "sink:s" }, // an unknown end is left out, not drawn
    ],
  };

  it("places each input above its readers, operators taller", () => {
    const { boxes, wires, width, height } = layoutDataflow(flow);
    const at = Object.fromEntries(boxes.map((b) => [b.node.id, b]));
    const order = ["table:t", "v.project1", "v.agg0", "view:v", "sink:s"];
    for (let i = 1; i < order.length; i++) expect(at[order[i]!]!.y).toBeGreaterThan(at[order[i - 1]!]!.y);
    expect(at["v.agg0"]!.h).toBe(OPERATOR_H);
    expect(at["table:t"]!.h).toBe(NODE_H);
    expect(wires).toHaveLength(4);
    for (const w of wires) expect(w.points.length).toBeGreaterThanOrEqual(2);
    for (const b of boxes) {
      expect(b.x).toBeGreaterThanOrEqual(0);
      expect(b.x + b.w).toBeLessThanOrEqual(width);
      expect(b.y + b.h).toBeLessThanOrEqual(height);
    }
  });

  it("gives a partitioned pipeline's operator a line more for its shards", () => {
    const figures = { rows_in: 4, rows_out: 2, step_ms: 1, state_rows: 2, state_bytes: 64 };
    const sharded = { ...node("v.agg0", "v.agg0"), metrics: { ...figures, shards: [{ shard: 0, ...figures }] } };
    const single = { ...node("w.agg0", "w.agg0"), metrics: { ...figures, shards: null } };
    const { boxes } = layoutDataflow({ nodes: [sharded, single], edges: [] });
    expect(boxes.map((b) => b.h)).toEqual([SHARDED_H, OPERATOR_H]);
  });
});
