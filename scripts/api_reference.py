"""Render the REST API reference (docs/api-reference.md) from the OpenAPI document.

    .venv/bin/python scripts/api_reference.py frontend/openapi.json > docs/api-reference.md

`scripts/gen-api-client.sh` runs it with the client generation (`npm run gen:api`), and
`tests/backend/test_docs.py` fails when the committed page differs from what the committed
document renders to: the reference cannot drift from the routes and schemas.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

METHODS = ("get", "post", "put", "patch", "delete")
HEADER = """# REST API reference

Generated from the OpenAPI document (`/api/v1/openapi.json`, committed as
`frontend/openapi.json`) by `scripts/api_reference.py`; do not edit by hand (`npm run gen:api`
in `frontend/` regenerates it). The guide with roles, errors and worked examples is
[api.md](api.md).

Every route but `/healthz` and `/readyz` needs `Authorization: Bearer <token>`. What each
error status means is in [api.md](api.md#errors).
"""


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def type_of(schema: dict[str, Any]) -> str:
    """A short, readable type: `PipelineOut`, `list[CheckpointOut]`, `int ≥ 1`, ..."""
    if "$ref" in schema:
        return f"[{_ref_name(schema['$ref'])}](#{_ref_name(schema['$ref']).lower()})"
    for combo in ("anyOf", "oneOf"):
        if combo in schema:
            return " | ".join(type_of(s) for s in schema[combo])
    if "enum" in schema:
        return " | ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    t = schema.get("type")
    if t == "array":
        return f"list[{type_of(schema.get('items', {}))}]"
    if t == "object":
        extra = schema.get("additionalProperties")
        return f"map[str, {type_of(extra)}]" if isinstance(extra, dict) else "object"
    name = {"integer": "int", "number": "float", "string": "str", "boolean": "bool"}.get(
        str(t), str(t or "any")
    )
    bounds = []
    for key, sign in (
        ("minimum", "≥"),
        ("exclusiveMinimum", ">"),
        ("maximum", "≤"),
        ("exclusiveMaximum", "<"),
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
    ):
        if key in schema:
            bounds.append(f"{sign} {schema[key]}")
    if "pattern" in schema:
        bounds.append(f"matching `{schema['pattern']}`")
    if schema.get("format"):
        name += f" ({schema['format']})"
    return name + (" " + ", ".join(bounds) if bounds else "")


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _body_schema(content: dict[str, Any]) -> str:
    parts = []
    for media, spec in sorted(content.items()):
        schema = spec.get("schema", {})
        parts.append(f"`{media}`" + (f": {type_of(schema)}" if schema else ""))
    return "; ".join(parts)


def render_operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    out = [f"### `{method.upper()} {path}`", ""]
    text = (op.get("description") or "").strip()  # FastAPI's summaries are function names
    if text:
        out += [text, ""]
    params = op.get("parameters", [])
    if params:
        out += ["| parameter | in | type | required | default | description |"]
        out += ["| --- | --- | --- | --- | --- | --- |"]
        for p in params:
            schema = p.get("schema", {})
            default = schema.get("default")
            out.append(
                f"| `{p['name']}` | {p['in']} | {_cell(type_of(schema))} | "
                f"{'yes' if p.get('required') else 'no'} | "
                f"{'' if default is None else f'`{json.dumps(default)}`'} | "
                f"{_cell(p.get('description', ''))} |"
            )
        out.append("")
    body = op.get("requestBody")
    if body:
        out += [f"Body: {_body_schema(body.get('content', {}))}", ""]
    responses = sorted(op.get("responses", {}).items())
    errors = [st for st, r in responses if _is_error_body(r)]
    out += ["| status | body | meaning |", "| --- | --- | --- |"]
    for status, resp in responses:
        if status in errors:
            continue
        content = resp.get("content", {})
        out.append(
            f"| {status} | {_cell(_body_schema(content)) if content else ''} | "
            f"{_cell(resp.get('description', ''))} |"
        )
    out.append("")
    if errors:
        out += [f"Errors ([ErrorOut](#errorout)): {', '.join(errors)}.", ""]
    return out


def _is_error_body(resp: dict[str, Any]) -> bool:
    schema = resp.get("content", {}).get("application/json", {}).get("schema", {})
    return _ref_name(str(schema.get("$ref", ""))) == "ErrorOut"


def render_schema(name: str, schema: dict[str, Any]) -> list[str]:
    out = [f"### {name}", ""]
    if schema.get("description"):
        out += [schema["description"].strip(), ""]
    if "enum" in schema:
        return [*out, "One of " + ", ".join(f"`{json.dumps(v)}`" for v in schema["enum"]), ""]
    props = schema.get("properties", {})
    if not props:
        return [*out, f"Type: {type_of(schema)}", ""]
    required = set(schema.get("required", []))
    out += ["| field | type | required | description |", "| --- | --- | --- | --- |"]
    for field, spec in props.items():
        out.append(
            f"| `{field}` | {_cell(type_of(spec))} | {'yes' if field in required else 'no'} | "
            f"{_cell(spec.get('description', ''))} |"
        )
    out.append("")
    return out


def render(doc: dict[str, Any]) -> str:
    lines = [HEADER, "## Routes", ""]
    for path, item in sorted(doc["paths"].items()):
        for method in METHODS:
            if method in item:
                lines += render_operation(method, path, item[method])
    lines += ["## Schemas", ""]
    for name, schema in sorted(doc.get("components", {}).get("schemas", {}).items()):
        lines += render_schema(name, schema)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: api_reference.py OPENAPI_JSON", file=sys.stderr)
        return 2
    sys.stdout.write(render(json.loads(Path(argv[0]).read_text(encoding="utf-8"))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
