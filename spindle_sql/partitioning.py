"""A dataflow cut into levels and exchanges, for partitioned execution (issue 50).

Each stateful node is partitioned by its key: an aggregate by its GROUP BY keys, a join's
sides by their keys (pair by pair, so equal keys meet), top-N, `OVER` and sessions by their
partition columns, DISTINCT by all its columns, a view's `emit_final` stage by all the
view's columns. Rows reach the shard that owns their key group (`storage_engine.key_groups`).
A node without a key keys every row alike: the shard owning the empty key's group holds
its state. An aggregate without GROUP BY does not get the rows there: each shard reduces
its part to one partial row (the change of the aggregate's accumulators; a min/max
column's values consolidated), and the owner merges the shards' partials into its state.
Other nodes without a key (a global top-N, a join without an equality) need every row
where their state is: that shard does all of their work. A keyed aggregate's rows travel
as the columns it reads, equal rows consolidated by the sending shard (one row per group
for a `count(*)`). An operator spec's window aggregate goes whole to the empty key's shard:
its watermark is its own, from the rows it sees, and a shard would see only some of them.

Linear nodes (filter, project, windows, negate, union, view references, scans) work row by
row, so they run wherever their input rows are. Levels order the work: a scan is at level
0, a stateful node one above its highest input, a linear node at its highest input's level
(a view's `emit_final` stage one above the view's root). Every shard of level L evaluates
level L's nodes over the rows it received, then sends its values on (`Consumer`): to the
shard owning each row's key for a stateful reader, to the same shard of the reader's level
for a linear one, to the driver for a view's output.

Ports name what a shard receives:

- `t:<input>`: an input table's rows (level 0);
- `s<i>.<k>`: input k of stateful node i (nodes are numbered in `Dataflow.nodes()` order,
  the same in every process that plans the same views); for an aggregate without GROUP
  BY, the partials of its input: `s<i>.0` the accumulators', `s<i>.0:<column>` a min/max
  column's;
- `v<i>`: node i's rows for a linear node of a later level;
- `f:<view>`: the view's rows for its `emit_final` stage;
- `o:<view>`: the view's rows, to the driver;
- `w`: level 0's watermark records (`shard_level.py`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from storage_engine.circuit.aggregate import ACC

from . import plan as P
from .dataflow import Dataflow

T = TypeVar("T")
DRIVER = -1  # the level of what goes to the driver
WATERMARKS = "w"


def table_port(name: str) -> str:
    return f"t:{name}"


def final_port(view: str) -> str:
    return f"f:{view}"


def output_port(view: str) -> str:
    return f"o:{view}"


@dataclass(frozen=True)
class Consumer:
    """Where a node's rows go: `port` at `level`; `keys` the columns (of the node's rows)
    that choose the shard, or None for the same shard as the rows' (a linear reader) or
    the driver; `reads` the columns the reader uses, when not all (an aggregate's keys and
    arguments: the rows travel as those columns alone, consolidated); `aggregate`: the
    reader is this aggregate node without GROUP BY, which receives the rows' partials
    (`Dataflow.partial_value`: one group, so all on the empty key's shard) instead."""

    port: str
    level: int
    keys: tuple[str, ...] | None
    reads: tuple[str, ...] | None = None
    aggregate: int | None = None


class Partitioning:
    """`flow`'s levels and exchanges."""

    def __init__(self, flow: Dataflow) -> None:
        self.flow = flow
        described = flow.nodes()
        self.nodes: list[P.Node] = [n for n, _, _ in described]
        self.index = {id(n): i for i, n in enumerate(self.nodes)}
        self.operator: dict[int, str] = {i: op for i, (_, _, op) in enumerate(described) if op}
        roots = {name: v.root for name, v in flow.views.items()}
        self.level: list[int] = []
        for i, node in enumerate(self.nodes):
            below = [self.level[self.index[id(c)]] for c in self.inputs(node)]
            top = max(below, default=0)
            self.level.append(top + 1 if i in self.operator else top)
        self.root = {name: self.index[id(r)] for name, r in roots.items()}
        self.finals = {
            name: self.level[self.root[name]] + 1
            for name in flow.views
            if flow.final_operator(name) is not None
        }
        self.levels = 1 + max([*self.level, *self.finals.values()], default=0)
        self.consumers: list[list[Consumer]] = [[] for _ in self.nodes]
        for i, node in enumerate(self.nodes):
            for k, child in enumerate(self.inputs(node)):
                c = self.index[id(child)]
                if i in self.operator:
                    port, level = f"s{i}.{k}", self.level[i]
                    if receives_partials(node):
                        consumer = Consumer(port, level, _keys(node, k), aggregate=i)
                    else:
                        consumer = Consumer(port, level, _keys(node, k), _reads(node))
                    self.consumers[c].append(consumer)
                elif self.level[i] > self.level[c]:
                    forward = Consumer(f"v{c}", self.level[i], None)
                    if forward not in self.consumers[c]:
                        self.consumers[c].append(forward)
        for name, r in self.root.items():
            if name in self.finals:
                keys = tuple(self.nodes[r].schema.names)
                self.consumers[r].append(Consumer(final_port(name), self.finals[name], keys))
            else:
                self.consumers[r].append(Consumer(output_port(name), DRIVER, None))

    @property
    def identity(self) -> str:
        """What names this plan in a shard step's request: the views' plans and the
        operators' fingerprints (the circuit's fingerprint covers the operators' layouts
        only, and two plans that differ in a filter must not share a shard's dataflow)."""
        views = {name: repr(v.root) for name, v in self.flow.views.items()}
        ops = self.flow.circuit.operator_fingerprints
        text = json.dumps({"views": views, "operators": ops}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def inputs(self, node: P.Node) -> list[P.Node]:
        """The nodes whose rows `node` reads: its children, a view reference's root."""
        if isinstance(node, P.ViewRef):
            return [self.flow.views[node.view].root]
        return P.children(node)

    def at(self, level: int) -> list[int]:
        """The nodes of `level`, inputs before their readers."""
        return [i for i, lv in enumerate(self.level) if lv == level]

    def operators_at(self, level: int) -> list[str]:
        """The ids of the operators (stateful nodes' and `emit_final` stages') at `level`:
        the operator-shards a shard of that level steps."""
        ops = [self.operator[i] for i in self.at(level) if i in self.operator]
        for name, lv in self.finals.items():
            if lv == level:
                op = self.flow.final_operator(name)
                assert op is not None
                ops.append(op)
        return ops

    def operators(self) -> list[str]:
        return [op for level in range(self.levels) for op in self.operators_at(level)]

    def state_keys(self, op_id: str) -> list[tuple[str, ...]]:
        """Per input of operator `op_id`, the columns its rows are partitioned by, as the
        operator names them (so as its state's rows of that input hold them)."""
        names = self.flow.operator_columns(op_id)
        for name in self.finals:
            if self.flow.final_operator(name) == op_id:
                return [tuple(names[0])]
        i = next((i for i, op in self.operator.items() if op == op_id), None)
        if i is None:
            raise KeyError(f"no operator {op_id!r} in this plan")
        node = self.nodes[i]
        out = []
        for k, child in enumerate(self.inputs(node)):
            position = {c: j for j, c in enumerate(child.schema.names)}
            out.append(tuple(names[k][position[c]] for c in _keys(node, k)))
        return out


def receives_partials(node: P.Node) -> bool:
    """Whether a stateful node's input travels as partials (`GroupAggregate.partial`): an
    aggregate without GROUP BY's."""
    return isinstance(node, P.Aggregate) and not node.keys and node.aggs[0].func != "udf"


def partial_port(port: str, part: str) -> str:
    """The port of an aggregate's partial `part` (`GroupAggregate.partial`'s keys)."""
    return port if part == ACC else f"{port}:{part}"


def partials_at(port: str, inputs: Mapping[str, T]) -> dict[str, T]:
    """The partials among `inputs` (by port) sent to `port`, by part: `partial_port`'s
    inverse."""
    return {
        ACC if p == port else p[len(port) + 1 :]: t
        for p, t in inputs.items()
        if p == port or p.startswith(f"{port}:")
    }


def _reads(node: P.Node) -> tuple[str, ...] | None:
    """The input columns an aggregate reads (None: a reader of whole rows)."""
    if isinstance(node, P.Aggregate | P.WindowAggregate):
        more = (node.time,) if isinstance(node, P.WindowAggregate) else ()
        used = (*node.keys, *more, *(c for a in node.aggs for c in a.reads))
        return tuple(dict.fromkeys(used))
    return None


def _keys(node: P.Node, k: int) -> tuple[str, ...]:
    """The columns of a stateful node's input `k` that its rows are partitioned by."""
    if isinstance(node, P.Aggregate):
        return node.keys
    if isinstance(node, P.Join):
        return node.left_keys if k == 0 else node.right_keys
    if isinstance(node, P.TopN | P.RowsOver | P.Sessions):
        return node.partition
    if isinstance(node, P.Distinct):
        return tuple(node.input.schema.names)
    if isinstance(node, P.Upsert):
        return node.keys
    if isinstance(node, P.WindowAggregate):
        return ()  # its own watermark: see the module's docstring
    raise TypeError(f"no partitioning for {type(node).__name__}")


__all__ = [
    "DRIVER",
    "WATERMARKS",
    "Consumer",
    "Partitioning",
    "final_port",
    "output_port",
    "partial_port",
    "partials_at",
    "receives_partials",
    "table_port",
]
