"""The read-only view of a location that the control plane's API and the offline tools
share: its checkpoints (`list_checkpoints`), what it holds (`inspect_location`), a spine's
rows (`read_spine`), and every report as plain JSON types (`to_jsonable`).

Every function here is read-only: it takes no lock, removes nothing and writes nothing, so
it is safe to run while a pipeline owns the location. Problems are reported, not raised
(see `location_scan.py`); printing is the CLI's job (spindle_cli/storage.py).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import StorageError
from .file_format import BatchFile
from .fileio import PosixFileLayer
from .key_range import KeyRange
from .location_scan import (
    Problem,
    ScannedCheckpoint,
    file_size,
    mut_files,
    open_batch,
    problem_of,
    read_checked_doc,
    root_dir,
    scan_location,
    tool_cache,
)
from .manifest import (
    BATCH_RE,
    CHECKPOINT_RE,
    MANIFEST,
    CheckpointInfo,
    Manifest,
    decode,
    spine_file,
)
from .schema import WEIGHT

# -- report types ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SpineReport:
    op_id: str
    schema_fingerprint: str
    batches: list[str]
    batch_count: int
    rows: int
    bytes: int
    lower_bound: list[Any] | None


@dataclass(frozen=True)
class CheckpointReport:
    uuid: str
    identifier: str | None
    step: int
    fingerprint: str
    parent: str | None
    created_at: float
    duration_ms: float
    total_bytes: int
    new_bytes: int
    rows: int
    files: int
    readable: bool
    """False when the checkpoint's metadata could not be read (see the report's problems)."""
    spines: list[SpineReport]


@dataclass(frozen=True)
class BatchFileEntry:
    name: str
    size: int
    rows: int | None
    """None when the file's header, footer or index cannot be read."""
    blocks: int | None
    referenced_by: list[str]
    """Uuids of the checkpoints whose spines list this file."""


@dataclass(frozen=True)
class LocationReport:
    path: str
    manifest_present: bool
    checkpoints: list[CheckpointReport]
    batch_files: list[BatchFileEntry]
    unreferenced: list[str]
    """Batch files no checkpoint references (removed when a pipeline next opens the dir)."""
    missing: list[str]
    """Batch files some checkpoint references that are not in the directory."""
    mut_files: list[str]
    """Leftover `*.mut` files (relative paths), removed when a pipeline next opens the dir."""
    orphan_dirs: list[str]
    """Checkpoint directories the manifest does not list (removed at the next open)."""
    total_bytes: int
    """Every file in the location, recursively."""
    batch_bytes: int
    problems: list[Problem]


@dataclass(frozen=True)
class CheckpointListing:
    path: str
    checkpoints: list[CheckpointInfo]
    problems: list[Problem]
    head: str | None = None
    """The checkpoint "latest" restores (see `Manifest`); None: none."""


@dataclass
class SpineContents:
    checkpoint: CheckpointInfo
    rows: Any  # pa.Table: the spine's columns, consolidated, rows with positive weight


# -- JSON ----------------------------------------------------------------------------------


def to_jsonable(obj: Any) -> Any:
    """Plain JSON types for any report: dataclasses become objects, times ISO strings,
    decimals strings of their digits."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        for name in getattr(obj, "json_properties", ()):  # e.g. a validation's `ok`
            out[name] = getattr(obj, name)
        return out
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, dt.datetime | dt.date | dt.time):
        return obj.isoformat()
    if isinstance(obj, dt.timedelta):
        return obj.total_seconds()
    if isinstance(obj, bytes):
        return obj.hex()
    if isinstance(obj, decimal.Decimal):
        # A string keeps every digit (a JSON number is a double to most readers), written
        # out plainly with the column's scale: 0.00000000, never 0E-8.
        return format(obj, "f")
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def jsonable_rows(t: Any) -> list[dict[str, Any]]:
    """A pa.Table's rows as plain JSON values (`to_jsonable`). A string that is not valid
    UTF-8 (stored before ingest refused it) is shown with replacement characters: reading
    stored state never fails."""
    import pyarrow as pa

    try:
        rows: list[dict[str, Any]] = t.to_pylist()
    except UnicodeDecodeError:
        cols = [_lenient(c) for c in t.columns]
        rows = pa.table(cols, names=t.column_names).to_pylist()
    return [to_jsonable(r) for r in rows]


def _lenient(col: Any) -> Any:
    import pyarrow as pa

    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return col
    raw = col.cast(pa.large_binary()).to_pylist()  # a cast that does not validate
    return pa.array([None if b is None else b.decode("utf-8", "replace") for b in raw])


# -- inspect -------------------------------------------------------------------------------


def inspect_location(path: str | os.PathLike[str]) -> LocationReport:
    """What a location holds: checkpoints, their spines, batch files, leftovers, sizes."""
    root = root_dir(path)
    scan = scan_location(root)
    known = {c.info.uuid for c in scan.checkpoints}
    checkpoints = [_checkpoint_report(c) for c in scan.checkpoints]
    present = [n for n in scan.names if BATCH_RE.match(n)]
    entries = []
    problems = list(scan.problems)
    with tool_cache() as cache:
        for n in present:
            bf, prob = open_batch(scan.p(n), cache)
            if prob is not None:
                problems.append(prob)
            entries.append(
                BatchFileEntry(
                    name=n,
                    size=file_size(scan.p(n)),
                    rows=bf.rows if bf is not None else None,
                    blocks=bf.num_blocks if bf is not None else None,
                    referenced_by=list(scan.refs.get(n, [])),
                )
            )
    missing = sorted(set(scan.refs) - set(present))
    problems += [
        Problem(scan.p(n), None, f"missing; referenced by checkpoint(s) {', '.join(scan.refs[n])}")
        for n in missing
    ]
    total = 0
    for dirpath, _, files in os.walk(root):
        total += sum(file_size(os.path.join(dirpath, f)) for f in files)
    return LocationReport(
        path=root,
        manifest_present=scan.manifest_present,
        checkpoints=checkpoints,
        batch_files=entries,
        unreferenced=[n for n in present if n not in scan.refs],
        missing=missing,
        mut_files=mut_files(scan),
        orphan_dirs=[
            n
            for n in scan.names
            if CHECKPOINT_RE.match(n) and os.path.isdir(scan.p(n)) and n not in known
        ],
        total_bytes=total,
        batch_bytes=sum(e.size for e in entries),
        problems=problems,
    )


def _checkpoint_report(c: ScannedCheckpoint) -> CheckpointReport:
    i = c.info
    spines = []
    for s in c.spines:
        batches = list(s.doc["batches"])
        lb = s.doc.get("lower_bound")
        spines.append(
            SpineReport(
                op_id=s.op_id,
                schema_fingerprint=s.doc["schema_fingerprint"],
                batches=batches,
                batch_count=len(batches),
                rows=_int(s.doc.get("rows")),
                bytes=_int(s.doc.get("bytes")),
                lower_bound=list(lb) if isinstance(lb, list) else None,
            )
        )
    return CheckpointReport(
        uuid=i.uuid,
        identifier=i.identifier,
        step=i.step,
        fingerprint=i.fingerprint,
        parent=i.parent,
        created_at=i.created_at,
        duration_ms=i.duration_ms,
        total_bytes=i.total_bytes,
        new_bytes=i.new_bytes,
        rows=i.rows,
        files=i.files,
        readable=c.readable,
        spines=spines,
    )


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


# -- list -----------------------------------------------------------------------------------


def list_checkpoints(path: str | os.PathLike[str]) -> CheckpointListing:
    """The manifest's checkpoints, oldest first."""
    root = root_dir(path)
    mpath = os.path.join(root, MANIFEST)
    if not os.path.exists(mpath):
        scan = scan_location(root)  # reports a missing manifest when checkpoint dirs exist
        return CheckpointListing(root, [], scan.problems)
    doc, problems = read_checked_doc(mpath, "checkpoint manifest")
    if doc is None:
        return CheckpointListing(root, [], problems)
    try:
        manifest = Manifest.from_json(doc, mpath)
        return CheckpointListing(root, manifest.checkpoints, problems, manifest.head)
    except StorageError as e:
        return CheckpointListing(root, [], [*problems, problem_of(e, mpath)])


# -- read a spine ---------------------------------------------------------------------------


def read_spine(
    path: str | os.PathLike[str],
    op_id: str,
    checkpoint: str = "latest",
    weights: bool = False,
    within: KeyRange | None = None,
) -> SpineContents:
    """The rows of spine `op_id` in a checkpoint (default the newest; else its uuid or
    identifier), consolidated: equal keys' weights summed, rows whose weight is not
    positive dropped (with `weights`, each row's weight is kept as `__weight`). With
    `within` (its values as text, cast to the leading key columns' types: ValueError naming
    a column otherwise), only the rows in that key range, reading only the blocks the
    files' block indexes say may hold them. Read-only, like every tool here; a corrupt file raises
    its CorruptionError (naming file and block)."""
    import pyarrow as pa

    root = root_dir(path)
    mpath = os.path.join(root, MANIFEST)
    fs = PosixFileLayer()
    if not os.path.exists(mpath):
        raise StorageError(f"{root}: no checkpoints yet")
    manifest = Manifest.from_json(decode(fs.read(mpath), mpath), mpath)
    if not manifest.checkpoints:
        raise StorageError(f"{root}: no checkpoints yet")
    info = manifest.latest() if checkpoint == "latest" else manifest.find(checkpoint)
    if info is None:
        raise StorageError(f"{root}: no checkpoint {checkpoint!r}")
    spath = os.path.join(root, info.uuid, spine_file(op_id))
    if not os.path.exists(spath):
        raise KeyError(op_id)
    doc = decode(fs.read(spath), spath)
    tables = []
    with tool_cache() as cache:
        for name in doc["batches"]:
            bf = BatchFile(fs, os.path.join(root, name), cache)
            if within is None:
                tables.append(pa.Table.from_batches(list(bf.iter_blocks())))
            else:
                tables.append(pa.Table.from_batches([bf.in_range(within.typed(bf.schema.keys))]))
    if not tables:
        return SpineContents(info, None)
    t = pa.concat_tables(tables)
    keys = [n for n in t.column_names if n != WEIGHT]
    summed = t.group_by(keys, use_threads=False).aggregate([(WEIGHT, "sum")])
    summed = summed.filter(pa.compute.greater(summed.column(f"{WEIGHT}_sum"), 0))
    if weights:
        summed = summed.select([*keys, f"{WEIGHT}_sum"]).rename_columns([*keys, WEIGHT])
    else:
        summed = summed.select(keys)
    return SpineContents(info, summed.sort_by([(k, "ascending") for k in keys]))
