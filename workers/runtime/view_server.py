"""`ViewServer`: a running driver's `view` sinks, read over HTTP by the control plane's API
as of the newest step (`ViewSink.lookup`), so `GET .../views/{view}` answers from the live
state instead of the newest checkpoint.

    GET /views/<view>?key=<v>&key=<v>...&ge=<v>&lt=<v>&offset=<n>&limit=<n>
    Authorization: Bearer <the run's view secret>
    -> 200 {"view", "step", "checkpoint": null, "live": true, "rows": [...]} (the API's
       ViewPage) | 400/401/404/503 {"message"}, 410 once closed

It listens on SPINDLE_DRIVER_HOST (default 127.0.0.1; `0.0.0.0` listens on every address and
advertises this host's name), on a port the system picks. The URL and a secret made for the
run reach the API through the control plane (`Opened.views`); nothing else may read. Its
threads only read published snapshots: a lookup never waits for, nor blocks, a step, but
it shares the interpreter with the step's Python work (the benchmarks measure the cost).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import socket
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from storage_engine.errors import CorruptionError
from storage_engine.key_range import KeyRange
from storage_engine.location_view import jsonable_rows

from .connectors.view_sink import ViewSink
from .control_plane import ViewEndpoint

log = logging.getLogger(__name__)

HOST_ENV = "SPINDLE_DRIVER_HOST"
MAX_LIMIT = 10_000  # as the API's own limit


class ViewServer:
    """Serves `views` until `close`."""

    def __init__(self, views: Mapping[str, ViewSink], host: str | None = None) -> None:
        host = host or os.environ.get(HOST_ENV) or "127.0.0.1"
        self._views = dict(views)
        self._secret = secrets.token_urlsafe(32)
        self._closed = False
        self._httpd = ThreadingHTTPServer((host, 0), _handler(self))
        self._httpd.daemon_threads = True
        advertised = socket.gethostname() if host in ("0.0.0.0", "::") else host
        if ":" in advertised:
            advertised = f"[{advertised}]"
        self.endpoint = ViewEndpoint(
            f"http://{advertised}:{self._httpd.server_address[1]}", self._secret
        )
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="spindle-views", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop serving; readers on kept-alive connections are told the run is gone."""
        self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()

    def answer(self, path: str, authorization: str) -> tuple[int, dict[str, Any]]:
        """The status and JSON body for a request."""
        if not hmac.compare_digest(authorization.encode(), f"Bearer {self._secret}".encode()):
            return 401, {"message": "a view read needs the run's view secret"}
        if self._closed:
            return 410, {"message": "the run has ended"}
        url = urlsplit(path)
        parts = url.path.split("/")
        if len(parts) != 3 or parts[1] != "views":
            return 404, {"message": f"no route {url.path!r}"}
        name = unquote(parts[2])
        sink = self._views.get(name)
        if sink is None:
            return 404, {"message": f"no view {name!r}"}
        q = parse_qs(url.query, keep_blank_values=True)
        try:
            within = _range(q)
            offset = _count(q, "offset", 0, None)
            limit = _count(q, "limit", 100, MAX_LIMIT)
            got = sink.lookup(within, offset, limit)
        except ValueError as e:
            return 400, {"message": str(e)}
        except (OSError, CorruptionError) as e:
            log.warning("view %s: lookup failed: %s", name, e)
            return 503, {"message": f"the view's state cannot be read: {e}"}
        rows = jsonable_rows(got.rows)
        return 200, {"view": name, "step": got.step, "checkpoint": None, "live": True, "rows": rows}


def _range(q: Mapping[str, list[str]]) -> KeyRange | None:
    """The key range the query names; None: the whole view."""
    for bound in ("ge", "lt"):
        if len(q.get(bound, [])) > 1:
            raise ValueError(f"{bound}: give it once")
    key = tuple(q.get("key", []))
    ge, lt = q.get("ge", [None])[0], q.get("lt", [None])[0]
    if not key and ge is None and lt is None:
        return None
    return KeyRange(key, ge, lt)


def _count(q: Mapping[str, list[str]], name: str, default: int, most: int | None) -> int:
    raw = q.get(name)
    if not raw:
        return default
    if not raw[0].isdigit() or (most is not None and int(raw[0]) > most):
        raise ValueError(f"{name}: a whole number{'' if most is None else f' up to {most}'}")
    return int(raw[0])


def _handler(server: ViewServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the API's client reuses connections
        # Headers and body go out in two writes: with Nagle's algorithm the second waits
        # for the client's delayed ACK (tens of milliseconds a lookup).
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            status, body = server.answer(self.path, self.headers.get("Authorization", ""))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 410:
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a line per lookup would flood the driver's log

    return Handler


__all__ = ["HOST_ENV", "ViewServer"]
