"""The input log: offsets, reads across segments, concurrent appenders in separate
processes, truncation, schema mismatches and damaged segments."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from storage_engine import CorruptionError, StorageError
from storage_engine.input_log import InputLog

SCHEMA = pa.schema([("k", pa.int64()), ("s", pa.string())])
ROOT = Path(__file__).resolve().parents[2]


def recs(lo: int, hi: int) -> pa.Table:
    return pa.table({"k": list(range(lo, hi)), "s": [f"r{i}" for i in range(lo, hi)]})


def keys(log: InputLog, a: int, b: int) -> list[int]:
    return [k for rb in log.read(a, b) for k in rb.column("k").to_pylist()]


def test_offsets_and_reads(tmp_path: Path) -> None:
    log = InputLog(str(tmp_path), SCHEMA)
    assert log.end() == 0
    assert log.append(recs(0, 5)) == (0, 5)
    assert log.append(recs(5, 12)) == (5, 12)
    assert log.append(recs(0, 0)) == (12, 12)
    assert keys(log, 0, 12) == list(range(12))
    assert keys(log, 3, 8) == [3, 4, 5, 6, 7]  # across segments
    assert keys(log, 12, 20) == []
    # Another handle (another process) sees the same log.
    assert InputLog(str(tmp_path), SCHEMA).end() == 12


def test_truncation_keeps_offsets(tmp_path: Path) -> None:
    log = InputLog(str(tmp_path), SCHEMA)
    for i in range(4):
        log.append(recs(i * 10, i * 10 + 10))
    assert log.truncate_below(25) == 2  # [0,10) and [10,20) end at or below 25
    assert log.start() == 20 and log.end() == 40
    assert keys(log, 20, 30) == list(range(20, 30))
    with pytest.raises(StorageError, match="truncated"):
        list(log.read(5, 30))
    log.truncate_below(10**9)  # the newest segment stays: it carries the end offset
    assert log.end() == 40 and log.append(recs(40, 41)) == (40, 41)


def test_schema_mismatch_is_refused(tmp_path: Path) -> None:
    log = InputLog(str(tmp_path), SCHEMA)
    with pytest.raises(StorageError, match="schema"):
        log.append(pa.table({"k": ["not a number"], "s": ["x"]}))
    with pytest.raises(StorageError, match="schema"):
        log.append(pa.table({"other": [1]}))
    assert log.end() == 0


def test_segments_written_under_another_schema_read_in_the_readers(tmp_path: Path) -> None:
    # Segments written before a spec reordered or added fields read in the reader's order
    # (readers address columns by position), a missing field as nulls; values that do not
    # cast to the reader's type are an error naming the segment, not garbage.
    InputLog(str(tmp_path), SCHEMA).append(recs(0, 3))
    swapped = InputLog(str(tmp_path), pa.schema([("s", pa.string()), ("k", pa.int64())]))
    (batch,) = swapped.read(0, 3)
    assert batch.schema.names == ["s", "k"] and batch.column("k").to_pylist() == [0, 1, 2]
    wider = InputLog(str(tmp_path), pa.schema([("extra", pa.int64()), *SCHEMA]))
    (batch,) = wider.read(1, 3)
    assert batch.to_pydict() == {"extra": [None, None], "k": [1, 2], "s": ["r1", "r2"]}
    retyped = InputLog(str(tmp_path), pa.schema([("k", pa.int64()), ("s", pa.int32())]))
    (seg,) = retyped.segments()
    with pytest.raises(StorageError, match=f"{seg.name}.*s string.*s int32"):
        list(retyped.read(0, 3))


def test_a_damaged_segment_is_named(tmp_path: Path) -> None:
    log = InputLog(str(tmp_path), SCHEMA)
    log.append(recs(0, 100))
    (seg,) = log.segments()
    p = tmp_path / seg.name
    data = bytearray(p.read_bytes())
    p.write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(CorruptionError, match=seg.name):
        list(log.read(0, 100))


def test_concurrent_appenders_in_two_processes(tmp_path: Path) -> None:
    code = (
        "import sys, pyarrow as pa\n"
        "from storage_engine.input_log import InputLog\n"
        "log = InputLog(sys.argv[1], pa.schema([('k', pa.int64()), ('s', pa.string())]))\n"
        "base = int(sys.argv[2])\n"
        "for i in range(30):\n"
        "    log.append(pa.table({'k': [base + i] * 3, 's': ['x'] * 3}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(b)], env=env)
        for b in (0, 1000)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0
    log = InputLog(str(tmp_path), SCHEMA)
    assert log.end() == 2 * 30 * 3
    segs = log.segments()
    assert [s.first for s in segs] == list(range(0, 180, 3))  # no gap, no overlap
    got = keys(log, 0, log.end())
    assert sorted(set(got)) == sorted([*range(30), *range(1000, 1030)])
