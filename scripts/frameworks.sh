#!/usr/bin/env bash
# Install the frameworks the end-to-end tests run, one virtual environment each:
#
#   scripts/frameworks.sh [torch|mindspore|tensorflow|mpi|all]...   (default: all)
#
# Each venv lives in ${MARUN_VENVS:-<repo>/.cache/venvs}/<name> and holds the framework plus marun
# installed editable from this repo, so a test runs `<venv>/bin/python -m marun` under the
# framework's own interpreter, as in a real image. A stamp file records what was installed (the
# package specs, the interpreter and marun's pyproject.toml); when it matches, a run costs nothing.
# When it does not, the venv is rebuilt from nothing, so a half-finished install never lingers.
# MARUN_FRAMEWORK_PYTHON picks the base interpreter (default: python3).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venvs=${MARUN_VENVS:-$repo/.cache/venvs}
base_python=${MARUN_FRAMEWORK_PYTHON:-python3}

# The pins are the releases the tests were written against:
# - torch 2.13.0: a CPU wheel on this machine's disk; an unpinned `torch` pulls a multi-GB CUDA build.
# - mindspore 2.10.0 with numpy<2: numpy 2 breaks MindSpore's PyNative mode on CPU.
specs() {
    case $1 in
        torch) echo "torch==2.13.0" ;;
        mindspore) echo "mindspore==2.10.0 numpy<2" ;;
        tensorflow) echo "tensorflow-cpu==2.21.0" ;;
        mpi) echo "mpi4py==4.1.2" ;;
        *) return 1 ;;
    esac
}

say() { printf 'frameworks.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
run() { printf '+ %s\n' "$*" >&2; "$@"; }

install_one() {
    local name=$1 venv=$venvs/$1 stamp want
    local -a pkgs
    read -r -a pkgs <<<"$(specs "$name")"
    if [[ $name == mpi ]] && ! command -v mpirun >/dev/null; then
        die "mpi: mpirun not found; install Debian's openmpi-bin (apt-get install openmpi-bin libopenmpi-dev)"
    fi
    want=$(printf 'specs: %s\npython: %s\nmarun: %s\n' "${pkgs[*]}" \
        "$("$base_python" -c 'import sys; print(sys.version.split()[0], sys.executable)')" \
        "$(sha256sum "$repo/pyproject.toml" | cut -d' ' -f1)")
    stamp=$venv/.marun-frameworks-stamp
    if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
        say "$name: up to date in $venv"
        return 0
    fi
    say "$name: installing ${pkgs[*]} into $venv"
    local started=$SECONDS
    run rm -rf "$venv"
    run "$base_python" -m venv "$venv"
    run "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
        "${pkgs[@]}" -e "$repo" || die "$name: pip install failed (see above); $venv is incomplete"
    printf '%s\n' "$want" >"$stamp"
    say "$name: done in $((SECONDS - started)) s"
}

main() {
    local -a names=("$@")
    [[ ${#names[@]} -gt 0 ]] || names=(all)
    if [[ ${names[*]} == *all* ]]; then names=(torch mindspore tensorflow mpi); fi
    for name in "${names[@]}"; do
        specs "$name" >/dev/null || die "unknown framework '$name': expected torch, mindspore, tensorflow, mpi or all"
    done
    mkdir -p "$venvs"
    for name in "${names[@]}"; do
        # One install of a venv at a time: a test run and a developer may call this together.
        exec {lock}>"$venvs/.$name.lock"
        flock "$lock"
        install_one "$name"
        exec {lock}>&-
    done
}

main "$@"
