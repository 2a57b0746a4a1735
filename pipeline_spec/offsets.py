"""An input table's offset: a count (datagen rows, files, log records), or a Kafka table's
next offset per partition, `{"<topic>:<partition>": offset}` (a partition not there yet
starts at its earliest record)."""

from __future__ import annotations

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


def checkpoint_offsets(
    metadata: dict[str, Any], tables: list[tuple[str, bool]]
) -> dict[str, Offset]:
    """Each input table's offset in a checkpoint's metadata (`tables`: each one's name,
    and whether its offset is per partition, a Kafka table's): `source_offsets`, or, in a
    checkpoint of a one-source release, `source_offset`, the first table's."""
    per_table = metadata.get("source_offsets")
    if not isinstance(per_table, dict):
        per_table = {tables[0][0]: metadata.get("source_offset", 0)}
    return {t: _offset(per_table.get(t), per_partition) for t, per_partition in tables}


def _offset(value: Any, per_partition: bool) -> Offset:
    if per_partition:
        if not isinstance(value, dict):
            return {}
        return {str(k): v for k, v in value.items() if _is_int(v)}
    return value if _is_int(value) else 0


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


__all__ = ["Offset", "advanced", "checkpoint_offsets", "count", "parse", "total"]
