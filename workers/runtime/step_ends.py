"""Where a step ends, decided by the driver for a Spark query's trigger.

A `files` or `kafka` table's next step ends where its input ends now (at most a step's
worth): the files listed, the partitions' end offsets. Asking means reaching the input: a
directory, an object store, a broker, with credentials. Spark calls its source's
`latestOffset` in a Python worker that its JVM starts, and the JVM's environment holds no
secret (`driver_jvm.jvm_environment`), so the worker asks the driver instead: the driver
answers on a Unix socket of its own (`StepEndServer`, in a private directory), and the
trigger (`StepEndsSource`, `spindle_step_ends`) only carries the answer into the query's
offset log. The socket answers nothing but offsets.

One request per connection: a JSON line `{"from": offset}`, answered by `{"end": offset}` or
`{"error": message}` (the query then fails, naming it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import socketserver
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from pipeline_spec.offsets import Offset, parse

log = logging.getLogger("spindle.runner")
ASK_TIMEOUT_S = 120.0  # a broker's own timeout (30 s) and retries fit well within


class StepEndServer:
    """Answers `{"from": offset}` with `ends(offset)` on a Unix socket (`path`) until
    `close()`, on a thread of its own."""

    def __init__(self, ends: Callable[[Offset], Offset], name: str) -> None:
        self._dir = tempfile.mkdtemp(prefix="spindle-ends-")  # mode 0700: the driver's user
        self.path = os.path.join(self._dir, "ends.sock")

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                request = self.rfile.readline()
                if not request:
                    return  # the worker went away (its query stopped) before asking
                try:
                    start = parse(json.loads(request)["from"])
                    answer: dict[str, Any] = {"end": ends(start)}
                except Exception as e:  # told to the trigger: its query fails with it
                    log.warning("step end of table %s: %s", name, e)
                    answer = {"error": str(e)}
                with contextlib.suppress(OSError):  # nobody waits for it any more
                    self.wfile.write(json.dumps(answer).encode() + b"\n")

        self._server = socketserver.ThreadingUnixStreamServer(self.path, Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"spindle-ends-{name}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        shutil.rmtree(self._dir, ignore_errors=True)


def ask(path: str, start: Offset) -> Offset:
    """The driver's answer (`StepEndServer` at `path`): where a step from `start` ends."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(ASK_TIMEOUT_S)
        s.connect(path)
        s.sendall(json.dumps({"from": start}).encode() + b"\n")
        with contextlib.closing(s.makefile("rb")) as f:
            answer = json.loads(f.readline() or b"{}")
    if "end" not in answer:
        raise RuntimeError(answer.get("error", "the driver gave no step end"))
    return parse(answer["end"])


class _EndsOnly(InputPartition):
    def __init__(self) -> None:
        super().__init__(None)


class StepEndsReader(DataSourceStreamReader):
    """Offsets `{"offset": ...}` from `start` (JSON), each step's end asked of the driver
    (`ends`: its socket). A batch's rows are never read: the driver reads the input itself
    (`StepInput.rows`), so a batch is one empty partition."""

    def __init__(self, options: dict[str, str]) -> None:
        self.ends = options["ends"]
        self.cur: Offset = parse(json.loads(options.get("start", "0")))

    def initialOffset(self) -> dict[str, Any]:
        return {"offset": self.cur}

    def latestOffset(self) -> dict[str, Any]:
        self.cur = ask(self.ends, self.cur)
        return {"offset": self.cur}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return [_EndsOnly()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from ()

    def commit(self, end: dict[str, Any]) -> None:
        pass  # Spindle's checkpoints own the offsets


class StepEndsSource(DataSource):
    """A table whose step ends the driver decides (`ends`: its socket; `start`: the
    table's offset as JSON)."""

    @classmethod
    def name(cls) -> str:
        return "spindle_step_ends"

    def schema(self) -> str:
        return "__end bigint"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return StepEndsReader(dict(self.options))


__all__ = ["StepEndServer", "StepEndsReader", "StepEndsSource", "ask"]
