"""The `delta` sink: a view's changes, or its current contents, in a Delta Lake table
(delta-rs), one Delta commit per step, in a local directory or under `s3://bucket/prefix`
(the object store's endpoint and credentials: `SPINDLE_S3_*`).

- `append`: the change log, the view's columns plus `__weight` and `__step`, appended.
- `table`: the view's current contents, merged on `key`: a key whose row was retracted and
  not replaced is deleted, a key with a new row is updated or inserted.

Each commit carries the application transaction `(spindle:<pipeline>/<sink>, step)` (Delta's
idempotent-writer id: `DeltaTable.transaction_version` tells a reader, or a restarted run,
the last step written) and the commit metadata `spindle.sink` and `spindle.step`. A
rollback to step C restores the table (Delta RESTORE, a new commit) to its version after the
last commit of step C or earlier, so the table's history is the undo log: a VACUUM that
removes files of versions a rollback may go back to (the oldest checkpoint's step) makes
that rollback fail, naming the version. A table has one writing sink: a table whose last
Spindle commit is another sink's is refused.
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa

from pipeline_spec.model import DeltaSink as DeltaSinkSpec
from pipeline_spec.model import is_object_path
from storage_engine.objstore import ObjectStoreSettings
from storage_engine.schema import WEIGHT

from ..keyed_changes import KeyBroken, keyed_changes
from .sink import SinkConflictError, SinkContext, SinkError

STEP_COLUMN = "__step"
_OP = "__op"  # the merge source's: upsert or delete


def storage_options(path: str) -> dict[str, str]:
    """delta-rs's options for an `s3://bucket/...` table: the object store's endpoint and
    credentials (`SPINDLE_S3_*`, as the checkpoint tier's)."""
    bucket = path[len("s3://") :].split("/", 1)[0]
    s3 = ObjectStoreSettings(bucket=bucket)
    scheme = "https" if s3.secure else "http"
    return {
        "AWS_ENDPOINT_URL": f"{scheme}://{s3.endpoint}",
        "AWS_ACCESS_KEY_ID": s3.access_key,
        "AWS_SECRET_ACCESS_KEY": s3.secret_key.get_secret_value(),
        "AWS_REGION": s3.region or "us-east-1",
        "AWS_ALLOW_HTTP": "false" if s3.secure else "true",
    }


class DeltaSink:
    rolls_back = True

    def __init__(
        self, spec: DeltaSinkSpec, schema: pa.Schema, pipeline: str, base_dir: str = "."
    ) -> None:
        from deltalake import DeltaTable

        self.name = spec.name
        self.mode = spec.mode
        self.key = list(spec.key)
        missing = [k for k in self.key if k not in schema.names]
        if missing:
            raise ValueError(
                f"sink {spec.name!r}: key column(s) {', '.join(missing)} not in the view's "
                f"columns ({', '.join(schema.names)})"
            )
        self.app = f"spindle:{pipeline}/{spec.name}"
        self.storage: dict[str, str] | None = None
        if is_object_path(spec.path):
            self.path = spec.path
            self.storage = storage_options(spec.path)
        else:
            os.makedirs(os.path.join(base_dir, spec.path), exist_ok=True)
            # Resolved once, as opened (and checked against the file roots), as `files` does.
            self.path = os.path.realpath(os.path.join(base_dir, spec.path))
        self.columns = list(schema.names)
        fields = list(schema)
        if self.mode == "append":
            fields += [pa.field(WEIGHT, pa.int64()), pa.field(STEP_COLUMN, pa.int64())]
        self.schema = pa.schema(fields)
        if not DeltaTable.is_deltatable(self.path, storage_options=self.storage):
            DeltaTable.create(
                self.path,
                schema=self.schema,
                storage_options=self.storage,
                commit_properties=self._commit(0),
            )
            return
        table = self._table()
        have = [f.name for f in table.schema().fields]
        if have != self.schema.names:
            raise ValueError(
                f"sink {spec.name!r}: the Delta table at {self.path} has columns "
                f"{', '.join(have)}, the sink writes {', '.join(self.schema.names)}"
            )
        owner = next((h["spindle.sink"] for h in table.history() if "spindle.sink" in h), None)
        if owner is not None and owner != self.app:
            raise SinkConflictError(
                f"the Delta table at {self.path} is written by {owner}; a table takes one "
                "sink's rows: pick another path"
            )

    def _table(self) -> Any:
        from deltalake import DeltaTable

        return DeltaTable(self.path, storage_options=self.storage)

    def _commit(self, step: int) -> Any:
        from deltalake import CommitProperties, Transaction

        return CommitProperties(
            custom_metadata={"spindle.sink": self.app, "spindle.step": str(step)},
            app_transactions=[Transaction(app_id=self.app, version=step)],
        )

    def last_step(self) -> int:
        return self._table().transaction_version(self.app) or 0

    def rollback(self, step: int) -> None:
        """Restore the table to its version after step `step` (no commit if it is there)."""
        table = self._table()
        last = table.transaction_version(self.app)
        if last is None or last <= step:
            return
        for h in table.history():  # newest first
            if h.get("spindle.sink") == self.app and int(h["spindle.step"]) <= step:
                try:
                    table.restore(h["version"], commit_properties=self._commit(step))
                except Exception as e:
                    raise SinkError(
                        f"sink {self.name!r}: cannot restore the Delta table at {self.path} to "
                        f"version {h['version']} (step {step}): {e}"
                    ) from e
                return
        raise SinkError(
            f"sink {self.name!r}: the Delta table at {self.path} keeps no version of step "
            f"{step} or earlier to roll back to (its log was cleaned up)"
        )

    def write(self, step: int, delta: pa.Table) -> None:
        from deltalake import write_deltalake

        if delta.num_rows == 0:
            return
        table = self._table()
        last = table.transaction_version(self.app)
        if last is not None and last >= step:
            return  # committed before a crash; replay gives the step the same output
        if self.mode == "append":
            rows = delta.select(self.columns).append_column(WEIGHT, delta[WEIGHT].cast(pa.int64()))
            rows = rows.append_column(STEP_COLUMN, pa.array([step] * rows.num_rows, pa.int64()))
            write_deltalake(
                table, rows.cast(self.schema), mode="append", commit_properties=self._commit(step)
            )
            return
        source = self._merge_source(step, delta)
        if source.num_rows == 0:
            return
        names = [k.replace("`", "``") for k in self.key]
        on = " AND ".join(f"(t.`{k}` IS NOT DISTINCT FROM s.`{k}`)" for k in names)
        (
            table.merge(
                source,
                on,
                source_alias="s",
                target_alias="t",
                commit_properties=self._commit(step),
            )
            .when_matched_delete(predicate=f"s.{_OP} = 'delete'")
            .when_matched_update_all(predicate=f"s.{_OP} = 'upsert'", except_cols=[_OP])
            .when_not_matched_insert_all(predicate=f"s.{_OP} = 'upsert'", except_cols=[_OP])
            .execute()
        )

    def _merge_source(self, step: int, delta: pa.Table) -> pa.Table:
        """One row per changed key: its new row (`upsert`), or its old one (`delete`)."""
        try:
            changes = keyed_changes(delta, self.columns, self.key)
        except KeyBroken as e:
            raise SinkError(
                f"sink {self.name!r}, step {step}: key {e.key} of the Delta table at "
                f"{self.path}: {e}; table mode needs a key that identifies one row of the view"
            ) from None
        rows = [c.new or c.old for c in changes]
        ops = pa.array(["upsert" if c.new else "delete" for c in changes], pa.string())
        return pa.Table.from_pylist(rows, schema=self.schema).append_column(_OP, ops)

    def sync(self) -> None:
        pass  # each step is one Delta commit

    def forget_through(self, step: int) -> None:
        pass  # the table's history is the undo log; VACUUM is the table owner's

    def close(self) -> None:
        pass


def open_sink(spec: DeltaSinkSpec, ctx: SinkContext) -> DeltaSink:
    return DeltaSink(spec, ctx.schema, ctx.pipeline, ctx.base_dir)


__all__ = ["STEP_COLUMN", "DeltaSink", "open_sink"]
