"""PostgreSQL CDC (issue 52) against a real PostgreSQL the test starts with
`wal_level=logical`: customers and orders, with rows before the pipeline's first run (the
snapshot) and transactions of inserts, updates and deletes written while the driver runs.
A join and an aggregate over both tables go to a Postgres table sink. The driver (a real
process) is SIGKILLed at random moments, restarted from its latest checkpoint, and once
restored to an older checkpoint; after the writes stop and a last run catches up, the sink
table equals the same query run on the source tables themselves."""

from __future__ import annotations

import json
import random
import threading
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from local_servers.postgres import PostgresServer
from storage_engine import StorageLocation
from workers.runtime.connectors.pgoutput import lsn_int

from .test_exactly_once import run, start_run

QUERY = """
  SELECT c.city, count(*) AS orders, sum(o.amount) AS total
  FROM orders o JOIN customers c ON o.customer = c.id
  GROUP BY c.city
"""


def libpq(pg: PostgresServer, db: str) -> str:
    return f"host=127.0.0.1 port={pg.port} user=postgres dbname={db}"


def spec(tmp: Path, source: str, sink: str) -> Path:
    p = tmp / "spec.yaml"
    tables = "\n".join(
        f"""  - {{kind: postgres_cdc, table: {t}, dsn: "{source}", source_table: {t},
     schema: {schema}, key: [id], slot: cdc_{t}, max_changes_per_step: 25}}"""
        for t, schema in (
            ("customers", "{id: bigint, name: string, city: string}"),
            ("orders", "{id: bigint, customer: bigint, amount: 'decimal(10,2)'}"),
        )
    )
    p.write_text(
        f"""
name: postgres-cdc
tables:
{tables}
sql: |
  CREATE VIEW per_city AS {QUERY.strip()}
sinks:
  - {{name: pg, kind: postgres, from: per_city, dsn: "{sink}", table: per_city, mode: table,
     key: [city]}}
checkpoint: {{every_steps: 2}}
retention: {{keep_last: 4}}
trigger: {{interval: 100ms}}
"""
    )
    return p


class Writer:
    """Random transactions of inserts, updates and deletes on the source tables."""

    def __init__(self, dsn: str, seed: int) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.rng = random.Random(seed)
        self.next_order = 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def transaction(self) -> None:
        rng = self.rng
        with self.conn.transaction():
            for _ in range(rng.randint(1, 4)):
                r = rng.random()
                c = rng.randint(0, 29)
                if r < 0.3:
                    self.conn.execute(
                        "INSERT INTO orders VALUES (%s, %s, %s)",
                        (self.next_order, c, Decimal(rng.randint(100, 99999)) / 100),
                    )
                    self.next_order += 1
                elif r < 0.5:
                    self.conn.execute(
                        "UPDATE orders SET amount = amount + 1, customer = %s WHERE id IN "
                        "(SELECT id FROM orders ORDER BY random() LIMIT 2)",
                        (c,),
                    )
                elif r < 0.6:
                    self.conn.execute(
                        "DELETE FROM orders WHERE id IN "
                        "(SELECT id FROM orders ORDER BY random() LIMIT 1)"
                    )
                elif r < 0.8:
                    self.conn.execute(
                        "INSERT INTO customers VALUES (%s, %s, %s) ON CONFLICT (id) DO UPDATE "
                        "SET city = EXCLUDED.city",
                        (c, f"n{c}", rng.choice(["lyon", "oslo", "rome", "nice"])),
                    )
                else:
                    self.conn.execute("DELETE FROM customers WHERE id = %s", (c,))

    def start(self) -> None:
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(0.02):
                self.transaction()

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def _checkpoints(state: Path) -> list[Any]:
    loc = StorageLocation.open(str(state), checkpoint="none")
    try:
        return list(loc.list_checkpoints())
    finally:
        loc.close()


def _norm(rows: list[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    return Counter(
        (city, int(n), Decimal(total).quantize(Decimal("0.01"))) for city, n, total in rows
    )


@pytest.mark.timeout(900)
def test_cdc_through_kills_and_a_restore_equals_the_source_query(
    tmp_path: Path, logical_pg: PostgresServer
) -> None:
    shop, out = f"shop_{uuid.uuid4().hex[:8]}", f"sink_{uuid.uuid4().hex[:8]}"
    logical_pg.create_database(shop)
    logical_pg.create_database(out)
    source, sink = libpq(logical_pg, shop), libpq(logical_pg, out)
    with psycopg.connect(source, autocommit=True) as c:
        c.execute("CREATE TABLE customers (id bigint PRIMARY KEY, name text, city text)")
        c.execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer bigint, amount numeric(10,2))"
        )
        c.execute(
            "INSERT INTO customers SELECT i, 'n' || i, (ARRAY['lyon','oslo','rome'])[i % 3 + 1] "
            "FROM generate_series(0, 19) i"
        )
        c.execute("INSERT INTO orders SELECT i, i % 25, i * 1.25 FROM generate_series(0, 79) i")
    spec_path = spec(tmp_path, source, sink)
    writer = Writer(source, seed=7)
    rng = random.Random(3)

    writer.start()
    try:
        killed = 0
        for k in (2, 3):
            killed += run(tmp_path, spec_path, rng.uniform(0.0, 1.0), after_steps=k) is None
        assert killed == 2, "the writes go on: every run is killed"
        older = _checkpoints(tmp_path / "state")
        assert len(older) >= 2
        # A restore to an older checkpoint (not the newest), then more kills.
        target = older[-2].uuid
        assert (
            run(
                tmp_path,
                spec_path,
                rng.uniform(0.5, 1.5),
                "--from-checkpoint",
                target,
                after_steps=2,
            )
            is None
        )
        run(tmp_path, spec_path, rng.uniform(0.0, 1.0), after_steps=3)
    finally:
        writer.stop()
    run(tmp_path, spec_path, kill_after=None)  # catches up, then stops once idle

    with psycopg.connect(source) as c:
        want = _norm(c.execute(QUERY).fetchall())
        changed = c.execute("SELECT count(*) FROM orders WHERE id >= 1000").fetchone()
    with psycopg.connect(sink) as c:
        got = _norm(c.execute("SELECT city, orders, total FROM per_city").fetchall())
    assert changed is not None and changed[0] > 0, "the writer wrote while the runs ran"
    assert want and got == want
    # The slots advanced only to what the oldest kept checkpoint read.
    with psycopg.connect(source) as c:
        slots = dict(
            c.execute(
                "SELECT slot_name, confirmed_flush_lsn::text FROM pg_replication_slots "
                "WHERE database = current_database()"  # the server is the session's
            ).fetchall()
        )
    assert set(slots) == {"cdc_customers", "cdc_orders"}
    for table in ("customers", "orders"):
        meta = json.loads((tmp_path / "state" / "cdc" / table / "snapshot.json").read_text())
        assert lsn_int(slots[f"cdc_{table}"]) > meta["lsn"], "released below the oldest kept"


def test_a_slot_past_the_checkpoint_fails_the_run(
    tmp_path: Path, logical_pg: PostgresServer
) -> None:
    shop = f"shop_{uuid.uuid4().hex[:8]}"
    logical_pg.create_database(shop)
    source = libpq(logical_pg, shop)
    with psycopg.connect(source, autocommit=True) as c:
        c.execute("CREATE TABLE customers (id bigint PRIMARY KEY, name text, city text)")
        c.execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer bigint, amount numeric(10,2))"
        )
        c.execute("INSERT INTO customers VALUES (1, 'ada', 'lyon')")
        c.execute("INSERT INTO orders VALUES (1, 1, 2.50)")
    text = spec(tmp_path, source, source).read_text().replace("cdc_", "cdc2_")
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(text)
    run(tmp_path, spec_path, kill_after=None)
    with psycopg.connect(source, autocommit=True) as c:
        c.execute("UPDATE customers SET city = 'rome'")
        c.execute("SELECT pg_replication_slot_advance('cdc2_customers', pg_current_wal_lsn())")
    p = start_run(tmp_path, spec_path, "--stop-when-idle", "2")
    assert p.wait(timeout=300) != 0
    err = (tmp_path / "run.err").read_text()
    assert "slot 'cdc2_customers'" in err and "the changes between are gone" in err, err[-2000:]
