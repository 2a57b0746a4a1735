#!/usr/bin/env bash
# Regenerates the web console's typed API client from the backend's OpenAPI document:
#   frontend/openapi.json        (scripts/openapi.py: no server needed)
#   frontend/src/api/schema.d.ts (openapi-typescript, from frontend/node_modules)
#   docs/api-reference.md        (scripts/api_reference.py: the REST reference page)
# With --check, writes both into a temporary directory instead and fails when either
# differs from the committed files (a stale client). Used by `npm run gen:api` and
# `npm run check:api` in frontend/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
fe="$root/frontend"
py="${PYTHON:-$root/.venv/bin/python}"
[ -x "$py" ] || py=python3

check=0
case "${1:-}" in
    --check) check=1 ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

if [ ! -x "$fe/node_modules/.bin/openapi-typescript" ]; then
    echo "gen-api-client: run 'npm ci' in frontend/ first" >&2
    exit 1
fi

out_json="$fe/openapi.json"
out_ts="$fe/src/api/schema.d.ts"
out_md="$root/docs/api-reference.md"
if [ "$check" = 1 ]; then
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    out_json="$tmp/openapi.json"
    out_ts="$tmp/schema.d.ts"
    out_md="$tmp/api-reference.md"
fi

(cd "$root" && "$py" scripts/openapi.py) > "$out_json.tmp"
mv "$out_json.tmp" "$out_json"
mkdir -p "$(dirname "$out_ts")"
(cd "$fe" && npx --no-install openapi-typescript "$out_json" --output "$out_ts" >/dev/null)
"$py" "$root/scripts/api_reference.py" "$out_json" > "$out_md.tmp"
mv "$out_md.tmp" "$out_md"

if [ "$check" = 1 ]; then
    stale=0
    for pair in "$out_json:$fe/openapi.json" "$out_ts:$fe/src/api/schema.d.ts" \
        "$out_md:$root/docs/api-reference.md"; do
        new="${pair%%:*}" old="${pair#*:}"
        if ! cmp -s "$new" "$old"; then
            echo "gen-api-client: ${old#"$root"/} is stale; run 'npm run gen:api' in frontend/" >&2
            diff -u "$old" "$new" | head -40 >&2 || true
            stale=1
        fi
    done
    [ "$stale" = 0 ] && echo "API client is up to date"
    exit "$stale"
fi
echo "wrote ${fe#"$root"/}/openapi.json, ${fe#"$root"/}/src/api/schema.d.ts and docs/api-reference.md"
