#!/usr/bin/env bash
# Set up a fresh machine for marun: the system tools the tests drive (as root, from Debian's
# packages), the development venv `.venv` with marun installed editable, and a Python 3.9 venv
# that proves marun still runs on the oldest interpreter framework images ship.
# Idempotent: a second run costs about a second.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
log() { printf '[bootstrap] %s\n' "$*"; }

apt_pkgs=(openmpi-bin libopenmpi-dev openssh-server openssh-client iproute2 procps util-linux chromium)
missing=0
for tool in mpirun sshd ip unshare pgrep chromium; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || missing=1
done
if [ "$missing" = 1 ]; then
  if [ "$(id -u)" = 0 ]; then
    log "installing ${apt_pkgs[*]}"
    # scripts/apt-get.sh waits for another apt/dpkg run's lock instead of failing with exit 100.
    bash scripts/apt-get.sh update -qq
    DEBIAN_FRONTEND=noninteractive bash scripts/apt-get.sh install -y -qq "${apt_pkgs[@]}" >/dev/null
  else
    log "missing system tools (mpirun, sshd, ip, unshare, chromium); as root run: apt-get install ${apt_pkgs[*]}"
  fi
fi

PY=${MARUN_PYTHON:-python3}
stamp_of() { sha1sum pyproject.toml | cut -c1-12; }
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.marun-stamp 2>/dev/null)" != "$(stamp_of)" ]; then
  log "creating .venv with marun[dev]"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/pip install -q -e ".[dev]" 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/python -c 'import marun, typer, netifaces, yaml, tenacity, structlog'
  stamp_of > .venv/.marun-stamp
fi

# Python 3.9: the floor marun promises (framework images often ship it).
VENVS=${MARUN_VENVS:-$REPO/.cache/venvs}
PY39=""
for cand in "${MARUN_PYTHON39:-}" python3.9 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.9*/bin/python3.9; do
  # pyenv's shim exists even where 3.9 is not selected: ask the interpreter itself.
  if [ -n "$cand" ] && "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 9)' 2>/dev/null; then
    PY39=$(command -v "$cand"); break
  fi
done
if [ -n "$PY39" ] && [ "$(cat "$VENVS/py39/.marun-stamp" 2>/dev/null)" != "$(stamp_of)" ]; then
  log "creating $VENVS/py39 (Python 3.9) with marun"
  mkdir -p "$VENVS"
  [ -x "$VENVS/py39/bin/python" ] || "$PY39" -m venv "$VENVS/py39"
  "$VENVS/py39/bin/pip" install -q -e . 2>&1 | grep -v '^WARNING: Location' || true
  "$VENVS/py39/bin/python" -c 'import marun.command.cli'
  stamp_of > "$VENVS/py39/.marun-stamp"
fi
if [ -z "$PY39" ]; then
  log "no Python 3.9 interpreter found (python3.9, pyenv's 3.9.*, \$MARUN_PYTHON39): the 3.9 test"
  log "will skip, or fail under MARUN_REQUIRE_E2E=1; install one (pyenv install 3.9, or"
  log "uv python install 3.9) and set MARUN_PYTHON39=/path/to/python3.9"
fi
log "ready"
