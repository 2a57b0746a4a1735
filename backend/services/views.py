"""A view's rows: as the running pipeline holds them after its newest step (`LiveViews`,
a client of the driver's `workers.runtime.view_server`), or as a checkpoint holds them (a
`view` sink's spine): the newest, or one named by uuid, identifier or step (time travel),
and the Z-set difference between two checkpoints. Checkpoint reads are of immutable files,
never of the running pipeline, so they do not slow it; a checkpoint that retention or gc
collects while it is read is refused (`CheckpointCollected`), never answered wrongly."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.compute as pc

from storage_engine.errors import CorruptionError, StorageError
from storage_engine.key_range import KeyRange
from storage_engine.location_view import SpineContents, list_checkpoints, read_spine
from storage_engine.schema import WEIGHT

from ..errors import ApiError, InvalidInput, NotFound, StateUnavailable

log = logging.getLogger(__name__)

_MAX_ENDPOINTS = 10_000  # bounds memory against many running pipelines


class CheckpointCollected(ApiError):
    """The checkpoint a read named was collected (retention, gc) while it was read."""

    status = 410
    code = "checkpoint_collected"


def checkpoint_of(storage: Path, ref: str) -> str:
    """The checkpoint `ref` names: `latest`, a uuid or identifier, or a step (the checkpoint
    taken at that step); NotFound naming the retained ones otherwise."""
    if ref == "latest" or not ref.isdigit():
        return ref
    cps = list_checkpoints(storage).checkpoints
    for c in reversed(cps):
        if c.step == int(ref):
            return c.uuid
    steps = ", ".join(str(c.step) for c in cps[-20:]) or "none"
    raise NotFound(f"no retained checkpoint at step {ref} (the retained ones' steps: {steps})")


def read(
    storage: Path,
    view: str,
    ref: str = "latest",
    weights: bool = False,
    within: KeyRange | None = None,
) -> SpineContents | None:
    """The view's rows in checkpoint `ref` (`checkpoint_of`), or only those in key range
    `within` (values as text; found through the files' block indexes); None if there is no
    checkpoint yet, or none holding the view."""
    uuid = checkpoint_of(storage, ref)
    try:
        return read_spine(storage, f"view.{view}", uuid, weights=weights, within=within)
    except ValueError as e:  # a key value that is not of its column's type
        raise InvalidInput(str(e)) from None
    except (CorruptionError, OSError) as e:
        if ref != "latest" and not _retained(storage, uuid):
            raise CheckpointCollected(
                f"checkpoint {ref!r} was collected while it was read (retention or gc): "
                "read another retained checkpoint"
            ) from None
        raise StateUnavailable(f"the view's state cannot be read: {e}") from None
    except KeyError:  # a checkpoint without this view (taken before the view existed)
        if ref != "latest" and not _retained(storage, uuid):
            raise CheckpointCollected(
                f"checkpoint {ref!r} was collected while it was read (retention or gc): "
                "read another retained checkpoint"
            ) from None
        return None
    except StorageError:
        if ref == "latest":
            return None  # no checkpoint yet
        raise NotFound(f"no retained checkpoint {ref!r}") from None


def diff(storage: Path, view: str, a: str, b: str) -> tuple[SpineContents, SpineContents, pa.Table]:
    """The view's rows in checkpoint `b` less those in `a`: each row whose count differs,
    with the difference as `__weight` (negative: fewer in `b`)."""
    old, new = read(storage, view, a, weights=True), read(storage, view, b, weights=True)
    for ref, got in ((a, old), (b, new)):
        if got is None:
            raise NotFound(f"checkpoint {ref!r} holds no state of view {view!r}")
    assert old is not None and new is not None
    parts = [t for t in (old.rows, new.rows) if t is not None]
    if not parts:
        return old, new, pa.table({WEIGHT: pa.array([], pa.int64())})
    if old.rows is not None:
        negated = pc.negate(old.rows.column(WEIGHT))
        parts[0] = old.rows.set_column(old.rows.num_columns - 1, WEIGHT, negated)
    both = pa.concat_tables(parts)
    keys = [n for n in both.column_names if n != WEIGHT]
    summed = both.group_by(keys, use_threads=False).aggregate([(WEIGHT, "sum")])
    summed = summed.select([*keys, f"{WEIGHT}_sum"]).rename_columns([*keys, WEIGHT])
    summed = summed.filter(pc.not_equal(summed.column(WEIGHT), 0))
    return old, new, summed.sort_by([(k, "ascending") for k in keys])


@dataclass(frozen=True)
class LiveEndpoint:
    """Where a running pipeline's driver serves its views (`views`, the spec's readable
    ones), and the secret to present."""

    views: frozenset[str]
    url: str
    secret: str


class LiveViews:
    """Reads of running drivers' views, over one pooled HTTP client (connections kept
    alive between lookups). The driver's answer is a `ViewPage` document already (the API
    passes its bytes on: decoding and encoding every row again would cost more than the
    lookup). A driver that does not answer (ending, or unreachable) gives None, and the
    caller reads the newest checkpoint instead.

    Where a pipeline's driver serves is kept for `ttl_s` (the read cache's interval, as
    changes made elsewhere show after it) and for as long as the cache's write
    `generation` is unchanged, so most lookups make no database read; an endpoint that
    does not answer is forgotten at once."""

    def __init__(
        self,
        ttl_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        timeout_s: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=1.0), transport=transport
        )
        self._ttl_s, self._clock = ttl_s, clock
        self._endpoints: dict[str, tuple[float, int, LiveEndpoint]] = {}
        self._lock = threading.Lock()

    def endpoint(
        self, pipeline: str, generation: int, load: Callable[[], LiveEndpoint | None]
    ) -> LiveEndpoint | None:
        """The running pipeline's endpoint, kept or from `load` (None: it does not run)."""
        with self._lock:
            hit = self._endpoints.get(pipeline)
        if hit is not None and hit[1] == generation and self._clock() < hit[0]:
            return hit[2]
        got = load()
        with self._lock:
            if got is None or self._ttl_s <= 0:
                self._endpoints.pop(pipeline, None)
            else:
                if len(self._endpoints) >= _MAX_ENDPOINTS:
                    self._endpoints.clear()
                self._endpoints[pipeline] = (self._clock() + self._ttl_s, generation, got)
        return got

    def forget(self, pipeline: str) -> None:
        with self._lock:
            self._endpoints.pop(pipeline, None)

    def read(
        self, at: LiveEndpoint, view: str, within: KeyRange | None, offset: int, limit: int
    ) -> bytes | None:
        params: list[tuple[str, str | int | float | bool | None]] = [
            ("offset", offset),
            ("limit", limit),
        ]
        if within is not None:
            params += [("key", v) for v in within.prefix]
            params += [(n, v) for n, v in (("ge", within.ge), ("lt", within.lt)) if v is not None]
        try:
            r = self._client.get(
                f"{at.url}/views/{view}",
                params=params,
                headers={"Authorization": f"Bearer {at.secret}"},
            )
        except httpx.HTTPError as e:
            log.info("view %s: the running driver at %s did not answer: %s", view, at.url, e)
            return None
        if r.status_code == 200:
            return r.content
        body = r.json() if r.headers.get("content-type") == "application/json" else {}
        if r.status_code == 400:
            raise InvalidInput(str(body.get("message", "bad key range")))
        if r.status_code == 503:
            raise StateUnavailable(str(body.get("message", "the view's state cannot be read")))
        # 410: the run ended; 404: a run of a spec without this view; 401: a process that
        # is not the run's driver (its port was reused).
        if r.status_code != 410:
            log.warning("view %s: the driver at %s answered %s", view, at.url, r.status_code)
        return None

    def close(self) -> None:
        self._client.close()


def _retained(storage: Path, uuid: str) -> bool:
    return any(
        c.uuid == uuid or c.identifier == uuid for c in list_checkpoints(storage).checkpoints
    )


__all__ = ["CheckpointCollected", "LiveEndpoint", "LiveViews", "checkpoint_of", "diff", "read"]
