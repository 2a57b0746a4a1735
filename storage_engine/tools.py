"""The offline tools over a storage location: validate it (`validate_location`, fsck)
and dump a batch file (`dump_batch_file`); `spindle storage ...` (spindle_cli/storage.py) prints
their reports.

Read-only like the view they build on (`location_view.py`, whose functions are re-exported
here so the CLI has one module to call): no lock is taken, nothing is removed or written.
Problems are reported per file and block, never raised (see `location_scan.py`).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import struct
from dataclasses import dataclass
from typing import Any, ClassVar

from .cache import BufferCache
from .file_format import FOOTER_SIZE, HEADER_SIZE, BatchFile, BlockInfo
from .location_scan import (
    Problem,
    Scan,
    ScannedCheckpoint,
    ToolPathError,
    file_size,
    open_batch,
    problem_of,
    root_dir,
    scan_location,
    tool_cache,
)
from .location_view import (
    BatchFileEntry,
    CheckpointListing,
    CheckpointReport,
    LocationReport,
    SpineReport,
    inspect_location,
    list_checkpoints,
    to_jsonable,
)
from .manifest import BATCH_RE, CHECKPOINT_META, MANIFEST
from .schema import WEIGHT

# -- report types ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ValidationReport:
    path: str
    problems: list[Problem]
    checkpoints_checked: int
    files_checked: int
    blocks_checked: int
    bytes_checked: int
    json_properties: ClassVar[tuple[str, ...]] = ("ok",)  # in `to_jsonable`'s output too

    @property
    def ok(self) -> bool:
        return not self.problems


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


# -- validate -------------------------------------------------------------------------------


def validate_location(path: str | os.PathLike[str]) -> ValidationReport:
    """Check everything: manifest, checkpoint and spine documents, every block of every batch
    file (referenced or not), zero padding, and that the metadata agrees with the files."""
    root = root_dir(path)
    scan = scan_location(root)
    problems = list(scan.problems)
    present = {n for n in scan.names if BATCH_RE.match(n)}
    facts: dict[str, tuple[str, int, int]] = {}  # name -> (schema fingerprint, rows, size)
    blocks = nbytes = files = 0
    with tool_cache() as cache:
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
            nbytes += file_size(s.path)
        nbytes += file_size(scan.p(c.info.uuid, CHECKPOINT_META))
    nbytes += file_size(scan.p(MANIFEST))
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
    scan: Scan, c: ScannedCheckpoint, facts: dict[str, tuple[str, int, int]]
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
    bf, prob = open_batch(path, cache)
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
                q = problem_of(e, path)
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
    size = file_size(p)
    with tool_cache() as cache:
        bf, prob = open_batch(p, cache)
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
                q = problem_of(e, p)
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
