"""What a spare driver saves, per source kind.

    python -m bench.spare [--quick] [--json] [--dir DIR] [--kinds K,K]

A worker's spare driver (`python -m workers.jobs.driver spare`) starts Spark and warms up on one
built-in pipeline (JSON-lines files, a group and a window aggregate) before any run needs
it; a run handed to it skips Spark's start-up, and its first step finds warm only the code
paths that warm-up took. Per source kind, this times a new run from its start to its first
completed step (the `total_ms` of its `started` record in metrics.jsonl) two ways:

- `cold`: a new `run` process (its imports, Spark's start-up, the first step);
- `spare`: a ready spare told to take the run over (from the takeover line).

`spare_saving_ms` = cold - spare. Medians of `repeats` runs; the two ways run in turn within
a repeat (the machine's speed drifts).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq
import yaml

from workers.runtime.warm_up import NEXMARK_JOIN

from . import pipeline
from .report import Log, clean, engine_revision, log_to_stderr, machine_info, median, quiet

ROOT = Path(__file__).resolve().parents[1]
WAYS = ("cold", "spare")


@dataclass(frozen=True)
class Profile:
    name: str
    repeats: int
    input: pipeline.Profile  # the files' sizes (as bench.pipeline's)


PROFILES = {
    "full": Profile("full", 3, pipeline.Profile("full", 8, 20_000, 100_000)),
    "quick": Profile("quick", 1, pipeline.Profile("quick", 4, 10_000, 20_000)),
    "smoke": Profile("smoke", 1, pipeline.Profile("smoke", 3, 500, 100)),
}

NOTES = [
    "Each run starts from no checkpoint on a fresh storage location, without sinks, and stops "
    "after 2 steps; its time is the `total_ms` of its `started` record: from the process's "
    "start (cold) or from the takeover line (spare) to the end of its first step.",
    "files-json, files-csv, files-parquet: bench.pipeline's input (customer, amount), one file "
    "a step, as JSON lines, CSV (a header line first) or Parquet; count and sum per customer.",
    "log: the same rows appended to the pipeline's input log first (the ingest API's path).",
    "datagen-aggregate: the clicks generator, count/sum/max per user (docs/examples/"
    "clicks-per-user.yaml, without its filter); datagen-join: the Nexmark generator, "
    "auctions joined with their sellers (docs/examples/nexmark-q3.yaml).",
    "The spare warms up on its built-in workloads (workers/runtime/spare.py: warm_up_spare: a "
    "files pipeline over JSON lines, CSV and Parquet, then a Nexmark join), whatever the run it "
    "takes over.",
    "The machine is shared and noisy: compare the ways within one run, not across runs.",
]

_COMMON = {"checkpoint": {"every_steps": 1}, "retention": {"keep_last": 3}}
EXAMPLES = ROOT / "docs" / "examples"


def _files_spec(work: Path, d: Path, fmt: str) -> dict[str, Any]:
    """bench.pipeline's query over the files of `d` in format `fmt`."""
    doc: dict[str, Any] = yaml.safe_load(pipeline.spindle_spec(work).read_text())
    doc["source"].update(path=str(d), format=fmt)
    return doc


def _datagen_aggregate() -> dict[str, Any]:
    """docs/examples/clicks-per-user.yaml without its filter (and, as every kind, its sink)."""
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / "clicks-per-user.yaml").read_text())
    doc.pop("transform")
    return {**doc, "trigger": {"interval": "200ms"}}


def _datagen_join() -> dict[str, Any]:
    return {**NEXMARK_JOIN, "trigger": {"interval": "200ms"}}


@dataclass(frozen=True)
class Inputs:
    """The input files of every format, in `work`."""

    json: Path
    csv: Path
    parquet: Path

    @classmethod
    def write(cls, work: Path, prof: pipeline.Profile) -> Inputs:
        src = work / "in"  # bench.pipeline's input: log_spec reads it from there
        pipeline.write_input(src, prof)
        csv, parquet = work / "in-csv", work / "in-parquet"
        csv.mkdir()
        parquet.mkdir()
        schema = pa.schema([("customer", pa.string()), ("amount", pa.int64())])
        options = pa_json.ParseOptions(explicit_schema=schema)
        for f in sorted(src.iterdir()):
            table = pa_json.read_json(f, parse_options=options)
            pa_csv.write_csv(
                table,
                csv / f"{f.stem}.csv",
                pa_csv.WriteOptions(quoting_style="none"),
            )
            pq.write_table(table, parquet / f"{f.stem}.parquet")
        return cls(src, csv, parquet)


# kind -> the spec's body, made from the inputs and the run's storage location
SPECS: dict[str, Callable[[Path, Inputs, Path], dict[str, Any]]] = {
    "files-json": lambda work, inp, state: _files_spec(work, inp.json, "json"),
    "files-csv": lambda work, inp, state: _files_spec(work, inp.csv, "csv"),
    "files-parquet": lambda work, inp, state: _files_spec(work, inp.parquet, "parquet"),
    "log": lambda work, inp, state: yaml.safe_load(pipeline.log_spec(work, state).read_text()),
    "datagen-aggregate": lambda work, inp, state: _datagen_aggregate(),
    "datagen-join": lambda work, inp, state: _datagen_join(),
}


def _spec_file(work: Path, kind: str, inputs: Inputs, state: Path) -> Path:
    doc = {**SPECS[kind](work, inputs, state), **_COMMON}
    doc["name"] = f"bench-spare-{kind}"
    doc.pop("sinks", None)
    p = work / f"{kind}.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def _run_args(spec: Path, state: Path) -> list[str]:
    return [str(spec), "--storage", str(state), "--from-checkpoint", "none", "--max-steps", "2"]


def _start(args: list[str], takeover: bool) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "workers.runtime.driver", *args],
        cwd=ROOT,
        stdin=subprocess.PIPE if takeover else subprocess.DEVNULL,
        stdout=subprocess.PIPE if takeover else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,  # its JVM in its group: killed with it on failure
    )


def _finish(p: subprocess.Popen[bytes], metrics: Path, timeout_s: float = 300) -> dict[str, Any]:
    """The run's `started` record, once it has exited (after its 2 steps)."""
    try:
        code = p.wait(timeout=timeout_s)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    started = pipeline.events(metrics, "started")
    if code != 0 or not started:
        raise RuntimeError(f"the run ended with {code} and {len(started)} started records")
    return started[-1]


def _wait_ready(driver: subprocess.Popen[bytes], timeout_s: float = 300) -> None:
    """Until a spare driver says it is ready (its stdout line `spare: ready ...`)."""
    assert driver.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = driver.stdout.readline()
        if not line:
            raise RuntimeError(f"the spare ended before it was ready ({driver.wait()})")
        if line.startswith(b"spare: ready"):
            return
    raise RuntimeError("the spare was not ready in time")


def measure(way: str, spec: Path, state: Path) -> dict[str, Any]:
    """One run of `spec` on a fresh `state` started the `way` way (cold or spare): its
    `started` record."""
    metrics = state / "metrics.jsonl"
    if way == "cold":
        return _finish(_start(["run", *_run_args(spec, state)], takeover=False), metrics)
    p = _start(["spare"], takeover=True)
    line = json.dumps({"argv": _run_args(spec, state)})
    try:
        _wait_ready(p)
    except BaseException:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(line.encode() + b"\n")
    p.stdin.close()
    # the run's own output, read so that it never blocks on a full pipe
    threading.Thread(target=p.stdout.read, daemon=True).start()
    return _finish(p, metrics)


def run_benchmark(
    mode: str = "full",
    base_dir: str | None = None,
    log: Log = log_to_stderr,
    kinds: Sequence[str] = tuple(SPECS),
) -> dict[str, Any]:
    prof = PROFILES[mode]
    started = time.perf_counter()
    report: dict[str, Any] = {
        "benchmark": "spare",
        "mode": mode,
        "sizes": asdict(prof),
        "revision": engine_revision(),
        "machine": machine_info(),
        "notes": NOTES,
    }
    runs: dict[str, dict[str, list[float]]] = {k: {w: [] for w in WAYS} for k in kinds}
    with tempfile.TemporaryDirectory(prefix="spindle-bench-spare-", dir=base_dir) as tmp:
        work = Path(tmp)
        inputs = Inputs.write(work, prof.input)
        for r in range(prof.repeats):
            for kind in kinds:
                for way in WAYS:
                    state = work / "state"
                    shutil.rmtree(state, ignore_errors=True)
                    state.mkdir()
                    spec = _spec_file(work, kind, inputs, state)
                    rec = measure(way, spec, state)
                    runs[kind][way].append(float(rec["total_ms"]))
                    log(f"#{r} {kind} {way}: first step after {rec['total_ms']:,.0f} ms")
    report["first_step_ms"] = {
        kind: {way: median(ms) for way, ms in ways.items()} for kind, ways in runs.items()
    }
    report["first_step_ms_runs"] = runs
    report["spare_saving_ms"] = {
        k: ms["cold"] - ms["spare"] for k, ms in report["first_step_ms"].items()
    }
    report["machine"]["load_average_at_end"] = list(os.getloadavg())
    report["elapsed_s"] = time.perf_counter() - started
    cleaned: dict[str, Any] = clean(report)
    return cleaned


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.spare", description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print only the JSON report to stdout")
    p.add_argument("--quick", action="store_true", help="one repeat, smaller files")
    p.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dir", default=None, help="where to put temporary files (default: tmp)")
    p.add_argument("--kinds", default=",".join(SPECS), help="source kinds, comma-separated")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = p.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in SPECS]
    if unknown:
        p.error(f"unknown source kinds {unknown}: choose from {', '.join(SPECS)}")
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    report = run_benchmark(mode, args.dir, quiet if args.quiet else log_to_stderr, kinds)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for kind, ms in report["first_step_ms"].items():
            ways = ", ".join(f"{w} {ms[w]:,.0f}" for w in WAYS)
            saving = report["spare_saving_ms"][kind]
            print(f"{kind}: first step ms: {ways}; the spare saves {saving:,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
