"""The batch file's layout: magic numbers, version, sizes, flags and checksums.

Layout (little-endian; see docs/storage-format.md for the full specification):

    header   64 B   magic "SPNDLZS\\0", format version u16, flags u16, key column count u16,
                    bloom probes u16 (v3), schema fingerprint 16 B, zero padding, crc32 of
                    bytes 0..60
    block 0         Arrow IPC record-batch message (optionally lz4/zstd compressed buffers),
                    then this block's bloom filter bytes, padded to 64 B
    ...
    schema          Arrow IPC schema message of the batch columns
    index           Arrow IPC record-batch message: per block offset, length, bloom offset and
                    length, rows, checksum (of message + bloom), first key columns, last key
                    columns
    footer   72 B   schema offset/len, index offset/len, total rows, block count (u64 each),
                    reserved u64, checksum of schema+index, crc32 of the footer's first 60
                    bytes, magic "SPNDLEND"

Block and schema/index checksums are CRC-32C from version 3 on (CRC-32 before); the header's
and footer's own are CRC-32 in every version.

Block checksums are verified on first read; the footer, schema and index are verified at
open. Files are written as `<name>.mut`, fsynced, renamed and the directory fsynced.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import crc32c

MAGIC = b"SPNDLZS\x00"
END_MAGIC = b"SPNDLEND"
FORMAT_VERSION = 3
"""Version history: 1 — first release; 2 — bloom key hashes depend only on column types
(version 1 hashed integer keys with pandas when any column of the schema was not integral,
or when the block held a null); 3 — block and schema/index checksums are CRC-32C (the
`crc32c` package uses the CPU's CRC instruction, much faster than zlib's CRC-32), the
header's reserved field holds the bloom filters' probe count (3 written, was a fixed 7:
fewer probes make the filters cheaper to build, which an over-budget ingest does for every
block it spills), and a key hash starts from its first column's hash instead of mixing it
once more. Readers keep each earlier version's rules for its files."""
HEADER_SIZE = 64
FOOTER_SIZE = 72
ALIGN = 64
FLAG_BLOOM = 1
COMPRESSION_CODES = {None: 0, "lz4": 1, "zstd": 2}
COMPRESSION_NAMES = {v: k for k, v in COMPRESSION_CODES.items()}
FOOTER = struct.Struct("<QQQQQQQII")  # 7 u64 + 2 u32 = 64 bytes, then magic
INDEX_COLUMNS = ("offset", "length", "bloom_length", "rows", "crc")
"""The block index's per-block numbers (uint64), before its first and last key columns."""


def checksum(version: int) -> Callable[[Any, int], int]:
    """The checksum of blocks and of the schema/index in files of `version`:
    `f(data, previous)` extends a running checksum (start with 0)."""
    return crc32c.crc32c if version >= 3 else zlib.crc32


CHECKSUM = checksum(FORMAT_VERSION)
"""The checksum this build writes."""


def pad(n: int) -> int:
    """The zero bytes that bring `n` bytes to a multiple of `ALIGN`."""
    return (-n) % ALIGN


@dataclass(frozen=True)
class BlockInfo:
    """One row of a batch file's block index."""

    block: int
    offset: int
    length: int
    bloom_length: int
    rows: int
    crc: int
    first_key: list[Any]
    last_key: list[Any]
