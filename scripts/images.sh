#!/usr/bin/env bash
# Build marun's images (docker/<engine>/Dockerfile) with podman, on a machine without a Docker
# engine or a registry (Debian 12, as root), downloading nothing inside a build:
#
#   scripts/images.sh [build] [ENGINE...]   build localhost/marun-<engine> (default: all of
#                                           mpi pytorch mindspore tensorflow ascend)
#   scripts/images.sh base [ENGINE...]      only steps 1-3: the stand-in base under each
#                                           engine's framework-image name, no marun in it
#                                           (tests/e2e/test_preset_images.py)
#   scripts/images.sh podman ARGS...        podman on the same storage and settings, e.g.
#                                           scripts/images.sh podman run --rm localhost/marun-mpi --help
#   scripts/images.sh context DIR [X.Y]     only write a build context for `docker build` (wheels
#                                           for Python X.Y, default this one's; no root needed)
#
# Steps, each skipped when done already (a second run takes seconds):
#  1. podman, runc, debootstrap, uidmap, netavark, aardvark-dns, iptables, catatonit from Debian,
#     when missing;
#  2. a Debian rootfs (debootstrap minbase, python3, libgomp1; a venv at /opt/python first on
#     PATH, as a framework image's conda or venv Python is), cached in $MARUN_IMAGES_DIR/rootfs;
#  3. that rootfs imported as localhost/bookworm-min, tagged with each Dockerfile's default
#     BASE_IMAGE (so `FROM ${BASE_IMAGE}` resolves locally; builds use --pull=never);
#  4. the build context: marun's wheel and its dependencies' (plus mpi4py) for the base's Python,
#     the OpenMPI/openssh-server .debs the base lacks, docker/ and entrypoints/;
#  5. `podman build --network=none` of each engine whose context or base changed.
#
# Environment: MARUN_IMAGES_DIR (default <repo>/.cache/images: rootfs, podman storage, context),
# MARUN_IMAGES_FRESH=1 (rebuild the rootfs and re-import the base), MARUN_MPI4PY (pip spec).
#
# Workarounds this kind of machine needs (found by trial on it): the runc runtime (crun
# 1.8.1 refuses the hybrid cgroup layout), ulimits capped in containers.conf (podman's defaults
# fail with "setrlimit: Operation not permitted"), --root/--runroot as flags (a storage config
# file made every run stall 20 s).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The real path: podman's storage remembers the path it was made under and refuses another
# (a worktree's .cache/images linked to the main checkout's).
W=$(realpath -m "${MARUN_IMAGES_DIR:-$REPO/.cache/images}")
ENGINES=(mpi pytorch mindspore tensorflow ascend)
BASE=localhost/bookworm-min:latest
MPI4PY=${MARUN_MPI4PY:-mpi4py==4.1.2} # the release scripts/frameworks.sh tests with
MPI_DEBS=(openmpi-bin openssh-server openssh-client)
# Bump when the rootfs recipe below changes: the cached rootfs is rebuilt.
# libgomp1: the OpenMP runtime framework images carry and MindSpore's CPU build loads from the
# system (torch and TensorFlow bundle theirs).
ROOTFS_RECIPE="bookworm minbase python3 python3-venv ca-certificates libgomp1 /opt/python v2"
PY_PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

say() { printf '[images] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
run() { printf '+ %s\n' "$*" >&2; "$@"; }

podman_env() {
    mkdir -p "$W"/{storage,runroot,tmp,libpodtmp,networks}
    export TMPDIR=$W/tmp CONTAINERS_CONF=$W/containers.conf
    local nofile nproc
    nofile=$(ulimit -Hn) nproc=$(ulimit -Hu)
    [[ $nofile == unlimited ]] && nofile=1048576
    # podman runs its own processes with nproc 32768 here; containers may not ask for more.
    [[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
    local conf
    conf=$(
        cat <<EOF
# Written by scripts/images.sh for podman on this machine.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$W/libpodtmp"
[network]
network_backend = "netavark"
network_config_dir = "$W/networks"
EOF
    )
    [[ -f $CONTAINERS_CONF && $(cat "$CONTAINERS_CONF") == "$conf" ]] || echo "$conf" >"$CONTAINERS_CONF"
}

# Whether apt knows a version of the package (else its lists need an update).
has_candidate() { [[ $(apt-cache policy "$1" 2>/dev/null) == *"Candidate: "[0-9]* ]]; }

pm() { podman --root "$W/storage" --runroot "$W/runroot" "$@"; }

pip=("$REPO/.venv/bin/python" -m pip)
[[ -x $REPO/.venv/bin/python ]] || pip=(python3 -m pip)
quiet_pip() {
    # This machine's pip configuration names local wheel directories that may not exist.
    "${pip[@]}" --disable-pip-version-check -q "$@" 2> >(grep -v "^WARNING: Location '.*' is ignored" >&2)
}

# A build context in $1 (emptied first) for Python $2: marun's wheel and its dependencies' (and
# mpi4py's) in wheels/, docker/ and entrypoints/.
write_context() {
    rm -rf "$1"
    mkdir -p "$1/wheels"
    quiet_pip wheel --no-deps -w "$1/wheels" "$REPO"
    quiet_pip download --only-binary=:all: --python-version "$2" -d "$1/wheels" \
        "$1"/wheels/marun-*.whl "$MPI4PY"
    cp -r "$REPO/docker" "$REPO/entrypoints" "$1/"
}

if [[ ${1:-} == podman ]]; then
    shift
    command -v podman >/dev/null || die "podman is not installed: run scripts/images.sh first"
    podman_env
    exec podman --root "$W/storage" --runroot "$W/runroot" "$@"
fi
if [[ ${1:-} == context ]]; then
    [[ $# -ge 2 ]] || die "usage: scripts/images.sh context DIR [PYTHON_VERSION]"
    version=${3:-$("${pip[0]}" -c 'import sys; print("%d.%d" % sys.version_info[:2])')}
    write_context "$2" "$version"
    say "build context for Python $version in $2; e.g. docker build -f $2/docker/pytorch/Dockerfile $2"
    exit 0
fi
base_only=0
case ${1:-} in
build) shift ;;
base) base_only=1; shift ;;
esac
engines=("$@")
((${#engines[@]})) || engines=("${ENGINES[@]}")
for engine in "${engines[@]}"; do
    [[ -f $REPO/docker/$engine/Dockerfile ]] || die "no docker/$engine/Dockerfile (engines: ${ENGINES[*]})"
done

started=$SECONDS
[[ $(id -u) == 0 ]] || die "needs root (debootstrap, rootful podman); as root: scripts/images.sh"
# The host's apt picks the .debs the Debian 12 rootfs lacks: it must be the same release.
[[ $(sed -n "s/^VERSION_CODENAME=//p" /etc/os-release 2>/dev/null) == bookworm ]] ||
    die "needs a Debian 12 (bookworm) host; elsewhere build with docker from \`scripts/images.sh context\`"
mkdir -p "$W"
exec 9>"$W/.lock"
flock 9 # one build at a time in this directory

# 1. host packages
need=()
# netavark, aardvark-dns and iptables (netavark's firewall rules): container networks with DNS
# for container names (tests/e2e/test_cluster_images.py); catatonit: a pod's infra container.
for pkg in podman runc debootstrap uidmap netavark aardvark-dns iptables catatonit; do
    [[ $(dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null) == "install ok installed" ]] || need+=("$pkg")
done
if ((${#need[@]})); then
    say "installing ${need[*]} from Debian"
    has_candidate podman || run bash "$REPO/scripts/apt-get.sh" update -qq
    DEBIAN_FRONTEND=noninteractive run bash "$REPO/scripts/apt-get.sh" install -y -qq \
        --no-install-recommends "${need[@]}" >/dev/null
fi
podman_env

# 2. rootfs
rootfs=$W/rootfs
if [[ ${MARUN_IMAGES_FRESH:-0} == 1 || $(cat "$rootfs/.marun-recipe" 2>/dev/null) != "$ROOTFS_RECIPE" ]]; then
    mirror=$(awk '/^URIs:/ {u = $2} /^Suites:/ && / bookworm( |$)/ {print u; exit}' \
        /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    [[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' \
        /etc/apt/sources.list 2>/dev/null || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    say "building the rootfs from $mirror (about a minute; log: $W/debootstrap.log)"
    rm -rf "$rootfs" "$rootfs.tmp"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,libgomp1 \
        bookworm "$rootfs.tmp" "$mirror" >"$W/debootstrap.log" 2>&1 ||
        { tail -20 "$W/debootstrap.log" >&2; die "debootstrap failed"; }
    # A framework image's Python (conda, a venv) has pip and is first on PATH; Debian's own
    # python3 refuses pip installs (PEP 668).
    run chroot "$rootfs.tmp" /usr/bin/python3 -m venv /opt/python
    rm -rf "$rootfs.tmp"/var/cache/apt/archives/*.deb "$rootfs.tmp"/var/lib/apt/lists/*
    echo "$ROOTFS_RECIPE" >"$rootfs.tmp/.marun-recipe"
    mv "$rootfs.tmp" "$rootfs"
else
    say "rootfs: cached in $rootfs (MARUN_IMAGES_FRESH=1 rebuilds it)"
fi

# 3. base image, and each Dockerfile's default base name pointing at it
stamp="$ROOTFS_RECIPE $(stat -c %Y "$rootfs/.marun-recipe")"
if [[ $(cat "$W/base.stamp" 2>/dev/null) != "$stamp" ]] || ! pm image exists "$BASE"; then
    say "importing $rootfs as $BASE"
    tar -C "$rootfs" --exclude='./proc/*' --exclude='./sys/*' --exclude='./dev/*' -c . |
        pm import --change "ENV PATH=$PY_PATH" --change 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
    echo "$stamp" >"$W/base.stamp"
else
    say "base image: $BASE"
fi
pyver=$(chroot "$rootfs" /opt/python/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
for engine in "${engines[@]}"; do
    default=$(sed -n 's/^ARG BASE_IMAGE=//p' "$REPO/docker/$engine/Dockerfile")
    [[ -n $default ]] || die "docker/$engine/Dockerfile has no 'ARG BASE_IMAGE=<default>' line"
    pm tag "$BASE" "$default"
done
if ((base_only)); then
    say "done in $((SECONDS - started)) s: $BASE, tagged as each engine's framework image"
    exit 0
fi

# 4. build context, each part remade only when what it is made from changed (a run with nothing
# changed then costs no pip or apt work: about 10 s of its 27 s here went to downloading the same
# .debs again, 13 s to pip; with a change to marun only the wheel is rebuilt).
ctx=$W/context
say "build context $ctx: wheels for Python $pyver, .debs, docker/, entrypoints/"
mkdir -p "$ctx/wheels"
key() { [[ $(cat "$ctx/.key-$1" 2>/dev/null) == "$2" ]]; }
# marun's wheel: from src/marun and the project's metadata files.
wheel_key=$(cd "$REPO" && find src/marun pyproject.toml README.md LICENSE -type f \
    ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum |
    sha256sum | cut -c1-16)
if ! key wheel "$wheel_key" || ! ls "$ctx"/wheels/marun-*.whl >/dev/null 2>&1; then
    rm -f "$ctx"/wheels/marun-*.whl "$ctx/.key-wheel"
    isolation=()
    # hatchling at hand (marun's dev extra): no build environment to make (pip's isolated
    # build installs hatchling into a fresh one every time).
    "${pip[0]}" -c 'import hatchling' 2>/dev/null && isolation=(--no-build-isolation)
    quiet_pip wheel --no-deps "${isolation[@]}" -w "$ctx/wheels" "$REPO"
    echo "$wheel_key" >"$ctx/.key-wheel"
fi
# Its dependencies' wheels (and mpi4py's): from the dependencies pyproject.toml names.
deps_key=$( (sha256sum <"$REPO/pyproject.toml"; echo "$MPI4PY $pyver") | sha256sum | cut -c1-16)
if ! key deps "$deps_key"; then
    find "$ctx/wheels" -type f ! -name 'marun-*.whl' -delete
    rm -f "$ctx/.key-deps"
    quiet_pip download --only-binary=:all: --python-version "$pyver" -d "$ctx/wheels" \
        "$ctx"/wheels/marun-*.whl "$MPI4PY"
    echo "$deps_key" >"$ctx/.key-deps"
fi
rm -rf "$ctx/docker" "$ctx/entrypoints"
cp -r "$REPO/docker" "$REPO/entrypoints" "$ctx/"
# Their READMEs are not installed: an edit to one must not rebuild every image.
find "$ctx/docker" "$ctx/entrypoints" -name '*.md' -delete
# What the base lacks of OpenMPI and openssh-server: the host's apt (the same Debian release)
# computes it against the rootfs's package database and downloads it.
debs_key="$stamp ${MPI_DEBS[*]}"
if ! key debs "$debs_key"; then
    rm -rf "$ctx/debs" "$ctx/.key-debs"
    mkdir -p "$ctx/debs/partial"
    has_candidate openmpi-bin || run bash "$REPO/scripts/apt-get.sh" update -qq
    apt-get install -y -qq --download-only --no-install-recommends \
        -o Dir::Cache::archives="$ctx/debs" -o Dir::State::status="$rootfs/var/lib/dpkg/status" \
        -o Debug::NoLocking=1 "${MPI_DEBS[@]}" >/dev/null
    rm -rf "$ctx/debs/partial" "$ctx/debs/lock"
    echo "$debs_key" >"$ctx/.key-debs"
fi
count() { find "$1" -name "$2" | wc -l; }
say "context: $(count "$ctx/wheels" '*.whl') wheels, $(count "$ctx/debs" '*.deb') .debs"

# 5. images. An image is rebuilt only when its context or base changed, and then without the
# layer cache: podman's cache key of a `RUN --mount=type=bind` step ignores the mounted files,
# so a cached layer would keep an old marun.
digest=$( (cd "$ctx" && find . -type f ! -name '.key-*' -print0 | sort -z | xargs -0 sha256sum
    pm image inspect --format '{{.Id}}' "$BASE") | sha256sum | cut -c1-16)
for engine in "${engines[@]}"; do
    image=localhost/marun-$engine:latest
    built=$(pm image inspect --format '{{index .Labels "marun.context"}}' "$image" 2>/dev/null || true)
    if [[ $built == "$digest" ]]; then
        say "$image: up to date (context $digest)"
        continue
    fi
    t=$SECONDS
    say "building $image (context $digest)"
    run pm build --pull=never --network=none --no-cache --label "marun.context=$digest" \
        -f "$REPO/docker/$engine/Dockerfile" -t "$image" "$ctx"
    say "$image: built in $((SECONDS - t)) s"
done
pm image prune -f >/dev/null # what earlier builds left untagged
say "done in $((SECONDS - started)) s: $(printf 'localhost/marun-%s ' "${engines[@]}")"
