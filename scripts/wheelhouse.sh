#!/usr/bin/env bash
# marun and every dependency as wheels in one directory, for a training container that has no
# marun and no package index (a preset engine's image): put the directory, named marun-wheels,
# in the code directory beside the start file (entrypoints/*), which installs marun from it with
# `pip install --no-index` when its Python cannot import marun (entrypoints/README.md).
#
#   bash scripts/wheelhouse.sh [DIR] [PYTHON_VERSION]     # default DIR: ./marun-wheels
#
# PYTHON_VERSION (3.9, 3.11, ...) is the image's Python: the wheels of compiled dependencies
# (netifaces-plus, PyYAML) are per version; default: the Python running pip. PLATFORM names the
# image's machine where it is not this one's (manylinux2014_aarch64 for Arm: Ascend servers).
# Needs a package index here (once), none in the container.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-marun-wheels}
version=${2:-}
python=${PYTHON:-python3}
mkdir -p "$dir"
"$python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$dir" "$REPO"
wheel=$(ls -t "$dir"/marun-*.whl | head -n 1)
args=(--only-binary=:all: -d "$dir")
if [ -n "$version" ]; then args+=(--python-version "$version"); fi
if [ -n "${PLATFORM:-}" ]; then args+=(--platform "$PLATFORM"); fi
"$python" -m pip download -q --disable-pip-version-check "${args[@]}" "$wheel"
echo "[wheelhouse] $(ls "$dir" | wc -l) wheels in $dir: copy it into the code directory as marun-wheels"
