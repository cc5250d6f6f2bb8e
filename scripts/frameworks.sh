#!/usr/bin/env bash
# Install the frameworks the end-to-end tests run, one virtual environment each:
#
#   scripts/frameworks.sh [torch|mindspore|tensorflow|mpi|all]...   (default: all)
#
# Each venv lives in ${MARUN_VENVS:-<repo>/.cache/venvs}/<name> and holds the framework plus marun
# installed editable from this repo, so a test runs `<venv>/bin/python -m marun` under the
# framework's own interpreter, as in a real image. Stamp files record what was installed: the
# framework's package specs and the interpreter (when they change, or an install was cut short,
# the venv is rebuilt from nothing), and marun's pyproject.toml (when it changes, only marun is
# reinstalled). When both match, a run costs nothing.
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
        torch) echo "torch==2.13.0 numpy py-spy" ;;  # py-spy: the hang watchdog's stacks (marun[hang])
        mindspore) echo "mindspore==2.10.0 numpy<2" ;;
        tensorflow) echo "tensorflow-cpu==2.21.0" ;;
        mpi) echo "mpi4py==4.1.2 py-spy" ;;  # py-spy: the hang watchdog judges the ranks below mpirun
        *) return 1 ;;
    esac
}

say() { printf 'frameworks.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
run() { printf '+ %s\n' "$*" >&2; "$@"; }

pip_install() {
    local python=$1/bin/python status=0
    shift
    printf '+ %s -m pip install %s\n' "$python" "$*" >&2
    # This machine's pip config names local wheel directories that may not exist; pip warns
    # about each on every package. Those lines are dropped, everything else pip says is kept.
    { "$python" -m pip install --quiet --disable-pip-version-check --no-input "$@" 2>&1 1>&3 3>&- |
        { grep -v "^WARNING: Location '.*' is ignored" || true; } >&2; } 3>&1 || status=$?
    return "$status"
}

install_one() {
    local name=$1 venv=$venvs/$1 want_framework want_marun
    local -a pkgs
    read -r -a pkgs <<<"$(specs "$name")"
    if [[ $name == mpi ]] && ! command -v mpirun >/dev/null; then
        die "mpi: mpirun not found; install Debian's openmpi-bin (apt-get install openmpi-bin libopenmpi-dev)"
    fi
    want_framework=$(printf 'specs: %s\npython: %s\n' "${pkgs[*]}" \
        "$("$base_python" -c 'import sys; print(sys.version.split()[0], sys.executable)')")
    want_marun=$(sha256sum "$repo/pyproject.toml" | cut -d' ' -f1)
    local framework_stamp=$venv/.marun-frameworks-stamp marun_stamp=$venv/.marun-frameworks-marun
    local started=$SECONDS
    if [[ ! -f $framework_stamp || $(cat "$framework_stamp") != "$want_framework" ]]; then
        say "$name: installing ${pkgs[*]} and marun into $venv"
        run rm -rf "$venv"
        run "$base_python" -m venv "$venv"
        pip_install "$venv" "${pkgs[@]}" -e "$repo" ||
            die "$name: pip install failed (see above); $venv is incomplete"
        printf '%s\n' "$want_marun" >"$marun_stamp"
        printf '%s\n' "$want_framework" >"$framework_stamp"
    elif [[ ! -f $marun_stamp || $(cat "$marun_stamp") != "$want_marun" ]]; then
        # marun's pyproject.toml changed (its dependencies, say): refresh marun, keep the framework.
        say "$name: reinstalling marun into $venv"
        pip_install "$venv" -e "$repo" || die "$name: pip install -e $repo failed (see above)"
        printf '%s\n' "$want_marun" >"$marun_stamp"
    else
        say "$name: up to date in $venv"
        return 0
    fi
    say "$name: done in $((SECONDS - started)) s"
}

main() {
    command -v "$base_python" >/dev/null ||
        die "no Python interpreter '$base_python' (set MARUN_FRAMEWORK_PYTHON)"
    local -a names=("$@")
    [[ ${#names[@]} -gt 0 ]] || names=(all)
    if [[ ${names[*]} == *all* ]]; then names=(torch mindspore tensorflow mpi); fi
    for name in "${names[@]}"; do
        specs "$name" >/dev/null || die "unknown framework '$name': expected torch, mindspore, tensorflow, mpi or all"
    done
    mkdir -p "$venvs"
    # The venvs are independent: each installs at once beside the others (mostly unpacking wheels
    # from disk), its output kept apart and printed in order when all are done.
    local -A pids=()
    for name in "${names[@]}"; do
        (
            # One install of a venv at a time: a test run and a developer may call this together.
            exec {lock}>"$venvs/.$name.lock"
            flock "$lock"
            install_one "$name"
        ) >"$venvs/.$name.log" 2>&1 &
        pids[$name]=$!
    done
    local failed=0
    for name in "${names[@]}"; do
        wait "${pids[$name]}" || failed=1
        cat "$venvs/.$name.log" >&2
    done
    [[ $failed == 0 ]] || die "a framework's install failed (above)"
}

main "$@"
