// The dataflow graph's layout: dagre places the nodes top to bottom in layers (inputs
// before their readers) and routes the edges; the page draws the result as SVG.
import dagre from "@dagrejs/dagre";
import type { Dataflow, DataflowNode } from "../api/types";

export const NODE_W = 230;
/** Taller boxes for stateful operators (two more lines of figures; a partitioned
 * pipeline's, once a step reported its shards, one more: their skew) and for input tables
 * and sinks once a step reported their offset and lag or last written step (one more). */
export const NODE_H = 46;
export const OPERATOR_H = 78;
export const SHARDED_H = 94;
export const TABLE_H = 62;

export interface Box {
  node: DataflowNode;
  x: number; // top-left corner
  y: number;
  w: number;
  h: number;
}

export interface Wire {
  source: string;
  target: string;
  points: { x: number; y: number }[];
}

export interface Layout {
  width: number;
  height: number;
  boxes: Box[];
  wires: Wire[];
}

export function layoutDataflow(flow: Pick<Dataflow, "nodes" | "edges">): Layout {
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: "TB", nodesep: 24, ranksep: 30, marginx: 8, marginy: 8 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of flow.nodes) {
    const height = n.operator ? (n.metrics?.shards?.length ? SHARDED_H : OPERATOR_H) : n.input || n.sink ? TABLE_H : NODE_H;
    g.setNode(n.id, { width: NODE_W, height });
  }
  const known = new Set(flow.nodes.map((n) => n.id));
  const edges = flow.edges.filter((e) => known.has(e.source) && known.has(e.target));
  for (const e of edges) g.setEdge(e.source, e.target);
  dagre.layout(g);
  const boxes = flow.nodes.map((node) => {
    const p = g.node(node.id);
    const w = p.width;
    const h = p.height;
    return { node, x: (p.x ?? 0) - w / 2, y: (p.y ?? 0) - h / 2, w, h };
  });
  const wires = edges.map((e) => ({ source: e.source, target: e.target, points: g.edge(e.source, e.target).points ?? [] }));
  const label = g.graph();
  return { width: label.width ?? 0, height: label.height ?? 0, boxes, wires };
}
