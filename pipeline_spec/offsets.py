"""An input table's offset: a count (datagen rows, files, log records), or a Kafka table's
next offset per partition, `{"<topic>:<partition>": offset}` (a partition not there yet
starts at its earliest record)."""

from __future__ import annotations

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


__all__ = ["Offset", "advanced", "count", "parse", "total"]
