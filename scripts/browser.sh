#!/usr/bin/env bash
# The browser the e2e suite drives (e2e/): Debian's chromium at /usr/bin/chromium.
# Playwright's own browser downloads are not used.
set -euo pipefail

if ! command -v chromium >/dev/null; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
