"""An input table's offset: a count (datagen rows, files, log records), or a Kafka table's
next offset per partition, `{"<topic>:<partition>": offset}` (a partition not there yet
starts at its earliest record)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Offset = int | dict[str, int]


def advanced(start: Offset, end: Offset) -> bool:
    """Whether `end` lies beyond `start` (a step between them reads something)."""
    if isinstance(start, int) and isinstance(end, int):
        return end > start
    a = start if isinstance(start, dict) else {}
    b = end if isinstance(end, dict) else {}
    return any(v > a.get(p, 0) for p, v in b.items())


def total(offset: Offset) -> int:
    """One number that grows with the offset, for metrics and logs (a Kafka table's: the sum
    of its partitions' offsets)."""
    return offset if isinstance(offset, int) else sum(offset.values())


def parse(value: object) -> Offset:
    """An offset as stored in JSON (the offset log, Spark's offset log); TypeError or
    ValueError if it is none."""
    if isinstance(value, dict):
        return {str(p): int(v) for p, v in value.items()}
    if isinstance(value, int | str | float):
        return int(value)
    raise TypeError(f"not an offset: {value!r}")


def count(offset: Offset) -> int:
    """`offset` as a count; a count is what every source but Kafka's has."""
    if not isinstance(offset, int):
        raise TypeError(f"a count offset was expected, not {offset!r}")
    return offset


# A checkpoint's metadata holds every input table's offset, `{table: offset}`, under this.
OFFSETS = "source_offsets"
# Checkpoints of one-source releases hold only the first table's (a count), under this:
# read (`written_offsets`), never written.
ONE_SOURCE = "source_offset"


def written_offsets(
    metadata: Mapping[str, Any], first_table: Callable[[], str | None]
) -> dict[str, Any] | None:
    """Every input table's offset as a checkpoint's metadata holds it, unchecked: `OFFSETS`,
    or, in a checkpoint of a one-source release, `ONE_SOURCE` as the first table's
    (`first_table`: its name, asked only then; None: unknown); None if it holds neither.
    The one place that reads a checkpoint's offsets in either form."""
    per_table = metadata.get(OFFSETS)
    if isinstance(per_table, dict):
        return per_table
    if ONE_SOURCE in metadata and (first := first_table()) is not None:
        return {first: metadata[ONE_SOURCE]}
    return None


def checkpoint_offsets(
    metadata: Mapping[str, Any], tables: list[tuple[str, bool]]
) -> dict[str, Offset]:
    """Each input table's offset in a checkpoint's metadata (`tables`: each one's name,
    and whether its offset is per partition, a Kafka table's; `written_offsets`); a table
    it does not hold starts at the beginning."""
    per_table = written_offsets(metadata, lambda: tables[0][0]) or {}
    return {t: _offset(per_table.get(t), per_partition) for t, per_partition in tables}


def first_total(per_table: Mapping[str, Any] | None) -> int | None:
    """The first input table's offset as one number (`total`), what one-source releases
    showed as a checkpoint's offset: a checkpoint's `{table: offset}` lists the tables in
    the spec's order. None without offsets, or with a malformed first one."""
    first = next(iter(per_table.values()), None) if per_table else None
    if isinstance(first, dict) and all(_is_int(v) for v in first.values()):
        return total(first)
    return first if isinstance(first, int) and not isinstance(first, bool) else None


def _offset(value: Any, per_partition: bool) -> Offset:
    if per_partition:
        if not isinstance(value, dict):
            return {}
        return {str(k): v for k, v in value.items() if _is_int(v)}
    return value if _is_int(value) else 0


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


__all__ = [
    "OFFSETS",
    "ONE_SOURCE",
    "Offset",
    "advanced",
    "checkpoint_offsets",
    "count",
    "first_total",
    "parse",
    "total",
    "written_offsets",
]
