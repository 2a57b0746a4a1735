"""What Spark hands the circuit per micro-batch (`MicroBatch`), and its per-batch partial
aggregation before the circuit (`PreAggregation`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from storage_engine.circuit import PartialForm, Stepper

from .sources import (
    END,
    SOURCE,
)


def min_event_us(column: pa.ChunkedArray | pa.Array) -> int | None:
    """The oldest event time in a timestamp column, as UTC microseconds (None if no value)."""
    t = column.type
    assert isinstance(t, pa.TimestampType)
    us = pc.cast(column, pa.timestamp("us", tz=t.tz)).cast(pa.int64())
    v = pc.min(us).as_py()
    return None if v is None else int(v)


# Types whose equality and order Spark's GROUP BY / min / max share with Arrow's: Spark
# normalises floating-point grouping keys (-0.0 and 0.0 become one group, Arrow keeps two)
# and nested types are not comparable in Arrow, so those keep sending rows.
def _exact(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_decimal(t)
    )


def _orderable(t: pa.DataType) -> bool:
    return _exact(t) or pa.types.is_floating(t)


def pre_aggregation(
    circuit: Stepper, stream: pa.Schema, event_time: str | None, lines: bool
) -> PreAggregation | None:
    """Pre-aggregate in Spark when every operator reading `source` accepts it (joins read
    their own inputs) and its columns have types on which Spark and Arrow agree; a stream
    column named `__weight` would make the circuit read weights, so the input would not be
    insert-only. Otherwise every such operator gets the rows, as before."""
    readers = [op for op in circuit.operators if SOURCE in op.inputs]
    names = stream.names
    if not readers or "__weight" in names or len(set(names)) != len(names):
        return None
    forms: dict[str, PartialForm] = {}
    for op in readers:
        form = op.partial_form()
        if form is None:
            return None
        if not all(_exact(stream.field(k).type) for k in form.keys):
            return None
        if not all(_orderable(stream.field(c).type) for c in form.ordered):
            return None
        if form.bucket is not None:
            t = stream.field(form.bucket[0]).type
            # Spark's unix_micros reads instants; a timestamp without zone would depend on
            # the session's zone.
            if not (isinstance(t, pa.TimestampType) and t.tz is not None):
                return None
        forms[op.id] = form
    return PreAggregation(forms, stream, event_time, lines)


# A step's Spark results as Arrow: the rows job's and the pre-aggregation's (None: not run).
JobTables = tuple[pa.Table | None, pa.Table | None]


@dataclass
class MicroBatch:
    """One micro-batch as the circuit gets it, with what the step's metrics need."""

    end: int | None  # the batch's end offset (None: an empty batch)
    rows_in: int  # rows fed to the circuit: parsed, passed the filter (and a side's)
    oldest: int | None  # their oldest event time (UTC microseconds), if known
    partials: dict[str, pa.Table]  # operator id -> its pre-aggregated delta
    bad: pa.Table | None  # dead letters: __file, __lineno, __line
    tables: dict[str, pa.Table] = field(default_factory=dict)  # circuit input -> rows


class PreAggregation:
    """Per-batch partial aggregation in Spark before the circuit.

    Source rows are insert-only (weight +1; no `__weight` column), so an operator reading
    `source` may get, instead of the rows, their per-group accumulators (its `PartialForm`):
    row count, non-null counts, sums, and for min/max only the batch's smallest and largest
    value per group — no later insert can make a value in between an extreme, and nothing is
    ever retracted (storage_engine/circuit/aggregate.py). Window aggregates are grouped by
    event-time slide bucket, a distinct by its columns.

    One Spark aggregation serves every such operator, the batch's dead letters, its end
    offset, `rows_in` and the oldest event time: one grouping set per distinct key list
    (`grouping_id()` tells them apart); the first set is also keyed by each bad row's file,
    line number and line, so bad rows come back one per group, with zero counts. Rows that
    are bad or filtered out are kept (every row carries `__end`) but with null keys and
    values, so they collapse into one group per set and count nowhere; groups with a zero
    count are dropped before the circuit.
    """

    def __init__(
        self,
        forms: Mapping[str, PartialForm],
        stream: pa.Schema,
        event_time: str | None,
        lines: bool,
    ) -> None:
        self.forms = dict(forms)
        self.keeps_extremes = any(f.ordered for f in self.forms.values())
        self.stream = stream
        self.event_time = event_time
        self.lines = lines
        idx = {n: i for i, n in enumerate(stream.names)}
        self._idx = idx
        sets: list[tuple[str, ...]] = []
        self._set_of: dict[str, int] = {}
        for op_id, f in self.forms.items():
            s = tuple(f"__k{idx[k]}" for k in f.keys)
            if f.bucket is not None:
                s += (self._bucket(f.bucket),)
            if s not in sets:
                sets.append(s)
            self._set_of[op_id] = sets.index(s)
        if lines:
            sets[0] += ("__bf", "__bl", "__bx")
        self.sets = sets
        self.keys = list(dict.fromkeys(k for s in sets for k in s))
        n = len(self.keys)
        # grouping_id(): bit n-1-i is set when key i is not in the row's grouping set.
        self._gids = [
            sum(1 << (n - 1 - i) for i, k in enumerate(self.keys) if k not in s) for s in sets
        ]
        self._columns: tuple[list[Column], list[Column]] | None = None

    def _bucket(self, bucket: tuple[str, int]) -> str:
        return f"__b{self._idx[bucket[0]]}_{bucket[1]}"

    def _spark_columns(self) -> tuple[list[Column], list[Column]]:
        """What the aggregation selects from the flagged batch, and its aggregates (built
        once: unresolved columns are reusable, and each costs a JVM call to make)."""
        if self._columns is not None:
            return self._columns
        g = F.col("__g")
        c = [F.col(f"`__c{i}`") for i in range(len(self.stream))]
        sel: dict[str, Column] = {}
        aggs: dict[str, Column] = {
            "__end": F.max(END),
            "__count": F.count_if(g),
        }
        for f in self.forms.values():
            for k in f.keys:
                i = self._idx[k]
                sel[f"__k{i}"] = F.when(g, c[i])
            if f.bucket is not None:
                i = self._idx[f.bucket[0]]
                us = F.unix_micros(c[i])
                sel[self._bucket(f.bucket)] = F.when(g, us - F.pmod(us, F.lit(f.bucket[1])))
                sel[f"__u{i}"] = F.when(g, us)
                aggs[f"__t{i}"] = F.max(f"__u{i}")
            for name in (*f.counted, *f.summed, *f.ordered):
                i = self._idx[name]
                sel[f"__v{i}"] = F.when(g, c[i])
            for name in f.counted:
                i = self._idx[name]
                aggs[f"__n{i}"] = F.count(f"__v{i}")
            for name in f.summed:
                i = self._idx[name]
                t = self.stream.field(name).type
                v = F.col(f"__v{i}")
                if not pa.types.is_decimal(t):  # Spark widens decimals' precision itself
                    v = v.cast("double" if pa.types.is_floating(t) else "bigint")
                aggs[f"__s{i}"] = F.sum(v)
            for name in f.ordered:
                i = self._idx[name]
                t = self.stream.field(name).type
                v = F.col(f"__v{i}")
                if pa.types.is_floating(t):
                    # Spark orders NaN above everything, Arrow's min/max skip it unless a
                    # group has nothing else: send the extremes without NaN, and whether
                    # there was one.
                    aggs[f"__nan{i}"] = F.bool_or(F.isnan(v))
                    v = F.nanvl(v, F.lit(None).cast("float" if t == pa.float32() else "double"))
                aggs[f"__min{i}"] = F.min(v)
                aggs[f"__max{i}"] = F.max(v)
        if self.event_time is not None:
            sel["__et"] = F.when(g, c[self._idx[self.event_time]])
            aggs["__oldest"] = F.min("__et")
        if self.lines:
            bad = F.col("__isbad")
            sel["__bf"] = F.when(bad, F.col("__file"))
            sel["__bl"] = F.when(bad, F.col("__lineno"))
            sel["__bx"] = F.when(bad, F.col("__line"))
            aggs["__nbad"] = F.count_if(bad)
        if len(self.sets) > 1:
            aggs["__gid"] = F.grouping_id()
        select = [g, F.col("__isbad"), F.col(END), *(e.alias(n) for n, e in sel.items())]
        self._columns = (select, [e.alias(n) for n, e in aggs.items()])
        return self._columns

    def dataframe(self, flagged: DataFrame) -> DataFrame:
        """The aggregation over a batch with the stream's columns as `__c<i>`, `__keep`
        (passed the filter), `__bad`, `__file`, `__lineno`, `__line` and the end offset."""
        select, aggs = self._spark_columns()
        x = flagged.select(
            "*",
            (~F.coalesce(F.col("__bad"), F.lit(False)) & F.col("__keep")).alias("__g"),
            F.coalesce(F.col("__bad"), F.lit(False)).alias("__isbad"),
        ).select(*select)
        if not self.keys:
            return x.agg(*aggs)
        if len(self.sets) == 1:
            return x.groupBy(*self.keys).agg(*aggs)
        return x.groupingSets([list(s) for s in self.sets], *self.keys).agg(*aggs)

    def split(self, tab: pa.Table) -> MicroBatch:
        """Spark's result as every operator's partial delta, dead letters and metrics."""
        ends = tab.column("__end") if tab.num_rows else pa.array([], pa.int64())
        end = pc.max(ends).as_py()
        if end is None:
            return MicroBatch(None, 0, None, {}, _no_dead_letters())
        oldest = None
        if self.event_time is not None:
            oldest = min_event_us(tab.column("__oldest"))
        by_set = [
            tab if len(self.sets) == 1 else tab.filter(pc.equal(tab.column("__gid"), gid))
            for gid in self._gids
        ]
        rows_in = int(pc.sum(by_set[0].column("__count")).as_py() or 0)
        partials = {}
        for op_id, f in self.forms.items():
            t = by_set[self._set_of[op_id]]
            t = t.filter(pc.greater(t.column("__count"), 0))
            partials[op_id] = self._partial(t, f)
        bad = _no_dead_letters()
        if self.lines:
            b = by_set[0].filter(pc.greater(by_set[0].column("__nbad"), 0))
            n = b.column("__nbad").to_numpy(zero_copy_only=False)
            b = b.take(pa.array(np.repeat(np.arange(b.num_rows), n), pa.int64()))
            b = b.select(["__bf", "__bl", "__bx"]).rename_columns(bad.column_names)
            bad = b.cast(bad.schema).sort_by([("__file", "ascending"), ("__lineno", "ascending")])
        return MicroBatch(int(end), rows_in, oldest, partials, bad)

    def _partial(self, t: pa.Table, f: PartialForm) -> pa.Table:
        cols: dict[str, str] = {f"__k{self._idx[k]}": k for k in f.keys}
        if f.bucket is not None:
            cols[self._bucket(f.bucket)] = "__bucket"
            cols[f"__t{self._idx[f.bucket[0]]}"] = "__tmax"
        cols["__count"] = "__count"
        for prefix, names in (("n", f.counted), ("s", f.summed)):
            cols.update({f"__{prefix}{self._idx[c]}": f"__{prefix}_{c}" for c in names})
        for c in f.ordered:
            i = self._idx[c]
            cols.update({f"__min{i}": f"__min_{c}", f"__max{i}": f"__max_{c}"})
            if f"__nan_{c}" in f.schema.names:
                cols[f"__nan{i}"] = f"__nan_{c}"
        out = t.select(list(cols)).rename_columns(list(cols.values()))
        return out.select(f.schema.names).cast(f.schema)


def _no_dead_letters() -> pa.Table:
    return pa.schema(
        [("__file", pa.string()), ("__lineno", pa.int64()), ("__line", pa.string())]
    ).empty_table()
