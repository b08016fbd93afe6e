#!/usr/bin/env bash
# What the test suite needs beyond Python packages: a Chromium, which the dashboard's browser tests and
# kaleido's static export of plots drive. Does nothing when `chromium` is on PATH; otherwise installs
# Debian's `chromium` package with apt-get, as root or through sudo. Nothing else.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
  exit 0
fi

need="the tests need a Chromium on PATH (the dashboard's browser tests and the static export of plots drive it)"
if ! command -v apt-get >/dev/null 2>&1; then
  echo "tests/setup.sh: $need; this machine has no apt-get: install Chromium with its package manager" >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "tests/setup.sh: $need; installing Debian's chromium needs root: run 'sudo apt-get install chromium' (or this script as root)" >&2
  exit 1
fi

echo "tests/setup.sh: installing Debian's chromium (none on PATH)" >&2
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null 2>&1 || { echo "tests/setup.sh: apt-get installed chromium but it is not on PATH" >&2; exit 1; }
