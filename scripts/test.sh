#!/usr/bin/env bash
# The whole test suite, from a fresh machine: set-up, framework venvs, lint, types, the 3.9
# floor, then every test (unit, CLI, and end-to-end with real frameworks and system tools).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
bash scripts/bootstrap.sh
if [ -f scripts/frameworks.sh ]; then
  bash scripts/frameworks.sh all
fi
echo "[test] ruff"
.venv/bin/ruff check src tests
.venv/bin/ruff format --check src tests
echo "[test] mypy --strict"
.venv/bin/mypy
echo "[test] vermin (Python >= 3.9)"
.venv/bin/vermin -q -t=3.9- --no-tips --violations --backport typing src/marun
echo "[test] pytest"
exec .venv/bin/pytest "$@"
