"""The batch file format: an immutable, checksummed, block-indexed Z-set on disk.

- `layout.py`: magic numbers, format version and its history, sizes, flags, checksums;
- `bloom.py`: key hashes and the per-block bloom filters (every version's rules);
- `writer.py`: `BatchFileWriter` (blocks after the first encoded ahead on threads of its
  own), `write_batch_file`;
- `reader.py`: `BatchFile`, memory-mapped or over any `ByteSource`, blocks verified and
  decoded lazily through the cache. Its seek paths live in `lookup/file_seek.py`.

The format is specified in docs/storage-format.md.
"""

from .layout import FOOTER_SIZE, FORMAT_VERSION, HEADER_SIZE, BlockInfo
from .reader import BatchFile, ByteSource, MappedSource
from .writer import BatchFileWriter, WriteOptions, write_batch_file

__all__ = [
    "FOOTER_SIZE",
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "BatchFile",
    "BatchFileWriter",
    "BlockInfo",
    "ByteSource",
    "MappedSource",
    "WriteOptions",
    "write_batch_file",
]
