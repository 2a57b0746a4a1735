"""Lookups: the rows of a spine, batch or file whose key is one of many probe keys.

- `probes.py`: probe keys as one sorted, unique record batch, filtered to the key range and
  encoded once for all the batches of a lookup (`key_table`, `probe_table`);
- `seek.py`: the rows of one sorted batch equal to the probes (`seek_keyed`, `seek_matches`);
- `file_seek.py`: a batch file's seek paths (block index, bloom filters, whole-file search),
  mixed into `file_format.BatchFile`;
- `late.py`: a spine's lookup materialized late (`Probes`, `Found`, `result`), re-exported
  here.
"""

from .late import Found, Probes, applies, columns, result

__all__ = ["Found", "Probes", "applies", "columns", "result"]
