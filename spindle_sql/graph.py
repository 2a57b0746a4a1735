"""A pipeline's dataflow as a graph for people: its input table, its operators (linear and
stateful, each stateful one under its persistent id) and views, and its sinks, with edges
from each input to its readers. The console draws it with each operator's figures."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import get_args

from pipeline_spec import model as S

from . import plan as P
from .dataflow import Dataflow
from .spec import plan_spec

_MAPS = ("filter", "project")


@dataclass(frozen=True)
class GraphNode:
    id: str
    kind: str  # table, filter, project, window, aggregate, join, distinct, top_n, negate,
    # union, view, emit_final, sink, or an operator spec's kind
    label: str
    view: str | None = None  # the view whose plan holds the node
    operator: str | None = None  # a stateful operator's id (its metrics' key)


@dataclass(frozen=True)
class Graph:
    nodes: list[GraphNode]
    edges: list[tuple[str, str]]  # (from, to) node ids


def pipeline_graph(spec: S.PipelineSpec) -> Graph:
    """The graph of a valid spec (SpecError if its SQL does not plan)."""
    if spec.sql is None:
        return _operators_graph(spec)
    sql = plan_spec(spec)
    flow = Dataflow(sql.views, event_time=sql.event_time)
    nodes: dict[str, GraphNode] = {}
    edges: list[tuple[str, str]] = []
    ids: dict[int, str] = {}
    views = {name: f"view:{name}" for name in sql.views}
    per_view: Counter[str | None] = Counter()
    readers = Counter(id(c) for n, _, _ in flow.nodes() for c in P.children(n))
    for node, view, op_id in flow.nodes():
        if isinstance(node, P.ViewRef):
            ids[id(node)] = views[node.view]
            continue
        if isinstance(node, P.Scan):
            ids[id(node)] = f"table:{node.table}"
            nodes[ids[id(node)]] = GraphNode(ids[id(node)], "table", node.table)
            continue
        kind, label = _describe(node)
        (child, *_) = P.children(node)
        if kind in _MAPS and isinstance(child, P.Filter | P.Project) and readers[id(child)] == 1:
            # A run of filters and projections is one step for people: one node.
            nid = ids[id(node)] = ids[id(child)]
            parts = nodes[nid].label.split(" · ")
            if label not in parts:
                nodes[nid] = replace(nodes[nid], label=" · ".join([*parts, label]))
            continue
        per_view[view] += 1
        nid = ids[id(node)] = op_id or f"{view}.{kind}{per_view[view]}"
        nodes[nid] = GraphNode(nid, kind, label, view, op_id)
        edges += [(ids[id(c)], nid) for c in P.children(node)]
    outputs = dict(views)
    for name, v in sql.views.items():
        nodes[views[name]] = GraphNode(views[name], "view", name, name)
        edges.append((ids[id(v.root)], views[name]))
        if (op := flow.final_operator(name)) is not None:  # before the sinks, not readers
            nodes[op] = GraphNode(op, "emit_final", f"emit final on {v.emit_final}", name, op)
            edges.append((views[name], op))
            outputs[name] = op
    return _with_sinks(Graph(list(nodes.values()), edges), spec, outputs)


def _describe(node: P.Node) -> tuple[str, str]:
    if isinstance(node, P.Filter):
        return "filter", "filter"
    if isinstance(node, P.Project):
        return "project", "project"
    if isinstance(node, P.Windows):
        size, slide = node.size_us / 1e6, node.slide_us / 1e6
        label = f"tumble {size:g} s" if size == slide else f"hop {size:g} s every {slide:g} s"
        return "window", label
    if isinstance(node, P.Sessions):
        return "window", f"session, gap {node.gap_us / 1e6:g} s"
    if isinstance(node, P.Aggregate):
        funcs = ", ".join(f"{a.func}{' distinct' if a.distinct else ''}" for a in node.aggs)
        keys = f"by {len(node.keys)} keys" if node.keys else "global"
        return "aggregate", f"aggregate {keys}: {funcs}" if funcs else f"aggregate {keys}"
    if isinstance(node, P.Join):
        return "join", f"join on {len(node.left_keys)} keys"
    if isinstance(node, P.Distinct):
        return "distinct", "distinct"
    if isinstance(node, P.Upsert):
        return "upsert", f"upsert by {len(node.keys)} keys"
    if isinstance(node, P.TopN):
        return "top_n", f"top {node.limit}"
    if isinstance(node, P.RowsOver):
        ranges = node.ranges or (False,) * len(node.aggs)
        labels = (
            a.func
            if a.func in get_args(P.WindowFunc)
            else f"{a.func} over {'all rows to peers' if p is None else f'range {p}'}"
            if r
            else f"{a.func} over {'all rows' if p is None else f'{p + 1} rows'}"
            for a, p, r in zip(node.aggs, node.frames, ranges, strict=True)
        )
        return "aggregate", ", ".join(labels)
    if isinstance(node, P.Negate):
        return "negate", "negate"
    return "union", "union all"


def _operators_graph(spec: S.PipelineSpec) -> Graph:
    table = GraphNode("table:source", "table", "source")
    nodes, edges = [table], []
    for op in spec.state:
        nodes.append(GraphNode(op.name, op.kind, f"{op.kind} {op.name}", None, op.name))
        edges.append((table.id, op.name))
    return _with_sinks(Graph(nodes, edges), spec, {op.name: op.name for op in spec.state})


def _with_sinks(graph: Graph, spec: S.PipelineSpec, outputs: dict[str, str]) -> Graph:
    for sink in spec.sinks:
        nid = f"sink:{sink.name}"
        graph.nodes.append(GraphNode(nid, "sink", f"{sink.kind} sink {sink.name}"))
        graph.edges.append((outputs[sink.from_], nid))
    return graph


__all__ = ["Graph", "GraphNode", "pipeline_graph"]
