#!/usr/bin/env bash
# Builds the web console into backend/api/console/ (package data of the wheel; see
# frontend/vite.config.ts), on a fresh machine: installs Node.js and npm from Debian if
# missing, `npm ci` when package-lock.json changed since the last install, then
# `npm run build`. With --check, also runs the console's checks (stale API client, stale
# copy of the spec schema, types, unit tests) — part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/../frontend"

if ! command -v npm >/dev/null 2>&1; then
    echo "ui: installing Node.js and npm (Debian packages)" >&2
    sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y -qq nodejs npm >/dev/null
fi
stamp=node_modules/.spindle-installed
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    npm ci --no-audit --no-fund --loglevel=error
    echo "$want" > "$stamp"
fi
if [ "${1:-}" = "--check" ]; then
    npm run --silent check:api
    npm run --silent check:schema
    npm run --silent lint
    npm test --silent
fi
npm run --silent build
