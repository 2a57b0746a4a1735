"""The REST API: auth, roles and API tokens. Over a real metadata database, each test on SQLite and
on PostgreSQL; no Spark and no Celery (the TaskQueue is a recording double), storage locations
built with the engine itself (conftest.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from backend.models import (
    ApiToken,
    Role,
)
from backend.services import tokens

from ..api_fixtures import (
    CLICKS,
    Api,
    asgi_request,
    clicks_spec,
    error,
    fill,
    protected_endpoints,
)

pytestmark = pytest.mark.timeout(120)


def test_every_route_but_health_needs_a_valid_token(api: Api) -> None:
    endpoints = protected_endpoints(api.app)
    assert len(endpoints) >= 25  # every row of the API table, not an empty walk
    assert ("POST", "/api/v1/pipelines/{name}/ingest/{stream}") in endpoints
    assert ("GET", "/metrics") in endpoints
    bad_credentials: list[dict[str, str]] = [
        {},
        {"Authorization": "Bearer spd_not-a-token"},
        {"Authorization": f"Basic {api.admin}"},
        {"Authorization": "Bearer "},
    ]
    for method, template in endpoints:
        path = fill(template)
        for headers in bad_credentials:
            r = api.request(method, path, token=None, headers=headers)
            body = error(r, 401, "unauthorized")
            assert r.headers["www-authenticate"] == "Bearer", (method, path)
            assert set(body) == {"code", "message", "errors", "details"}
    for path in ("/healthz", "/readyz"):
        assert api.get(path, token=None).status_code == 200
    # The docs stay public.
    assert api.get("/api/v1/openapi.json", token=None).status_code == 200


def test_roles(api: Api) -> None:
    viewer = api.token(Role.viewer)
    operator = api.token(Role.operator)
    body = {"spec": clicks_spec()}
    assert api.get("pipelines", token=viewer).status_code == 200
    assert api.post("pipelines/validate", token=viewer, json=body).status_code == 200
    error(api.post("pipelines", token=viewer, json=body), 403, "forbidden")
    for method in ("GET", "POST"):
        kw: dict[str, Any] = {"json": {"name": "x", "role": "viewer"}} if method == "POST" else {}
        error(api.request(method, "tokens", token=viewer, **kw), 403, "forbidden")
        error(api.request(method, "tokens", token=operator, **kw), 403, "forbidden")
    error(api.delete("tokens/1", token=operator), 403, "forbidden")

    assert api.post("pipelines", token=operator, json=body).status_code == 201
    error(api.post(f"pipelines/{CLICKS}/start", token=viewer), 403, "forbidden")
    error(api.delete(f"pipelines/{CLICKS}", token=operator), 403, "forbidden")
    assert api.get(f"pipelines/{CLICKS}", token=operator).status_code == 200
    assert api.delete(f"pipelines/{CLICKS}").status_code == 204
    assert api.get("tokens").status_code == 200


def test_tokens_show_the_secret_once_and_never_list_it(api: Api) -> None:
    r = api.post("tokens", json={"name": "ci", "role": "operator"})
    assert r.status_code == 201, r.text
    created = r.json()
    secret = created["token"]
    assert secret.startswith("spd_") and len(secret) > 40
    assert created["prefix"] == secret[:12]
    assert created["role"] == "operator" and created["name"] == "ci"
    # It works, with its role.
    assert api.post("pipelines", token=secret, json={"spec": clicks_spec()}).status_code == 201
    error(api.get("tokens", token=secret), 403, "forbidden")

    listing = api.get("tokens")
    assert listing.status_code == 200
    rows = listing.json()
    assert [t["name"] for t in rows] == ["admin", "ci"]
    for t in rows:
        assert set(t) == {"id", "name", "role", "prefix", "created_at", "last_used_at"}
    for s in (secret, api.admin):
        assert s not in listing.text
        assert tokens.digest(s) not in listing.text
    # Using a token records it.
    ci = next(t for t in rows if t["name"] == "ci")
    assert ci["last_used_at"] is not None

    error(api.post("tokens", json={"name": "", "role": "viewer"}), 422, "invalid_request")
    error(api.post("tokens", json={"name": "x", "role": "root"}), 422, "invalid_request")


def test_deleting_tokens(api: Api) -> None:
    ids = {t["name"]: t["id"] for t in api.get("tokens").json()}
    body = error(api.delete(f"tokens/{ids['admin']}"), 409, "conflict")
    assert "last admin" in body["message"]
    second = api.post("tokens", json={"name": "admin-2", "role": "admin"}).json()
    viewer = api.post("tokens", json={"name": "viewer", "role": "viewer"}).json()
    assert api.get("pipelines", token=viewer["token"]).status_code == 200
    assert api.delete(f"tokens/{viewer['id']}").status_code == 204
    error(api.get("pipelines", token=viewer["token"]), 401, "unauthorized")
    # An admin may remove the other admin, then is the last one.
    assert api.delete(f"tokens/{second['id']}").status_code == 204
    error(api.get("pipelines", token=second["token"]), 401, "unauthorized")
    error(api.delete(f"tokens/{ids['admin']}"), 409, "conflict")
    error(api.delete("tokens/99999"), 404, "not_found")
    assert [t["name"] for t in api.get("tokens").json()] == ["admin"]


def test_a_token_revoked_by_another_api_process_works_until_its_cache_entry_expires(
    api: Api,
) -> None:
    now = [1000.0]
    api.app.state.ctx.tokens = tokens.TokenCache(5.0, clock=lambda: now[0])
    viewer = api.post("tokens", json={"name": "viewer", "role": "viewer"}).json()
    assert api.get("pipelines", token=viewer["token"]).status_code == 200
    # Another API process revokes it: this one's cache does not know yet.
    with api.db.session() as s:
        s.delete(s.get(ApiToken, viewer["id"]))
    now[0] += 4.9
    assert api.get("pipelines", token=viewer["token"]).status_code == 200
    now[0] += 0.2
    error(api.get("pipelines", token=viewer["token"]), 401, "unauthorized")
    # A cached answer keeps its role: a viewer is still refused a write.
    other = api.post("tokens", json={"name": "viewer-2", "role": "viewer"}).json()
    assert api.get("pipelines", token=other["token"]).status_code == 200
    error(
        api.post("tokens", token=other["token"], json={"name": "x", "role": "admin"}),
        403,
        "forbidden",
    )


def test_a_write_is_committed_before_the_response_is_sent(api: Api) -> None:
    victim = api.post("tokens", json={"name": "victim", "role": "viewer"}).json()
    seen: dict[str, bool] = {}

    def at_response() -> None:
        with api.db.session() as s:
            seen["row_still_there"] = s.get(ApiToken, victim["id"]) is not None

    status = asgi_request(
        api.app, "DELETE", f"/api/v1/tokens/{victim['id']}", api.auth(), at_response
    )
    assert status == 204
    assert seen == {"row_still_there": False}


def _documented_roles() -> dict[tuple[str, str], str]:
    """docs/api.md's Routes table: each (method, path) a row names, and its `role` cell's
    role for it (one for the row, or one per route in the order the row names them). A
    row's bare methods (`GET`, `PUT`, `DELETE /path`) share the path after them; a bare
    path (`/a`, `/b`) takes the method before it."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "api.md").read_text()
    table = text.split("## Routes", 1)[1].split("\n## ", 1)[0]
    out: dict[tuple[str, str], str] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        routes: list[tuple[str, str]] = []
        pending: list[str] = []
        method = ""
        for item in re.findall(r"`([^`]+)`", cells[0]):
            parts = item.split()
            if len(parts) == 1 and parts[0].isupper():
                pending.append(parts[0])
                continue
            if len(parts) == 2:
                method, path = parts
                routes += [(m, path) for m in pending]
                pending = []
            else:
                path = parts[0]
            routes.append((method, path))
        roles = [r.strip() for r in cells[2].split(",")]
        if len(roles) == 1:
            roles *= len(routes)
        assert len(roles) == len(routes), f"docs/api.md: {cells[0]}: roles {roles}"
        out.update(zip(routes, roles, strict=True))
    return out


def _enforced_role(api: Api, method: str, path: str, viewer: str) -> str:
    """The role a route asks for, as the app answers no token and a viewer's token."""
    r = api.request(method, path, token=None)
    if r.status_code != 401:
        return "none"
    if "run token" in r.json()["message"]:
        return "run token"
    r = api.request(method, path, token=viewer)
    if r.status_code != 403:
        return "viewer"
    needs = re.search(r"needs the (\w+) role", r.json()["message"])
    assert needs is not None, (method, path, r.text)
    return needs.group(1)


def test_the_api_page_gives_each_route_the_role_it_needs(api: Api) -> None:
    """Every route the app serves is in docs/api.md's Routes table, with the role the app
    enforces for it, and the table names no route the app does not serve."""
    documented = _documented_roles()
    viewer = api.token(Role.viewer)
    served = {
        (m, t): _enforced_role(api, m, fill(t), viewer) for m, t in protected_endpoints(api.app)
    }
    for path in ("/healthz", "/readyz"):
        served[("GET", path)] = "none"
    assert documented == served
