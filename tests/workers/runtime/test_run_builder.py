"""A run's opening is `run_builder.open_runner`'s, without Spark here: the `Runner`'s
constructor only keeps what it is given (no file, thread or Spark session), the builder
closes what it opened when a later step of the opening fails, and nothing else makes a
runner. The runner on real Spark: test_runner.py and the other runtime tests."""

from __future__ import annotations

import ast
import builtins
import io
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import yaml
from pyspark.sql import SparkSession

from pipeline_spec.model import parse_spec
from workers.runtime import run_builder
from workers.runtime.runner import Runner, TableReader
from workers.runtime.session import Timeline
from workers.runtime.sources import SOURCE

ROOT = Path(__file__).resolve().parents[3]
SPEC = parse_spec(yaml.safe_load((ROOT / "docs" / "examples" / "clicks-per-user.yaml").read_text()))
TABLE = SPEC.source.table


class _Untouchable:
    """A collaborator the constructor may only keep: using it in any way fails the test."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _used(self, how: str) -> AssertionError:
        return AssertionError(f"Runner() used {self._name} ({how})")

    def __getattr__(self, attr: str) -> Any:
        raise self._used(f".{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._used("called it")

    def __bool__(self) -> bool:
        raise self._used("its truth")

    def __iter__(self) -> Iterator[Any]:
        raise self._used("iterated over it")

    def __len__(self) -> int:
        raise self._used("its length")

    def __getitem__(self, key: Any) -> Any:
        raise self._used(f"[{key!r}]")

    def __contains__(self, item: Any) -> bool:
        raise self._used(f"{item!r} in it")


@contextmanager
def _no_io(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Opening, listing, statting or changing a file, starting a thread or a Spark session
    fails while this is entered."""

    def refuse(what: str) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"Runner() called {what}")

        return refused

    calls: list[tuple[Any, str]] = [
        (builtins, "open"),
        (io, "open"),
        *((os, n) for n in ("open", "stat", "lstat", "listdir", "scandir", "mkdir", "makedirs")),
        *((os, n) for n in ("remove", "unlink", "replace", "rename", "fsync")),
        (threading.Thread, "start"),
        (SparkSession.Builder, "getOrCreate"),
    ]
    with monkeypatch.context() as m:
        for owner, name in calls:
            m.setattr(owner, name, refuse(f"{getattr(owner, '__name__', owner)}.{name}"))
        yield


def test_the_runner_only_keeps_what_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = {
        n: cast(Any, _Untouchable(n))
        for n in (
            "spark", "plan", "loc", "sinks", "written", "metrics", "durability", "step_lock",
            "checkpoints", "dead_letters", "offset_log", "ahead",
        )
    }  # fmt: skip
    step_input, jobs = cast(Any, _Untouchable("input")), cast(Any, _Untouchable("jobs"))
    readers = {TABLE: TableReader(SOURCE, step_input, jobs)}
    timeline = Timeline()
    replay = [{TABLE: 12}]
    with _no_io(monkeypatch):
        with pytest.raises(AssertionError, match=r"called io\.open"):
            (tmp_path / "probe").write_text("")  # the guard guards
        r = Runner(
            SPEC,
            str(tmp_path / "state"),
            timeline=timeline,
            skipped=[],
            step=7,
            offsets={TABLE: 10},
            readers=readers,
            replay=replay,
            first_in_driver=False,
            **parts,
        )
    assert not (tmp_path / "state").exists()
    assert timeline.marks[1:] == []
    assert (r.step, r.first_step, r.offsets, r.offset) == (7, 7, {TABLE: 10}, 10)
    assert r.input is step_input and r.jobs is jobs
    for name, part in parts.items():
        assert getattr(r, {"ahead": "_ahead"}.get(name, name)) is part
    assert r.exit_code is None and r.error is None and not r.paused


class _Location:
    """The storage location as the builder sees it, fresh (no checkpoint restored)."""

    restored = None
    step = 0
    metadata: dict[str, Any] = {}
    remote = None
    read_only = True  # a standalone runner's close waits for no commit

    def __init__(self, closed: list[str]) -> None:
        self._closed = closed

    def close(self) -> None:
        self._closed.append("location")


@pytest.fixture
def opening(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], set[str]]:
    """The builder over fakes of Spark's part (the plan), the location, the sinks and the
    table's input: what each closes, in order, and where the opening is made to fail
    (`fail`: "sinks", "rollback", "table", "first offset", "sink close")."""
    closed: list[str] = []
    fail: set[str] = set()

    def failing(where: str) -> None:
        if where in fail:
            raise RuntimeError(f"{where} failed")

    class Sink:
        rolls_back = True

        def rollback(self, step: int) -> None:
            failing("rollback")

        def close(self) -> None:
            closed.append("sink out")
            failing("sink close")

    class Input:
        def __init__(self, *args: Any) -> None:
            failing("table")
            self.connector = SimpleNamespace(input_log=None, on_durable=None, release_below=None)

        def first_offset(self, restored: int) -> int:
            failing("first offset")
            return restored

        def close(self) -> None:
            closed.append(f"table {TABLE}")

    def sinks(*args: Any) -> dict[str, Sink]:
        failing("sinks")
        return {"out": Sink()}

    planned = SimpleNamespace(dataflow=object(), tables={})
    monkeypatch.setattr(run_builder, "plan", lambda spark, spec: planned)
    monkeypatch.setattr(run_builder, "open_circuit_state", lambda *a, **k: (_Location(closed), []))
    monkeypatch.setattr(run_builder, "open_sinks", sinks)
    monkeypatch.setattr(run_builder, "StepInput", Input)
    # Rows the driver reads: no batch read ahead.
    jobs = SimpleNamespace(skips_spark=lambda: True)
    monkeypatch.setattr(run_builder, "BatchJobs", lambda *a: jobs)
    return closed, fail


def _open(tmp_path: Path) -> Runner:
    return run_builder.open_runner(
        SPEC, str(tmp_path / "state"), spark=cast(Any, object()), base_dir=str(tmp_path)
    )


@pytest.mark.parametrize(
    ("fail", "closed"),
    [
        ("sinks", ["location"]),
        ("rollback", ["sink out", "location"]),
        ("table", ["sink out", "location"]),
        ("first offset", [f"table {TABLE}", "sink out", "location"]),
    ],
)
def test_a_failed_opening_closes_what_it_opened(
    tmp_path: Path, opening: tuple[list[str], set[str]], fail: str, closed: list[str]
) -> None:
    opening[1].add(fail)
    with pytest.raises(RuntimeError, match=f"^{fail} failed$"):
        _open(tmp_path)
    assert opening[0] == closed


def test_a_close_that_fails_too_does_not_hide_why_the_opening_failed(
    tmp_path: Path, opening: tuple[list[str], set[str]]
) -> None:
    opening[1].update({"first offset", "sink close"})
    with pytest.raises(RuntimeError, match=r"^first offset failed$"):
        _open(tmp_path)
    assert opening[0] == [f"table {TABLE}", "sink out", "location"]


def test_an_opened_run_is_the_runners_to_close(
    tmp_path: Path, opening: tuple[list[str], set[str]]
) -> None:
    r = _open(tmp_path)
    assert opening[0] == []
    assert [n for n, _ in r.timeline.marks] == [
        "start", "spark_session", "plan", "storage_restore", "sinks_rollback",
    ]  # fmt: skip
    assert r.step == 0 and r.offsets == {TABLE: 0} and r._ahead is None
    r.close()
    assert opening[0] == ["sink out", f"table {TABLE}", "location"]


def test_only_the_builder_makes_a_runner() -> None:
    """One way to make a runner: `open_runner` (besides this module's own test of the
    constructor)."""
    makers = []
    for package in ("workers", "bench", "tests", "e2e", "scripts", "backend", "spindle_cli"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path in (ROOT / "workers" / "runtime" / "run_builder.py", Path(__file__)):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and (
                    (isinstance(node.func, ast.Name) and node.func.id == "Runner")
                    or (isinstance(node.func, ast.Attribute) and node.func.attr == "Runner")
                ):
                    makers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert makers == []
