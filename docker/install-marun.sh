#!/bin/sh
# Run by every Dockerfile in docker/ (as root, during the build) with the build context mounted:
# installs marun for the framework's Python, the platform's user and the start files, and with
# --mpi what MPI mode needs. Nothing is downloaded unless the base image lacks OpenMPI or sshd
# and the context holds no debs/ for them (see docker/README.md).
#
#   install-marun.sh [--python PYTHON] [--mpi]
set -eu

context=$(cd "$(dirname "$0")/.." && pwd)
python=python3
mpi=0
while [ $# -gt 0 ]; do
    case $1 in
        --python) python=$2; shift 2 ;;
        --mpi) mpi=1; shift ;;
        *) echo "install-marun.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
say() { echo "[install-marun] $*"; }
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

if [ "$mpi" = 1 ]; then
    if have mpirun && have sshd && have ssh; then
        say "OpenMPI and OpenSSH: the base image's ($(command -v mpirun))"
    elif ls "$context"/debs/*.deb >/dev/null 2>&1; then
        set -- "$context"/debs/*.deb
        say "OpenMPI and OpenSSH: installing $# packages from debs/"
        # One dpkg call: it orders and configures the packages among themselves.
        DEBIAN_FRONTEND=noninteractive dpkg -i "$@" >/dev/null
    elif have apt-get; then
        say "OpenMPI and OpenSSH: installing from the distribution"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            openmpi-bin openssh-server openssh-client >/dev/null
        rm -rf /var/lib/apt/lists/*
    else
        echo "install-marun.sh: the base image has no mpirun/sshd and no apt-get;" \
            "install OpenMPI and openssh-server in the base image" >&2
        exit 1
    fi
    # Host keys made at package install time would be shared by every container of the image;
    # marun generates each container's own in its run directory.
    rm -f /etc/ssh/ssh_host_*_key /etc/ssh/ssh_host_*_key.pub
    # sshd's privilege separation directory, needed when a job runs as root.
    mkdir -p /run/sshd && chmod 755 /run/sshd
fi

set -- marun
[ "$mpi" = 1 ] && set -- marun mpi4py
say "pip install $* for $(command -v "$python") ($("$python" -V 2>&1)), offline"
PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "$python" -m pip install --quiet --no-cache-dir --no-index \
    --find-links "$context/wheels" "$@"
# The ENTRYPOINT names `marun`: it must be the one just installed, on PATH.
scripts=$("$python" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
if [ "$(command -v marun || true)" != "$scripts/marun" ]; then
    ln -sf "$scripts/marun" /usr/local/bin/marun
    say "linked /usr/local/bin/marun -> $scripts/marun"
fi
marun version >/dev/null

# The platform runs custom images as ma-user (uid 1000) in ma-group (gid 100). Base images that
# already use those ids under other names (Debian's group "users", Ubuntu's user "ubuntu") are
# renamed, so files they own keep their owner.
group=$(getent group 100 | cut -d: -f1 || true)
if [ -z "$group" ]; then
    groupadd -g 100 ma-group
elif [ "$group" != ma-group ]; then
    groupmod -n ma-group "$group"
fi
user=$(getent passwd 1000 | cut -d: -f1 || true)
if [ -z "$user" ]; then
    if getent passwd ma-user >/dev/null; then
        echo "install-marun.sh: ma-user exists with uid $(id -u ma-user), expected 1000" >&2
        exit 1
    fi
    useradd -u 1000 -g 100 -m -d /home/ma-user -s /bin/bash ma-user
elif [ "$user" != ma-user ]; then
    usermod -l ma-user -g 100 -d /home/ma-user -m -s /bin/bash "$user"
fi
# No password and not locked: sshd (running as root) refuses key logins of a locked account.
usermod -p '*' ma-user
say "user $(id ma-user)"

install -d -m 755 /opt/marun/entrypoints
for file in "$context"/entrypoints/*; do
    case $file in *.md) ;; *) install -m 755 "$file" /opt/marun/entrypoints/ ;; esac
done
say "start files: $(echo /opt/marun/entrypoints/*)"
