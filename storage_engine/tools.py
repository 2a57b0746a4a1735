"""Offline tools over a storage location: inspect, validate, list checkpoints, dump a file.

Every function here is read-only: it takes no lock, removes nothing and writes nothing, so
it is safe to run while a pipeline owns the location. It reads the manifest, checkpoint
metadata and batch files through the engine's own readers (`manifest.decode`, `BatchFile`)
and returns plain dataclasses; printing is the CLI's job (cli/storage.py).

Storage errors never escape as exceptions: each becomes a `Problem` naming the file (and
the block, when one is at fault) and the tool carries on with the next file, so one run of
`validate_location` reports everything that is wrong. The only exception raised is
`ToolPathError`, for a path that does not exist or is the wrong kind of thing.

A pipeline that commits or collects garbage while a tool runs can make a file vanish
between listing and reading; that shows up as a "missing" problem on that run only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import decimal
import itertools
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .batch_file import FOOTER_SIZE, HEADER_SIZE, BatchFile, BlockInfo
from .cache import BufferCache
from .errors import CorruptionError, StorageError
from .fileio import PosixFileLayer
from .location import BATCH_RE, CHECKPOINT_RE, OP_ID_RE
from .location import spine_file as _spine_file
from .manifest import CHECKPOINT_META, MANIFEST, CheckpointInfo, Manifest, decode
from .schema import WEIGHT

_TRAILER = b"\ncrc32 "
_CANONICAL_TRAILER = re.compile(rb"[0-9a-f]{8}\n")
_TOOL_CACHE_BYTES = 8 << 20


class ToolPathError(StorageError):
    """The path given to a tool does not exist or is not the kind of thing it needs."""


# -- report types ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """Something wrong with one file; `block` is set when a batch file block is at fault."""

    path: str
    block: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.path} (block {self.block})" if self.block is not None else self.path
        return f"{where}: {self.message}"


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
class ValidationReport:
    path: str
    problems: list[Problem]
    checkpoints_checked: int
    files_checked: int
    blocks_checked: int
    bytes_checked: int

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class CheckpointListing:
    path: str
    checkpoints: list[CheckpointInfo]
    problems: list[Problem]
    head: str | None = None
    """The checkpoint "latest" restores (see `Manifest`); None: none."""


@dataclass(frozen=True)
class ColumnInfo:
    name: str
    type: str
    nullable: bool


@dataclass(frozen=True)
class SchemaInfo:
    fingerprint: str
    keys: list[ColumnInfo]
    values: list[ColumnInfo]


@dataclass(frozen=True)
class HeaderFacts:
    format_version: int
    compression: str | None
    bloom: bool
    bloom_probes: int  # probes per key of the bloom filters (0 without them)
    key_columns: int
    rows: int
    blocks: int
    size: int


BlockIndexRow = BlockInfo


@dataclass(frozen=True)
class BatchFileDump:
    path: str
    size: int
    schema: SchemaInfo | None
    header: HeaderFacts | None
    blocks: list[BlockIndexRow]
    rows: list[dict[str, Any]]
    """The first rows of the file in order, each with its `__weight`."""
    problems: list[Problem]


# -- JSON ----------------------------------------------------------------------------------


def to_jsonable(obj: Any) -> Any:
    """Plain JSON types for any report: dataclasses become objects, times ISO strings."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        if isinstance(obj, ValidationReport):
            out["ok"] = obj.ok
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
        return str(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


# -- shared reading -------------------------------------------------------------------------


def _root(path: str | os.PathLike[str]) -> str:
    root = os.path.abspath(os.fspath(path))
    if not os.path.exists(root):
        raise ToolPathError(f"{root}: no such directory")
    if not os.path.isdir(root):
        raise ToolPathError(f"{root}: not a directory")
    return root


def _read_doc(path: str, what: str) -> tuple[dict[str, Any] | None, list[Problem]]:
    """A checksummed JSON document, strictly: the engine's checks plus a canonical trailer."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None, [Problem(path, None, f"missing ({what})")]
    except OSError as e:
        return None, [Problem(path, None, f"unreadable ({what}): {e}")]
    try:
        doc = decode(data, path)
    except CorruptionError as e:
        return None, [Problem(path, None, e.detail)]
    problems = []
    cut = data.rfind(_TRAILER)
    if not _CANONICAL_TRAILER.fullmatch(data[cut + len(_TRAILER) :]):
        problems.append(
            Problem(path, None, "checksum trailer is not 8 lowercase hex digits (damaged)")
        )
    return doc, problems


@dataclass
class _Spine:
    op_id: str
    doc: dict[str, Any]
    path: str


@dataclass
class _Checkpoint:
    info: CheckpointInfo
    meta: dict[str, Any] | None = None
    spines: list[_Spine] = field(default_factory=list)
    readable: bool = True


@dataclass
class _Scan:
    root: str
    names: list[str]
    manifest_present: bool
    checkpoints: list[_Checkpoint]
    problems: list[Problem]
    refs: dict[str, list[str]]  # batch name -> checkpoint uuids, in manifest order

    def p(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)


def _str_list(v: Any) -> list[str] | None:
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return list(v)
    return None


def _scan(root: str) -> _Scan:
    """Manifest, checkpoint metadata and spine documents, with every problem met on the way."""
    names = sorted(os.listdir(root))
    problems: list[Problem] = []
    mpath = os.path.join(root, MANIFEST)
    checkpoints: list[_Checkpoint] = []
    present = MANIFEST in names
    if present:
        doc, probs = _read_doc(mpath, "checkpoint manifest")
        problems += probs
        if doc is not None:
            try:
                manifest = Manifest.from_json(doc, mpath)
            except StorageError as e:
                problems.append(_problem(e, mpath))
            else:
                checkpoints = [_Checkpoint(c) for c in manifest.checkpoints]
    elif any(CHECKPOINT_RE.match(n) for n in names):
        problems.append(
            Problem(
                mpath,
                None,
                "missing, but checkpoint directories exist (the engine refuses to open)",
            )
        )
    scan = _Scan(root, names, present, checkpoints, problems, {})
    seen: set[str] = set()
    for c in checkpoints:
        uid = c.info.uuid
        if not isinstance(uid, str) or not CHECKPOINT_RE.match(uid) or uid in seen:
            problems.append(Problem(mpath, None, f"invalid or duplicate checkpoint uuid {uid!r}"))
            c.readable = False
            continue
        seen.add(uid)
        _scan_checkpoint(scan, c)
    return scan


def _scan_checkpoint(scan: _Scan, c: _Checkpoint) -> None:
    uid = c.info.uuid
    cpath = scan.p(uid, CHECKPOINT_META)
    meta, probs = _read_doc(cpath, f"metadata of checkpoint {uid}")
    scan.problems += probs
    if meta is None:
        c.readable = False
        return
    c.meta = meta
    if meta.get("uuid") != uid:
        scan.problems.append(Problem(cpath, None, f"names checkpoint {meta.get('uuid')!r}"))
    if meta.get("step") != c.info.step:
        scan.problems.append(
            Problem(cpath, None, f"step {meta.get('step')!r} differs from the manifest's")
        )
    ops = _str_list(meta.get("spines", []))
    if ops is None:
        scan.problems.append(Problem(cpath, None, "malformed spine list"))
        c.readable = False
        return
    for op in ops:
        spath = scan.p(uid, _spine_file(op))
        if not OP_ID_RE.match(op):
            scan.problems.append(Problem(cpath, None, f"invalid operator id {op!r}"))
            c.readable = False
            continue
        doc, probs = _read_doc(spath, f"spine {op} of checkpoint {uid}")
        scan.problems += probs
        if doc is None:
            c.readable = False
            continue
        batches = _str_list(doc.get("batches"))
        if (
            batches is None
            or not all(BATCH_RE.match(b) for b in batches)
            or not isinstance(doc.get("schema_fingerprint"), str)
            or doc.get("op_id", op) != op
        ):
            scan.problems.append(Problem(spath, None, "malformed spine document"))
            c.readable = False
            continue
        c.spines.append(_Spine(op, doc, spath))
        for b in batches:
            users = scan.refs.setdefault(b, [])
            if uid not in users:
                users.append(uid)


def _problem(e: BaseException, path: str) -> Problem:
    if isinstance(e, CorruptionError):
        return Problem(e.path, e.block, e.detail)
    if isinstance(e, StorageError):
        return Problem(path, None, str(e))
    return Problem(path, None, f"unexpected {type(e).__name__}: {e}")


@contextlib.contextmanager
def _cache() -> Iterator[BufferCache]:
    cache = BufferCache(_TOOL_CACHE_BYTES, prefetch_threads=1)
    try:
        yield cache
    finally:
        cache.close()


def _open_batch(path: str, cache: BufferCache) -> tuple[BatchFile | None, Problem | None]:
    try:
        return BatchFile(PosixFileLayer(), path, cache), None
    except Exception as e:  # a tool reports, it does not crash
        return None, _problem(e, path)


def _mut_files(scan: _Scan) -> list[str]:
    out = [n for n in scan.names if n.endswith(".mut")]
    for n in scan.names:
        if CHECKPOINT_RE.match(n) and os.path.isdir(scan.p(n)):
            out += [f"{n}/{m}" for m in sorted(os.listdir(scan.p(n))) if m.endswith(".mut")]
    return out


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# -- inspect -------------------------------------------------------------------------------


def inspect_location(path: str | os.PathLike[str]) -> LocationReport:
    """What a location holds: checkpoints, their spines, batch files, leftovers, sizes."""
    root = _root(path)
    scan = _scan(root)
    known = {c.info.uuid for c in scan.checkpoints}
    checkpoints = [_checkpoint_report(c) for c in scan.checkpoints]
    present = [n for n in scan.names if BATCH_RE.match(n)]
    entries = []
    problems = list(scan.problems)
    with _cache() as cache:
        for n in present:
            bf, prob = _open_batch(scan.p(n), cache)
            if prob is not None:
                problems.append(prob)
            entries.append(
                BatchFileEntry(
                    name=n,
                    size=_file_size(scan.p(n)),
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
        total += sum(_file_size(os.path.join(dirpath, f)) for f in files)
    return LocationReport(
        path=root,
        manifest_present=scan.manifest_present,
        checkpoints=checkpoints,
        batch_files=entries,
        unreferenced=[n for n in present if n not in scan.refs],
        missing=missing,
        mut_files=_mut_files(scan),
        orphan_dirs=[
            n
            for n in scan.names
            if CHECKPOINT_RE.match(n) and os.path.isdir(scan.p(n)) and n not in known
        ],
        total_bytes=total,
        batch_bytes=sum(e.size for e in entries),
        problems=problems,
    )


def _checkpoint_report(c: _Checkpoint) -> CheckpointReport:
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
    root = _root(path)
    mpath = os.path.join(root, MANIFEST)
    if not os.path.exists(mpath):
        scan = _scan(root)  # reports a missing manifest when checkpoint dirs exist
        return CheckpointListing(root, [], scan.problems)
    doc, problems = _read_doc(mpath, "checkpoint manifest")
    if doc is None:
        return CheckpointListing(root, [], problems)
    try:
        manifest = Manifest.from_json(doc, mpath)
        return CheckpointListing(root, manifest.checkpoints, problems, manifest.head)
    except StorageError as e:
        return CheckpointListing(root, [], [*problems, _problem(e, mpath)])


# -- validate -------------------------------------------------------------------------------


def validate_location(path: str | os.PathLike[str]) -> ValidationReport:
    """Check everything: manifest, checkpoint and spine documents, every block of every batch
    file (referenced or not), zero padding, and that the metadata agrees with the files."""
    root = _root(path)
    scan = _scan(root)
    problems = list(scan.problems)
    present = {n for n in scan.names if BATCH_RE.match(n)}
    facts: dict[str, tuple[str, int, int]] = {}  # name -> (schema fingerprint, rows, size)
    blocks = nbytes = files = 0
    with _cache() as cache:
        for n in sorted(present | set(scan.refs)):
            p = scan.p(n)
            users = scan.refs.get(n)
            if n not in present:
                assert users is not None
                problems.append(
                    Problem(p, None, f"missing; referenced by checkpoint(s) {', '.join(users)}")
                )
                continue
            files += 1
            bf, probs, checked = _verify_batch_file(p, cache)
            blocks += checked
            if users is None:
                probs = [
                    dataclasses.replace(q, message=f"{q.message} (unreferenced)") for q in probs
                ]
            problems += probs
            if bf is not None:
                nbytes += bf.size
                facts[n] = (bf.schema.fingerprint(), bf.rows, bf.size)
    for c in scan.checkpoints:
        problems += _check_sizes(scan, c, facts)
    for c in scan.checkpoints:
        for s in c.spines:
            nbytes += _file_size(s.path)
        nbytes += _file_size(scan.p(c.info.uuid, CHECKPOINT_META))
    nbytes += _file_size(scan.p(MANIFEST))
    return ValidationReport(
        path=root,
        problems=_dedupe(problems),
        checkpoints_checked=len(scan.checkpoints),
        files_checked=files,
        blocks_checked=blocks,
        bytes_checked=nbytes,
    )


def _dedupe(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def _check_sizes(
    scan: _Scan, c: _Checkpoint, facts: dict[str, tuple[str, int, int]]
) -> list[Problem]:
    """Spine documents and the manifest entry agree with the batch files they list."""
    out: list[Problem] = []
    complete = c.readable
    distinct: dict[str, tuple[str, int, int]] = {}
    for s in c.spines:
        names = list(s.doc["batches"])
        if not all(n in facts for n in names):
            complete = False
            continue  # the unreadable files are reported already
        for n in names:
            fp = facts[n][0]
            if fp != s.doc["schema_fingerprint"]:
                out.append(
                    Problem(
                        scan.p(n), None, f"schema differs from spine {s.op_id} of {c.info.uuid}"
                    )
                )
            distinct[n] = facts[n]
        rows = sum(facts[n][1] for n in names)
        size = sum(facts[n][2] for n in names)
        if s.doc.get("rows", rows) != rows or s.doc.get("bytes", size) != size:
            out.append(
                Problem(s.path, None, f"rows/bytes differ from its batch files ({rows}, {size})")
            )
    i = c.info
    if complete and (i.files or i.total_bytes or i.rows):  # all zero: sizes not recorded
        rows = sum(f[1] for f in distinct.values())
        size = sum(f[2] for f in distinct.values())
        if (i.files, i.total_bytes, i.rows) != (len(distinct), size, rows):
            out.append(
                Problem(
                    scan.p(MANIFEST),
                    None,
                    f"checkpoint {i.uuid}: files/bytes/rows ({i.files}, {i.total_bytes}, "
                    f"{i.rows}) differ from its batch files ({len(distinct)}, {size}, {rows})",
                )
            )
    return out


def _verify_batch_file(
    path: str, cache: BufferCache
) -> tuple[BatchFile | None, list[Problem], int]:
    """Open (header, footer, schema, index checks), verify every block, check the padding."""
    bf, prob = _open_batch(path, cache)
    if bf is None:
        assert prob is not None
        return None, [prob], 0
    problems: list[Problem] = []
    try:
        bf.verify()
    except Exception:
        # Some block is bad: check each one so every bad block is reported, not just the first.
        for i in range(bf.num_blocks):
            try:
                bf.verify_block(i)
            except Exception as e:
                q = _problem(e, path)
                problems.append(q if q.block is not None else dataclasses.replace(q, block=i))
    index = bf.block_index()
    if sum(r.rows for r in index) != bf.rows:
        problems.append(Problem(path, None, "footer row count differs from the block index"))
    problems += _check_padding(path, bf.size, index)
    return bf, problems, bf.num_blocks


def _check_padding(path: str, size: int, index: list[BlockIndexRow]) -> list[Problem]:
    """Bytes outside every checksummed region are zero padding; report any that are not.

    No checksum covers them, so the data is intact, but a non-zero byte there means the
    file no longer holds what was written (a failing disk, or a stray write).
    """
    with open(path, "rb") as f:
        f.seek(size - FOOTER_SIZE)
        s_off, s_len, i_off, i_len = struct.unpack("<QQQQ", f.read(32))
        covered: list[tuple[int, int, int | None, str]] = [(0, HEADER_SIZE, None, "header")]
        covered += [
            (r.offset, r.offset + r.length + r.bloom_length, r.block, f"block {r.block}")
            for r in index
        ]
        covered += [
            (s_off, s_off + s_len, None, "schema"),
            (i_off, i_off + i_len, None, "index"),
            (size - FOOTER_SIZE, size, None, "footer"),
        ]
        covered.sort()
        out = []
        for (_, end, block, what), (nxt, _, _, _) in itertools.pairwise(covered):
            if nxt <= end:
                continue
            f.seek(end)
            gap = f.read(nxt - end)
            if any(gap):
                at = end + next(j for j, b in enumerate(gap) if b)
                out.append(
                    Problem(
                        path,
                        block,
                        f"non-zero padding byte at offset {at} after the {what} "
                        "(not covered by a checksum; the data itself is intact)",
                    )
                )
        return out


# -- dump -------------------------------------------------------------------------------------


def dump_batch_file(path: str | os.PathLike[str], limit: int = 20) -> BatchFileDump:
    """Header facts, schema, block index and the first `limit` rows of one batch file."""
    p = os.path.abspath(os.fspath(path))
    if not os.path.exists(p):
        raise ToolPathError(f"{p}: no such file")
    if not os.path.isfile(p):
        raise ToolPathError(f"{p}: not a file")
    size = _file_size(p)
    with _cache() as cache:
        bf, prob = _open_batch(p, cache)
        if bf is None:
            assert prob is not None
            return BatchFileDump(p, size, None, None, [], [], [prob])
        schema = bf.schema
        info = SchemaInfo(
            fingerprint=schema.fingerprint(),
            keys=[ColumnInfo(f.name, str(f.type), f.nullable) for f in schema.keys],
            values=[ColumnInfo(f.name, str(f.type), f.nullable) for f in schema.values],
        )
        header = HeaderFacts(
            format_version=bf.format_version,
            compression=bf.compression,
            bloom=bf.has_bloom,
            bloom_probes=bf.bloom_probes if bf.has_bloom else 0,
            key_columns=len(schema.keys),
            rows=bf.rows,
            blocks=bf.num_blocks,
            size=bf.size,
        )
        rows: list[dict[str, Any]] = []
        problems: list[Problem] = []
        names = [*schema.row_names, WEIGHT]
        for i in range(bf.num_blocks):
            if len(rows) >= limit:
                break
            try:
                rb = bf.block(i).slice(0, limit - len(rows))
            except Exception as e:
                q = _problem(e, p)
                problems.append(q if q.block is not None else dataclasses.replace(q, block=i))
                break
            cols = [rb.column(n).to_pylist() for n in names]
            rows += [dict(zip(names, r, strict=True)) for r in zip(*cols, strict=True)]
        return BatchFileDump(p, size, info, header, bf.block_index(), rows, problems)


__all__ = [
    "BatchFileDump",
    "BatchFileEntry",
    "BlockIndexRow",
    "CheckpointListing",
    "CheckpointReport",
    "HeaderFacts",
    "LocationReport",
    "Problem",
    "SchemaInfo",
    "SpineReport",
    "ToolPathError",
    "ValidationReport",
    "dump_batch_file",
    "inspect_location",
    "list_checkpoints",
    "to_jsonable",
    "validate_location",
]


# -- read a spine ---------------------------------------------------------------------------


@dataclass
class SpineContents:
    checkpoint: CheckpointInfo
    rows: Any  # pa.Table: the spine's columns, consolidated, rows with positive weight


def read_spine(
    path: str | os.PathLike[str], op_id: str, checkpoint: str = "latest"
) -> SpineContents:
    """The rows of spine `op_id` in a checkpoint (default the newest), consolidated: equal
    keys' weights summed, rows whose weight is not positive dropped. Read-only, like every
    tool here; a corrupt file raises its CorruptionError (naming file and block)."""
    import pyarrow as pa

    root = _root(path)
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
    spath = os.path.join(root, info.uuid, _spine_file(op_id))
    if not os.path.exists(spath):
        raise KeyError(op_id)
    doc = decode(fs.read(spath), spath)
    tables = []
    with _cache() as cache:
        for name in doc["batches"]:
            bf = BatchFile(fs, os.path.join(root, name), cache)
            tables.append(pa.Table.from_batches(list(bf.iter_blocks())))
    if not tables:
        return SpineContents(info, None)
    t = pa.concat_tables(tables)
    keys = [n for n in t.column_names if n != WEIGHT]
    summed = t.group_by(keys, use_threads=False).aggregate([(WEIGHT, "sum")])
    summed = summed.filter(pa.compute.greater(summed.column(f"{WEIGHT}_sum"), 0))
    return SpineContents(info, summed.select(keys).sort_by([(k, "ascending") for k in keys]))
