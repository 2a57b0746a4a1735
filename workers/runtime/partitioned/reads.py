"""Level 0's tasks read the step's input themselves (issue 50): the driver plans each
table's step as splits (`connectors.source.spread` shares them among level 0's tasks) and
ships their descriptions, never the rows. A task reads its splits with the table's
`SplitReader`, shapes them as the driver would (`ArrowShape`) and steps level 0 on them;
its figures (rows, oldest event time) travel back in its result and its records that did
not parse as messages to the driver (`bad_port`).

A split that only Spark's reader reads exactly (a file with a malformed record) fails the
task with `SparkMustRead`; the run then reads that step in the driver, as at parallelism 1.
Nothing of the failed attempt is kept: level 0 holds no state, and later levels never ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..connectors.source import Split, SplitReader
from ..micro_batch import ArrowShape, MicroBatch

BAD = "\x00bad:"  # a port prefix: a table's records that did not parse, for the driver
# A port prefix: an upserted table's deletes of keys without a row, for the driver.
UNMATCHED = "\x00unmatched:"
SPARK_MUST_READ = "only Spark's reader reads"  # in the error's text, wherever it is raised


class SparkMustRead(RuntimeError):
    """A split the source's reader cannot read exactly as Spark would."""


def bad_port(table: str) -> str:
    return BAD + table


def unmatched_port(table: str) -> str:
    return UNMATCHED + table


def unmatched(messages: Mapping[str, Any]) -> dict[str, pa.Table]:
    """Per upserted table, the deletes of keys without a row the shards sent the driver."""
    return {p[len(UNMATCHED) :]: t for p, t in messages.items() if p.startswith(UNMATCHED)}


@dataclass(frozen=True)
class TableInput:
    """How level-0 tasks read one input table: `reader` reads its splits, `shape` makes
    them the dataflow's input `name`."""

    name: str
    reader: SplitReader
    shape: ArrowShape


@dataclass(frozen=True)
class TableReads:
    """One step's reads of one table: level 0's task s reads `per_task[s]`."""

    input: TableInput
    per_task: list[list[Split]]


def read_task(
    reads: Mapping[str, TableReads], task: int
) -> tuple[dict[str, pa.Table], dict[str, dict[str, Any]], dict[str, pa.Table]]:
    """Task `task`'s part of the step's input: the rows by dataflow input, each table's
    figures (`rows`, `oldest`) and its records that did not parse."""
    rows: dict[str, pa.Table] = {}
    figures: dict[str, dict[str, Any]] = {}
    bad: dict[str, pa.Table] = {}
    for table, r in sorted(reads.items()):
        splits = r.per_task[task] if task < len(r.per_task) else []
        if not splits:
            continue
        got = r.input.reader.read(splits)
        if got is None:
            raise SparkMustRead(f"table {table!r}: {SPARK_MUST_READ} a split of this step")
        batch = r.input.shape.batch(*got, r.input.name)
        rows.update(batch.tables)
        figures[table] = {"rows": batch.rows_in, "oldest": batch.oldest}
        if batch.bad is not None and batch.bad.num_rows:
            bad[table] = batch.bad
    return rows, figures, bad


def gathered(
    tables: Mapping[str, TableReads],
    figures: list[Mapping[str, Mapping[str, Any]]],
    messages: Mapping[str, Any],
) -> dict[str, MicroBatch]:
    """Each table's step as the driver accounts for it (rows, oldest event time, bad
    records), from every level-0 task's figures and the messages sent to the driver."""
    out = {}
    for table in tables:
        mine = [f[table] for f in figures if table in f]
        times = [int(f["oldest"]) for f in mine if f.get("oldest") is not None]
        out[table] = MicroBatch(
            None,
            sum(int(f["rows"]) for f in mine),
            min(times) if times else None,
            messages.get(bad_port(table)),
        )
    return out


def is_spark_must_read(error: BaseException) -> bool:
    """Whether a step failed because a split must be read by Spark (`SparkMustRead`,
    raised here or in an executor, whose error reaches the driver as text)."""
    return SPARK_MUST_READ in str(error)


__all__ = [
    "BAD",
    "SPARK_MUST_READ",
    "SparkMustRead",
    "TableInput",
    "TableReads",
    "bad_port",
    "gathered",
    "is_spark_must_read",
    "read_task",
    "unmatched",
    "unmatched_port",
]
