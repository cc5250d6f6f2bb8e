"""MPI mode's follower (the `mpi-follower` process of every node but node 0): wait for the
leader's verdict on the job and exit with it.

    python -m marun.mpi.follower wait --run-dir R --leader HOST0 --watch-port 36667
        --formation-timeout 600 --peer-timeout 60
    python -m marun.mpi.follower notify --status N [--reason TEXT]      (run by node 0, over ssh)

How node 0 tells this node: over ssh, with the job's key (the same login mpirun uses), node 0
runs `notify` here; it writes the status atomically to `<run dir>/job-status`, the run directory
being the one this node's sshd names in the session's environment (MARUN_NODE_RUN_DIR, set by
its sshd_config), so node 0 need not know this node's paths. `wait` polls that file and exits
with the status in it: 0 when the job succeeded, mpirun's status (a rank's exit code), 128+N
when signal N stopped node 0, 1 when the cluster did not form.

How this node notices that node 0 is gone: it connects to node 0's watch port (the leader
accepts and hangs up) every few seconds. Node 0 silent or refusing for `--peer-timeout` seconds
after it had answered, or never answering within `--formation-timeout` + `--peer-timeout`: exit 1
with what was seen. No sleep-forever, no pkill, no looking for orted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence

from marun._files import atomic_write
from marun.mpi.run_dir import JOB_STATUS, RUN_DIR_VAR
from marun.runtime.signals import StopFlag

EXIT_LEADER_LOST = 1
POLL = 0.1  # how often the status file is looked at


def say(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"marun: {text}\n")
        sys.stderr.flush()


def probe_interval(peer_timeout: float) -> float:
    """Six looks per peer_timeout, between every 0.5 s and every 5 s."""
    return max(0.5, min(5.0, peer_timeout / 6))


# -- notify: node 0 writes the verdict --------------------------------------------------------


def write_status(run_dir: str, status: int, reason: str) -> str:
    path = os.path.join(run_dir, JOB_STATUS)
    atomic_write(path, json.dumps({"status": status, "reason": reason}), 0o600)
    return path


def read_status(path: str) -> tuple[int, str] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return 1, f"unreadable job status in {path}: {exc}"
    status = data.get("status") if isinstance(data, dict) else None
    if not isinstance(status, int) or isinstance(status, bool):
        return 1, f"job status in {path} holds no status number: {data!r}"
    return min(max(status, 0), 255), str(data.get("reason") or "")


def notify(args: argparse.Namespace) -> int:
    run_dir = os.environ.get(RUN_DIR_VAR)
    if not run_dir or not os.path.isdir(run_dir):
        say(
            f"error: {RUN_DIR_VAR}={run_dir!r}: expected this node's run directory (set by "
            "marun's sshd_config for every ssh session)"
        )
        return 2
    write_status(run_dir, args.status, args.reason)
    return 0


# -- wait: this node's follower ---------------------------------------------------------------


def leader_answers(host: str, port: int, timeout: float) -> str | None:
    """None when node 0's watch port takes a connection, else why not."""
    from marun.mpi.formation import NotReady, probe_port, resolve_ipv4_once

    try:
        probe_port(resolve_ipv4_once(host), port, timeout)
    except NotReady as exc:
        return str(exc)
    return None


def wait(args: argparse.Namespace) -> int:
    stop = StopFlag()
    status = _wait(args, stop)
    code = stop.exit_code()
    if code is not None:
        say(f"stopped by {stop.name()} while waiting for node 0")
        return code
    return status


def _wait(args: argparse.Namespace, stop: StopFlag) -> int:
    """The job's status as node 0 reports it, EXIT_LEADER_LOST, or anything once `stop` is set
    (the caller then exits 128+N)."""
    path = os.path.join(args.run_dir, JOB_STATUS)
    # A status left by an earlier start of this container is not this job's. Node 0 can only
    # write one after this node's sshd (started with this process) let it in for a whole job.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    leader = f"node 0 {args.leader}"
    started = time.monotonic()
    first_deadline = started + args.formation_timeout + args.peer_timeout
    interval = probe_interval(args.peer_timeout)
    seen_at: float | None = None
    next_probe = started
    say(f"waiting for {leader} to run the job (watching its port {args.watch_port})")
    while not stop.event.is_set():
        verdict = read_status(path)
        if verdict is not None:
            status, reason = verdict
            if status == 0:
                say(f"{leader} reports the job finished ({reason or 'status 0'})")
            else:
                say(f"{leader} reports the job failed with status {status}: {reason}")
            return status
        now = time.monotonic()
        if now >= next_probe:
            problem = leader_answers(args.leader, args.watch_port, min(2.0, interval))
            now = time.monotonic()
            next_probe = now + interval
            if problem is None:
                if seen_at is None:
                    say(f"{leader} is up")
                seen_at = now
            elif seen_at is not None and now - seen_at >= args.peer_timeout:
                say(
                    f"{leader} has not answered for {args.peer_timeout:g}s (peer_timeout; last: "
                    f"{problem}) and did not report the job's status: giving up"
                )
                return EXIT_LEADER_LOST
            elif seen_at is None and now >= first_deadline:
                limit = args.formation_timeout + args.peer_timeout
                say(
                    f"{leader} never answered within {limit:g}s (formation_timeout + "
                    f"peer_timeout; last: {problem}): giving up"
                )
                return EXIT_LEADER_LOST
        stop.event.wait(POLL)
    return EXIT_LEADER_LOST


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m marun.mpi.follower")
    sub = parser.add_subparsers(dest="command", required=True)
    waiting = sub.add_parser("wait", help="this node's follower: exit with the job's status")
    waiting.add_argument("--run-dir", required=True)
    waiting.add_argument("--leader", required=True, help="node 0's host name")
    waiting.add_argument("--watch-port", type=int, required=True)
    waiting.add_argument("--formation-timeout", type=float, required=True)
    waiting.add_argument("--peer-timeout", type=float, required=True)
    telling = sub.add_parser("notify", help="record the job's status (run by node 0 over ssh)")
    telling.add_argument("--status", type=int, required=True)
    telling.add_argument("--reason", default="")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "notify":
        return notify(args)
    return wait(args)


if __name__ == "__main__":
    sys.exit(main())
