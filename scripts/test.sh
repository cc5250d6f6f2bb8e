#!/usr/bin/env bash
# The whole test suite, from a fresh machine, in two lanes:
#   fast (under a minute once set up): ruff, mypy --strict, the Python 3.9 floor, tests/unit
#   slow: the framework venvs, every benchmark at a small size (bench/run_all.py --small), then
#         tests/cli and tests/e2e (real processes, frameworks, sshd, network namespaces); its
#         setup and its CPU-only tests start in the background beside the fast lane (below)
# `scripts/test.sh --fast` runs the fast lane alone; extra arguments go to the slow lane's pytest.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
fast_only=0
if [ "${1:-}" = "--fast" ]; then fast_only=1; shift; fi
bash scripts/bootstrap.sh
# Every process the tests start caches its bytecode (a dev shell's PYTHONDONTWRITEBYTECODE=1
# made each of the thousands of marun and framework processes compile its modules again: minutes
# of CPU in a full run). The caches are __pycache__ directories, ignored by git and the wheel.
unset PYTHONDONTWRITEBYTECODE

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

# The slow lane's setup and its CPU-only tests overlap the fast lane (a full run only): the
# framework venvs install (mostly unpacking wheels: disk), and the two tests that only spend CPU
# (no network namespace, no framework, nothing timed, ports of their own: the interleavings'
# thousands and the bad-input corpus, one case at a time) run in one background pytest, one core's worth,
# with its own temporary directory (its log: .cache/cpu-tests.log; joined at the end). The fast
# lane's pytest is one process: the machine's second core is otherwise idle while it runs.
frameworks_pid=""
cpu_pid=""
docs_pid=""
CPU_TESTS=(tests/cli/test_job_interleavings_many.py tests/cli/test_bad_input_corpus.py)
# Then, in the same background pytest, once those are done (about 20 minutes in), slow-lane tests
# of real maruns on the loopback that need no framework venv, no image, no network namespace and
# no port but those MARUN_SIM_PORTS gives them (probes of a fixed port bind with SO_REUSEADDR and
# never listen): they run beside the slow lane's end-to-end tests, which used one core of two
# alone for the last 10 to 12 minutes of a run (/proc/stat sampled every 5 s on 2026-11-28).
BESIDE_TESTS=(tests/cli/test_job_combined.py tests/cli/test_job_hostile.py
  tests/cli/test_job_coordination.py tests/cli/test_supervisor.py tests/cli/test_soak.py
  tests/cli/test_simulate.py tests/cli/test_direct_logs.py tests/cli/test_spares.py)
# Once the framework venvs are there: the commands of the docs and of `--help`, run as written
# (simulated jobs of every engine; nothing timed), in a second background pytest.
DOCS_TESTS=(tests/cli/test_docs_commands.py tests/cli/test_help_examples.py)
# The lanes run side by side on one loopback, and each binds ports it chose free a moment before
# (the corpus's sshd and scheduler ports, for minutes; the docs' simulated jobs; the slow lane's
# rendezvous ports): each chooses from a range of its own (marun.sim.ports, MARUN_SIM_PORTS), so
# that no lane binds or dials a port another chose. The slow lane and the benches keep the
# default range (10000 up to the ephemeral range); these two are below it.
CPU_PORTS=6000-7999
DOCS_PORTS=8200-9999
if [ "$fast_only" = 0 ]; then
  mkdir -p .cache
  echo "[test] slow lane: the framework venvs, in the background (log: .cache/frameworks.log)"
  bash scripts/frameworks.sh all > .cache/frameworks.log 2>&1 &
  frameworks_pid=$!
  if [ $# -eq 0 ]; then
    echo "[test] slow lane: ${CPU_TESTS[*]}, then ${BESIDE_TESTS[*]}, in the background (log: .cache/cpu-tests.log)"
    MARUN_CORPUS_SLOTS=1 MARUN_SIM_PORTS=$CPU_PORTS .venv/bin/pytest -p no:cacheprovider --basetemp=/tmp/marun-cpu-tests \
      --durations=10 "${CPU_TESTS[@]}" "${BESIDE_TESTS[@]}" > .cache/cpu-tests.log 2>&1 &
    cpu_pid=$!
  fi
  trap 'for p in $images_pid $frameworks_pid $cpu_pid $docs_pid; do kill "$p" 2>/dev/null || true; done' EXIT
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

# (the benches need no framework venv: they run while the venvs install)
if [ -f bench/run_all.py ]; then
  echo "[test] slow lane: every benchmark at a small size (figures only; nothing asserted on time)"
  .venv/bin/python bench/run_all.py --small
fi
echo "[test] slow lane: framework venvs"
frameworks_started=$SECONDS
if ! wait "$frameworks_pid"; then
  frameworks_pid=""
  tail -n 40 .cache/frameworks.log
  echo "[test] the framework venvs failed to install (.cache/frameworks.log)"
  exit 1
fi
frameworks_pid=""
cat .cache/frameworks.log
echo "[test] waited $((SECONDS - frameworks_started)) s for the framework venvs"
if [ -n "$cpu_pid" ]; then
  echo "[test] slow lane: ${DOCS_TESTS[*]}, in the background (log: .cache/docs-tests.log)"
  MARUN_SIM_PORTS=$DOCS_PORTS .venv/bin/pytest -p no:cacheprovider --basetemp=/tmp/marun-docs-tests --durations=5 \
    "${DOCS_TESTS[@]}" > .cache/docs-tests.log 2>&1 &
  docs_pid=$!
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
ignored=()
if [ -n "$cpu_pid" ]; then
  for t in "${CPU_TESTS[@]}" "${BESIDE_TESTS[@]}" "${DOCS_TESTS[@]}"; do ignored+=(--ignore "$t"); done
fi
slow_rc=0
.venv/bin/pytest --durations=15 tests/cli tests/e2e "${ignored[@]}" "$@" || slow_rc=$?
cpu_rc=0
if [ -n "$cpu_pid" ]; then
  cpu_started=$SECONDS
  wait "$cpu_pid" || cpu_rc=$?
  cpu_pid=""
  echo "[test] slow lane, in the background (waited $((SECONDS - cpu_started)) s more for it):"
  cat .cache/cpu-tests.log
fi
docs_rc=0
if [ -n "$docs_pid" ]; then
  docs_started=$SECONDS
  wait "$docs_pid" || docs_rc=$?
  docs_pid=""
  echo "[test] slow lane, the docs' commands (waited $((SECONDS - docs_started)) s more for it):"
  cat .cache/docs-tests.log
fi
if [ "$slow_rc" != 0 ] || [ "$cpu_rc" != 0 ] || [ "$docs_rc" != 0 ]; then
  echo "[test] FAILED: tests/cli tests/e2e exit $slow_rc; ${CPU_TESTS[*]} ${BESIDE_TESTS[*]} exit $cpu_rc;" \
    "${DOCS_TESTS[*]} exit $docs_rc"
  exit 1
fi
