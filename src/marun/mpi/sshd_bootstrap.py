"""Prepare this node's sshd, then become it: the `sshd` process of MPI mode's plan.

    python -m marun.mpi.sshd_bootstrap --run-dir R [--new-identity R/id_ed25519]
        [--authorize PUB]... -- /usr/sbin/sshd -D -e -f R/sshd_config

Before exec'ing the sshd command line after `--` (so the supervisor's process *is* sshd: its
signals and exit status are sshd's own), it
1. makes the run directory private (0700, ours);
2. generates this container's host key `R/ssh_host_ed25519_key` unless an earlier start did;
3. with `--new-identity`, generates the per-job client key (single-node jobs without a mounted
   key) and authorizes it; `--authorize` authorizes a mounted `id_rsa.pub` when the platform
   mounted no `authorized_keys`; both go to `R/authorized_keys`;
4. runs `sshd -T` on `R/sshd_config` (the config the planner names in sshd's `-f`, both from the
   same run directory: nothing is read back out of sshd's command line) and refuses to go on if
   it would accept passwords (as root, creating sshd's missing privilege-separation directory,
   e.g. /run/sshd, on the way).
A failure prints one line and exits non-zero (2 for bad input), which fails the node's job.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence

from marun.errors import MarunError
from marun.exit_codes import NOT_FOUND_EXIT
from marun.mpi.helper_argv import split_command
from marun.mpi.run_dir import AUTHORIZED_KEYS, HOST_KEY, SSHD_CONFIG


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m marun.mpi.sshd_bootstrap")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--new-identity", help="per-job client key to generate and authorize")
    parser.add_argument("--authorize", action="append", default=[], help="a .pub to authorize")
    return parser


def prepare(
    run_dir: str, sshd_argv: Sequence[str], identity: str | None, pubs: Sequence[str]
) -> None:
    from marun._files import private_dir
    from marun.mpi.ssh_keys import generate_key, refuse_password_logins, write_authorized_keys

    private_dir(run_dir)
    host = socket.gethostname()
    generate_key(os.path.join(run_dir, HOST_KEY), f"marun host key of {host}")
    public = list(pubs)
    if identity:
        generate_key(identity, f"marun per-job key of {host}")
        public.append(identity + ".pub")
    if public:
        write_authorized_keys(public, os.path.join(run_dir, AUTHORIZED_KEYS))
    refuse_password_logins(sshd_argv[0], os.path.join(run_dir, SSHD_CONFIG))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        ours, sshd_argv = split_command(
            sys.argv[1:] if argv is None else argv,
            "python -m marun.mpi.sshd_bootstrap --run-dir DIR [OPTIONS] -- SSHD ARGS...",
        )
        args = _parser().parse_args(ours)
        prepare(args.run_dir, sshd_argv, args.new_identity, args.authorize)
    except MarunError as exc:
        sys.stderr.write(f"marun: error: {exc}\n")
        return exc.exit_code
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sshd_argv[0], sshd_argv)
    except OSError as exc:
        sys.stderr.write(f"marun: error: cannot start {sshd_argv[0]!r}: {exc.strerror}\n")
        return NOT_FOUND_EXIT
    return 0  # not reached: execv returns only by raising


if __name__ == "__main__":
    sys.exit(main())
