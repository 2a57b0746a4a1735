"""Print the API's OpenAPI document as JSON (sorted keys, so the output is deterministic).

No server, database file or broker is needed: the app is built over an in-memory SQLite
database and a queue that does nothing. `scripts/gen-api-client.sh` turns the output into
the web console's typed client (frontend/src/api/schema.d.ts).

    .venv/bin/python scripts/openapi.py > frontend/openapi.json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class _NoQueue:
    """A TaskQueue that never runs anything: only the routes' shapes matter here."""

    def launch(self, run_id: int) -> None:
        pass

    def execute(self, operation_id: str) -> None:
        pass

    def reap(self, delay_s: float = 0.0) -> None:
        pass

    def ready(self) -> str:
        return "ok"


def main() -> None:
    # Settings read SPINDLE_* from the environment; none of them changes the document,
    # but CORS origins or a data dir must not make it depend on the caller's shell.
    for k in [k for k in os.environ if k.startswith("SPINDLE_")]:
        del os.environ[k]
    from backend.api.app import create_app
    from backend.db import Database
    from backend.settings import Settings

    app = create_app(Settings(), Database("sqlite://"), _NoQueue())
    json.dump(app.openapi(), sys.stdout, indent=2, sort_keys=True, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
