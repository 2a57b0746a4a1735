"""One level of a partitioned dataflow's step on one shard (`partitioning.py` has the cut).

A `LevelStep` is what a shard's task computes: given the step's rows that reached the shard
(by port) and the watermarks as the step before left them, it evaluates the level's nodes
and returns its rows addressed to their consumers, `(level, shard) -> {port: rows}`.

Watermarks are global: every shard must forget and release with the same values. Level 0
admits its part of each input table with the watermarks of the step before (a row is late
or not by that alone) and sends a record of its newest event times and late rows to the
driver and to every shard of every later level (port `w`). A later level's shard takes all
the records into account and advances the watermarks exactly as the driver does: the same
values everywhere, whoever computes them.

A shard steps only the operators it has work for (`touched`): rows for them, or a
watermark that moved for one whose state it shrinks. The others' state stays as it was, so
the runtime need not even open it. Aggregates without GROUP BY bring their row over no
input at the pipeline's first step on the shard that owns them (the empty key's) only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from storage_engine.circuit.operator import empty_delta
from storage_engine.key_groups import key_groups, shard_of_groups, split_by_shard
from storage_engine.schema import WEIGHT

from . import plan as P
from .partitioning import (
    DRIVER,
    WATERMARKS,
    Consumer,
    Partitioning,
    final_port,
    output_port,
    partial_port,
    partials_at,
    receives_partials,
    table_port,
)

Routed = dict[tuple[int, int], dict[str, pa.Table | list[dict[str, Any]]]]


def empty_key_shard(shards: int, groups: int) -> int:
    """The shard that owns the empty key's group: every keyless operator's."""
    g = key_groups(pa.table({"x": [0]}), [], groups)
    return int(shard_of_groups(g, shards, groups)[0])


def concat(parts: Sequence[pa.Table]) -> pa.Table:
    """Parts of one port's rows, from several shards, as one table."""
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts, promote_options="permissive")


class LevelStep:
    """Level `level` of one step on shard `shard` of `shards` (`groups` key groups).

    `inputs`: the rows that reached this shard, by port (records under `w`);
    `watermarks`: `Watermarks.state()` after the step before; `first`: whether this is the
    pipeline's first step; `sources`: how many tasks level 0 had (each sent a record);
    `outputs`: the views whose rows the driver wants (default: all); `proctime_us`: the
    step's processing time (`Dataflow.step`)."""

    def __init__(
        self,
        part: Partitioning,
        level: int,
        shard: int,
        shards: int,
        groups: int,
        inputs: Mapping[str, Any],
        watermarks: Mapping[str, Any],
        first: bool,
        sources: int | None = None,
        outputs: Collection[str] | None = None,
        proctime_us: int | None = None,
    ) -> None:
        self.part, self.flow = part, part.flow
        self.flow.proctime_us = proctime_us
        self.outputs = None if outputs is None else frozenset(outputs)
        self.level, self.shard, self.shards, self.groups = level, shard, shards, groups
        self.inputs = {p: t for p, t in inputs.items() if p == WATERMARKS or t.num_rows}
        self.flow.watermarks.restore(watermarks)
        self.before = dict(self.flow.watermarks.watermark)
        self.first = first and shard == empty_key_shard(shards, groups)
        records: list[dict[str, Any]] = list(inputs.get(WATERMARKS, []))
        if level > 0:
            if sources is not None and len(records) != sources:
                # A missing record would advance this shard's watermarks short of the
                # others': better no step than a silently different one.
                raise ValueError(
                    f"level {level}, shard {shard}: {len(records)} watermark records, "
                    f"not one from each of the {sources} tasks of level 0"
                )
            for r in records:
                self.flow.watermarks.note(r.get("newest", {}))
            self.flow.watermarks.advance()
        self.moved = self.flow.watermarks.watermark != self.before
        ops = part.operators_at(level)
        fed = {self._op_of_port(p) for p in self.inputs}
        bounded = self.flow.bounded_operators() if self.moved else set()
        self.touched = [op for op in ops if op in fed or op in bounded]

    def _op_of_port(self, port: str) -> str | None:
        if port.startswith("s"):
            return self.part.operator[int(port[1:].split(".")[0])]
        if port.startswith("f:"):
            return self.flow.final_operator(port[2:])
        return None

    def run(self) -> Routed:
        """Evaluate the level (the runtime has opened the `touched` operators' state) and
        route its rows. The touched operators' state then holds the step."""
        part, flow, level = self.part, self.flow, self.level
        out: Routed = {}
        tables: dict[str, pa.Table] = {}
        if level == 0:
            late = dict(flow.watermarks.late_rows)
            given = {p[2:]: t for p, t in self.inputs.items() if p.startswith("t:")}
            tables = flow.admit(given)
            record = {
                "newest": flow.watermarks.observed(),
                "late": {t: n - late[t] for t, n in flow.watermarks.late_rows.items()},
            }
            for lv in range(1, part.levels):
                for s in range(self.shards):
                    out.setdefault((lv, s), {})[WATERMARKS] = [record]
            out.setdefault((DRIVER, self.shard), {})[WATERMARKS] = [record]
        flow.first = self.first
        values: dict[int, pa.Table] = {}
        for i in part.at(level):
            node = part.nodes[i]
            if isinstance(node, P.Scan):
                values[i] = flow.scan_value(node, tables)
            elif isinstance(node, P.ViewRef):
                values[i] = values[part.root[node.view]]
            elif receives_partials(node):
                assert isinstance(node, P.Aggregate)
                values[i] = flow.partials_value(node, partials_at(f"s{i}.0", self.inputs))
            else:
                values[i] = flow.node_value(node, self._node_inputs(i, node, values))
        flow.forget(set(self.touched))
        for name, lv in part.finals.items():
            op = flow.final_operator(name)
            if lv == level and op in self.touched:
                held = self.inputs.get(final_port(name))
                if held is not None:
                    flow.hold_final(name, held)
                released = flow.release_final(name)
                if self._wanted(name):
                    self._send(out, DRIVER, self.shard, output_port(name), released)
        for i, rows in values.items():
            if rows.num_rows == 0:
                continue
            for c in part.consumers[i]:
                if c.level == DRIVER and not self._wanted(c.port[2:]):
                    continue
                if c.keys is None:
                    self._send(out, c.level, self.shard % self.shards, c.port, rows)
                    continue
                if c.aggregate is not None:
                    self._send_partials(out, c, rows)
                    continue
                sent = rows if c.reads is None else narrowed(rows, c.reads)
                for s, piece in split_by_shard(sent, c.keys, self.shards, self.groups).items():
                    self._send(out, c.level, s, c.port, piece)
        return out

    def _send_partials(self, out: Routed, c: Consumer, rows: pa.Table) -> None:
        assert c.aggregate is not None
        node = self.part.nodes[c.aggregate]
        assert isinstance(node, P.Aggregate)
        assert c.keys is not None
        for name, t in self.flow.partial_value(node, rows).items():
            for s, piece in split_by_shard(t, c.keys, self.shards, self.groups).items():
                self._send(out, c.level, s, partial_port(c.port, name), piece)

    def _wanted(self, view: str) -> bool:
        return self.outputs is None or view in self.outputs

    def _node_inputs(self, i: int, node: P.Node, values: Mapping[int, pa.Table]) -> list[pa.Table]:
        part = self.part
        out = []
        for k, child in enumerate(part.inputs(node)):
            c = part.index[id(child)]
            if i in part.operator:
                got = self.inputs.get(f"s{i}.{k}")
                if got is not None and got.column_names != [*child.schema.names, WEIGHT]:
                    got = widened(got, child.schema)
            elif part.level[c] == self.level:
                got = values[c]
            else:
                got = self.inputs.get(f"v{c}")
            out.append(got if got is not None else empty_delta(child.schema))
        return out

    @staticmethod
    def _send(out: Routed, level: int, shard: int, port: str, rows: pa.Table) -> None:
        if rows.num_rows:
            out.setdefault((level, shard), {})[port] = rows


def narrowed(rows: pa.Table, columns: Sequence[str]) -> pa.Table:
    """Only `columns` of the rows (and their weights), equal rows' weights summed: what an
    aggregate's shard receives (it reads nothing else, and a Z-set is its consolidation)."""
    t = rows.select([*columns, WEIGHT])
    if not all(_groupable(f.type) for f in t.schema):
        return t
    summed = t.group_by(list(columns), use_threads=False).aggregate([(WEIGHT, "sum")])
    summed = summed.select([*columns, f"{WEIGHT}_sum"]).rename_columns([*columns, WEIGHT])
    return summed.filter(pc.not_equal(summed.column(WEIGHT), 0)).cast(t.schema)


def _groupable(t: pa.DataType) -> bool:
    return not (pa.types.is_nested(t) or pa.types.is_null(t) or pa.types.is_dictionary(t))


def widened(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """Narrowed rows (`narrowed`) with `schema`'s other columns back, as NULLs (the reader
    does not read them)."""
    n = rows.num_rows
    cols = [
        rows.column(f.name) if f.name in rows.column_names else pa.nulls(n, f.type) for f in schema
    ]
    return pa.table([*cols, rows.column(WEIGHT)], names=[*schema.names, WEIGHT])


def level_zero_inputs(
    deltas: Mapping[str, pa.Table], shards: int
) -> dict[int, dict[str, pa.Table]]:
    """The input tables' rows cut into `shards` slices, one per level-0 task (any cut
    will do: level 0 is linear)."""
    out: dict[int, dict[str, pa.Table]] = {s: {} for s in range(shards)}
    for name, t in deltas.items():
        size = -(-t.num_rows // shards)
        for s in range(shards):
            piece = t.slice(s * size, size)
            if piece.num_rows:
                out[s][table_port(name)] = piece
    return out


__all__ = ["LevelStep", "Routed", "concat", "empty_key_shard", "level_zero_inputs"]
