"""Fuzz the live API with schemathesis, every phase, against a real `python -m backend serve`
(API, Celery worker and beat) on a fresh data directory:

    .venv/bin/python scripts/fuzz_api.py [--max-examples N] [--workers W]

Registers the two example pipelines (one of them with an ingest stream) so generated requests
reach real pipelines, runs `schemathesis run` with the examples, coverage, fuzzing and
stateful phases and the checks `not_a_server_error`, `status_code_conformance` and
`response_schema_conformance`, then checks that the server is still alive and healthy.
Prints a JSON summary (requests sent, failures, the server's fate) and exits 1 on any
failure. The suite runs a shorter, in-process version (tests/backend/test_schemathesis.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ["clicks-per-user", "ingest-log"]
SSE = "/api/v1/pipelines/{name}/metrics/stream"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-examples", type=int, default=300, help="per operation and phase")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    data = Path(tempfile.mkdtemp(prefix="spindle-fuzz-"))
    port, token = _free_port(), "spd_" + secrets.token_urlsafe(32)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPINDLE_")}
    env.update(SPINDLE_ADMIN_TOKEN=token, PYTHONPATH=str(ROOT))
    log = (data / "serve.log").open("w")
    serve = subprocess.Popen(
        [sys.executable, "-m", "backend", "serve", "--data-dir", str(data), "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {token}"}
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if serve.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"serve did not start: {(data / 'serve.log').read_text()}")
            time.sleep(0.5)
        for name in EXAMPLES:
            spec = yaml.safe_load((ROOT / "docs" / "examples" / f"{name}.yaml").read_text())
            r = httpx.post(f"{url}/api/v1/pipelines", json={"spec": spec}, headers=auth)
            assert r.status_code == 201, r.text
        started = time.monotonic()
        run = subprocess.run(
            [
                str(ROOT / ".venv" / "bin" / "schemathesis"),
                "run",
                f"{url}/api/v1/openapi.json",
                "--phases",
                "examples,coverage,fuzzing,stateful",
                "--max-examples",
                str(args.max_examples),
                "--workers",
                str(args.workers),
                "--checks",
                "not_a_server_error,status_code_conformance,response_schema_conformance",
                "--continue-on-failure",
                # The event stream never ends; revoking tokens would revoke the one used
                # here (both are fuzzed in-process by tests/backend/test_schemathesis.py).
                "--exclude-name",
                f"GET {SSE}",
                "--exclude-name",
                "DELETE /api/v1/tokens/{token_id}",
                "--generation-database",
                "none",
                "--generation-with-security-parameters",
                "false",
                "--seed",
                "20261127",
                "-H",
                f"Authorization: Bearer {token}",
            ],
            capture_output=True,
            text=True,
        )
        seconds = time.monotonic() - started
        out = run.stdout + run.stderr
        alive = serve.poll() is None
        healthy = alive and httpx.get(f"{url}/healthz", timeout=5).status_code == 200
        cases = re.search(r"(\d+) generated, (.*)", out)
        found = re.findall(r"(\d+) (passed|failed)", cases[2]) if cases else []
        counts = {k: int(n) for n, k in found}
        errors = re.search(r"(\d+) errors?, ", out)
        summary = {
            "requests": int(cases[1]) if cases else None,
            "passed": counts.get("passed", 0),
            "failed": counts.get("failed", 0),
            # Schemathesis's own errors (its generator failing on a schema), not the API's.
            "schemathesis_errors": int(errors[1]) if errors else 0,
            "seconds": round(seconds, 1),
            "server_alive": alive,
            "server_healthy": healthy,
        }
        print(json.dumps(summary, indent=1))
        ok = cases is not None and summary["failed"] == 0 and healthy
        if not ok:
            print(out[-6000:], file=sys.stderr)
        return 0 if ok else 1
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)


if __name__ == "__main__":
    raise SystemExit(main())
