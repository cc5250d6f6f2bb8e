#!/usr/bin/env bash
# The whole test suite, from a fresh machine, in two lanes:
#   fast (under a minute once set up): ruff, mypy --strict, the Python 3.9 floor, tests/unit
#   slow: the framework venvs, every benchmark at a small size (bench/run_all.py --small), then
#         tests/cli and tests/e2e (real processes, frameworks, sshd, network namespaces)
# `scripts/test.sh --fast` runs the fast lane alone; extra arguments go to the slow lane's pytest.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
fast_only=0
if [ "${1:-}" = "--fast" ]; then fast_only=1; shift; fi
bash scripts/bootstrap.sh

# The slow lane's cluster-image tests need scripts/images.sh's images: a cold build takes minutes
# of mostly waiting (debootstrap, pip, podman). As root (CI) it runs in the background from here,
# beside the fast lane and the framework venvs, and the slow lane waits for it; the tests' own
# fixture then finds the images up to date (or builds again and says why the first try failed).
images_pid=""
if [ "$fast_only" = 0 ] && [ "$(id -u)" = 0 ] && [ "${MARUN_PREBUILD_IMAGES:-1}" = 1 ]; then
  mkdir -p .cache
  echo "[test] slow lane: building the images in the background (log: .cache/images-build.log)"
  bash scripts/images.sh > .cache/images-build.log 2>&1 &
  images_pid=$!
  trap 'if [ -n "$images_pid" ]; then kill "$images_pid" 2>/dev/null || true; fi' EXIT
fi

started=$SECONDS
echo "[test] fast lane: ruff"
.venv/bin/ruff check src tests bench
.venv/bin/ruff format --check src tests bench
echo "[test] fast lane: mypy --strict"
.venv/bin/mypy
echo "[test] fast lane: vermin (Python >= 3.9)"
.venv/bin/vermin -q -t=3.9- --no-tips --violations --backport typing src/marun
echo "[test] fast lane: unit tests"
.venv/bin/pytest -q tests/unit
echo "[test] fast lane done in $((SECONDS - started)) s"
if [ "$fast_only" = 1 ]; then exit 0; fi

echo "[test] slow lane: framework venvs"
bash scripts/frameworks.sh all
if [ -f bench/run_all.py ]; then
  echo "[test] slow lane: every benchmark at a small size (figures only; nothing asserted on time)"
  .venv/bin/python bench/run_all.py --small
fi
if [ -n "$images_pid" ]; then
  images_started=$SECONDS
  if ! wait "$images_pid"; then
    echo "[test] the background image build failed (.cache/images-build.log); the tests build again"
  fi
  images_pid=""
  echo "[test] waited $((SECONDS - images_started)) s for the image build"
fi
echo "[test] slow lane: tests/cli tests/e2e"
# The 15 slowest tests, so the next engineer sees where the time goes.
exec .venv/bin/pytest --durations=15 tests/cli tests/e2e "$@"
