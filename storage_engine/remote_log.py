"""The input log's copy in the object store: what a checkpoint restored on another machine
has not consumed yet.

Remote layout, beside the checkpoints (remote.py):

    input-log/<stream>/<first offset:020d>-<records:010d>.arrow    the local segments, as is

Segments are immutable and named by their offsets, so mirroring is set arithmetic. The tier
calls `LogMirror.sync()` with every checkpoint upload, before the manifest that names the
checkpoint: the copy then holds every record acknowledged before the checkpoint was
uploaded, consumed or not. Records acknowledged after the last upload are on the local
disk only. Segments the local log truncated (below the oldest checkpoint's offset) are
removed from the copy by the next sync. `pull_log` downloads the copy into a new location.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from .fileio import FileLayer, write_durably
from .forks import removable
from .input_log import LOG_DIR, list_segments, parse_segment
from .objstore import ObjectStoreLike

PREFIX = LOG_DIR + "/"


def _remote_segments(store: ObjectStoreLike) -> set[str]:
    """`<stream>/<segment>` of every segment in the copy."""
    out = set()
    for o in store.list(PREFIX):
        rel = o.key[len(PREFIX) :]
        stream, _, name = rel.partition("/")
        if stream and parse_segment(name) is not None:
            out.add(rel)
    return out


def _local_segments(fs: FileLayer, path: str) -> dict[str, list[str]]:
    """stream -> its local segment names, oldest first."""
    root = os.path.join(path, LOG_DIR)
    if not fs.isdir(root):
        return {}
    return {
        stream: [s.name for s in list_segments(fs, os.path.join(root, stream))]
        for stream in fs.listdir(root)
        if fs.isdir(os.path.join(root, stream))
    }


class LogMirror:
    """Keeps the object store's copy of the location's input logs in line with the disk."""

    def __init__(self, store: ObjectStoreLike, path: str, fs: FileLayer) -> None:
        self.store = store
        self.path = path
        self.fs = fs
        self._remote: set[str] | None = None  # listed once, then kept up to date

    def sync(self) -> None:
        """Upload the segments the copy lacks; drop those the local log has truncated."""
        store = self.store
        if self._remote is None:
            self._remote = _remote_segments(store)
        remote = self._remote
        local = _local_segments(self.fs, self.path)
        todo = [f"{st}/{n}" for st, names in local.items() for n in names]
        todo = [k for k in todo if k not in remote]

        def put(rel: str) -> None:
            store.put_file(PREFIX + rel, os.path.join(self.path, LOG_DIR, rel))
            remote.add(rel)

        with ThreadPoolExecutor(store.settings.upload_concurrency) as pool:
            list(pool.map(put, todo))
        # A segment gone from a stream that still has segments was truncated (the newest
        # segment is never truncated); a stream absent locally is left alone.
        doomed = []
        for rel in sorted(remote):
            stream, _, name = rel.partition("/")
            names = local.get(stream)
            if names and name not in names and name < names[0]:
                doomed.append(rel)
        if doomed:
            # Segments a fork still reads stay (and are tried again at the next sync).
            gone = removable(store, [PREFIX + rel for rel in doomed])
            store.remove(gone)
            remote.difference_update(k[len(PREFIX) :] for k in gone)


def pull_log(store: ObjectStoreLike, path: str, fs: FileLayer) -> int:
    """Download the copy into the location `path`; returns the bytes fetched."""
    rels = sorted(_remote_segments(store))
    streams = {rel.partition("/")[0] for rel in rels}
    for st in streams:
        fs.mkdir(os.path.join(path, LOG_DIR, st))

    def get(rel: str) -> int:
        data = store.get_bytes(PREFIX + rel)
        write_durably(fs, os.path.join(path, LOG_DIR, rel), [data])
        return len(data)

    with ThreadPoolExecutor(store.settings.upload_concurrency) as pool:
        return sum(pool.map(get, rels))
