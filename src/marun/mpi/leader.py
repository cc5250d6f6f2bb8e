"""MPI mode's leader (node 0's `mpi-leader` process): form the cluster, run mpirun, exit with
its status.

    python -m marun.mpi.leader --hostfile R/hostfile --port 36666 --formation-timeout 600
        [--ssh-option=-p --ssh-option=36666 ...] -- mpirun ... SCRIPT ARGS...

1. Forms the cluster (marun.mpi.formation): every host of the planned hostfile resolved, every
   peer's sshd answering SSH, and the first peers to answer letting node 0 in with the ssh
   options mpirun will use (the planner gives the words of its `plm_rsh_args` as
   `--ssh-option`s), all in parallel, within `--formation-timeout`.
2. Rewrites the hostfile with the addresses (`<addr> slots=<n>`), so Open MPI never waits on
   DNS, and runs mpirun as its child, in its own process group: a signal the supervisor relays to
   the group reaches mpirun too, which stops the ranks on every node. mpirun's output passes
   through in whole lines per rank (Open MPI tags each read of a rank's output, not each line);
   its report of the first failing rank is picked out of its stderr.
3. Exits with mpirun's status (a rank's exit code comes back through it), 128+N when signal N
   stopped the job, 1 when the cluster did not form. The other nodes learn it from the job's
   coordination (marun.job): this process's end is node 0's, and node 0's failure stops every
   node with its code.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence

from marun._files import atomic_write, write_all
from marun.errors import MarunError, bad_value
from marun.exit_codes import NO_CLUSTER_EXIT, NOT_FOUND_EXIT, signal_exit
from marun.runtime.signals import StopFlag

SHOWN_MISSING = 3  # hosts named in what the other nodes are told when the cluster did not form
DRAIN_WAIT = 2.0  # after mpirun ends, how long its stderr may stay open (a rank's daemon)

_TAGGED = re.compile(r"^\[\d+,\d+\]<")  # --tag-output: a rank's own line, never mpirun's report
_PROCESS_NAME = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]")
_EXIT_CODE = re.compile(r"Exit code:\s*(\d+)")
_SIGNALLED = re.compile(
    r"process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)(?: \(([^)]*)\))?"
)


def say(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        for line in text.splitlines():
            sys.stderr.write(f"marun: {line}\n")
        sys.stderr.flush()


# -- the hostfile -------------------------------------------------------------------------------


def read_hostfile(path: str) -> list[tuple[str, str]]:
    """(host, the rest of its line) for each host line of an Open MPI hostfile."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise bad_value("hostfile", path, f"a readable file ({exc.strerror})") from None
    entries = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            entries.append((words[0], " ".join(words[1:])))
    if not entries:
        raise bad_value("hostfile", path, "one `<host> slots=<n>` line per node")
    return entries


def _placed(entries: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Hot spares: the lines of the places a spare holds name the spare's host
    (marun.plan.place_hosts; node 0 is told them with each round's start)."""
    from marun.plan.place_hosts import PLACE_HOSTS_VAR, parse_place_hosts

    text = os.environ.get(PLACE_HOSTS_VAR, "")
    if not text:
        return entries
    out = list(entries)
    for place, host in sorted(parse_place_hosts(text, len(entries)).items()):
        say(f"hostfile: place {place} is on {host} now (a spare took it)")
        out[place] = (host, out[place][1])
    return out


def write_hostfile(path: str, entries: Sequence[tuple[str, str]]) -> None:
    text = "".join(f"{host} {rest}".rstrip() + "\n" for host, rest in entries)
    atomic_write(path, text, 0o644)


# -- what mpirun says about the first failure ---------------------------------------------------


class FailureScanner:
    """Reads mpirun's stderr as it passes and keeps its report of the first failing rank."""

    def __init__(self) -> None:
        self.first: str | None = None
        self._rank: str | None = None
        self._partial = b""

    def feed(self, data: bytes) -> None:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()[-4096:]
        for raw in lines:
            self._line(raw.decode(errors="replace"))

    def _line(self, line: str) -> None:
        if self.first is not None or _TAGGED.match(line):
            return
        found = _PROCESS_NAME.search(line)
        if found:
            self._rank = found.group(1)
            return
        found = _EXIT_CODE.search(line)
        if found and self._rank is not None:
            self.first = f"rank {self._rank} exited with code {found.group(1)} first"
            return
        found = _SIGNALLED.search(line)
        if found:
            rank, node, number, name = found.groups()
            what = f"signal {number}" + (f" ({name})" if name else "")
            self.first = f"rank {rank} on {node} was ended by {what} first"


def run_mpirun(argv: Sequence[str]) -> tuple[int, str | None]:
    """Run mpirun to its end: (its status as a shell reports it, the first failing rank).

    Both of mpirun's outputs pass through here, put back into whole lines per rank
    (marun.mpi.tagged_output: Open MPI tags each read, not each line); its stderr is also read
    for its report of the first failing rank."""
    from marun.mpi.tagged_output import TaggedLines

    scanner = FailureScanner()
    try:
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        say(f"cannot start {argv[0]!r}: {exc.strerror}")
        return NOT_FOUND_EXIT, None
    assert proc.stdout is not None and proc.stderr is not None

    def to(fd: int, also: Callable[[bytes], None] | None = None) -> Callable[[bytes], None]:
        def write(data: bytes) -> None:
            with contextlib.suppress(OSError):
                write_all(fd, data)
            if also is not None:
                also(data)

        return write

    def copy(source: int, lines: TaggedLines) -> None:
        while True:
            try:
                data = os.read(source, 65536)
            except OSError:
                break
            if not data:
                break
            lines.feed(data)
        lines.close()

    readers = [
        threading.Thread(
            target=copy, args=(proc.stdout.fileno(), TaggedLines(to(1))), daemon=True,
            name="marun-mpirun-stdout",
        ),
        threading.Thread(
            target=copy, args=(proc.stderr.fileno(), TaggedLines(to(2, scanner.feed))),
            daemon=True, name="marun-mpirun-stderr",
        ),
    ]  # fmt: skip
    for reader in readers:
        reader.start()
    code = proc.wait()
    for reader in readers:
        reader.join(DRAIN_WAIT)
    return (signal_exit(-code) if code < 0 else code), scanner.first


# -- the whole run ------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m marun.mpi.leader")
    parser.add_argument("--hostfile", required=True)
    parser.add_argument("--port", type=int, required=True, help="every node's sshd port")
    parser.add_argument("--formation-timeout", type=float, required=True)
    parser.add_argument(
        "--ssh-option",
        action="append",
        default=[],
        help="one word of the ssh options mpirun uses (its plm_rsh_args), in order",
    )
    return parser


def launch(args: argparse.Namespace, mpirun_argv: Sequence[str]) -> int:
    # The first stop signal is kept so that the reason names it. A signal the supervisor relays
    # reaches mpirun by the process group: nothing to pass on.
    signals = StopFlag()
    entries = _placed(read_hostfile(args.hostfile))
    if len(entries) > 1:
        from marun.mpi.formation import FormationError
        from marun.mpi.ssh_keys import find_tool

        ssh_command = [find_tool("ssh"), *args.ssh_option]
        try:
            addresses = form_cluster(args, [host for host, _ in entries], ssh_command, signals)
        except FormationError as exc:
            return exc.exit_code
        write_hostfile(args.hostfile, [(a, rest) for a, (_, rest) in zip(addresses, entries)])
    if signals.received is not None:
        say(f"node 0 received {signals.name()} before mpirun")
        return signals.exit_code() or NO_CLUSTER_EXIT
    code, first = run_mpirun(mpirun_argv)
    interrupted = signals.exit_code()
    status = interrupted if interrupted is not None else code
    if interrupted is not None:
        reason = f"node 0 received {signals.name()}; mpirun exited with status {code}"
    elif code == 0:
        reason = "mpirun finished"
    else:
        reason = f"mpirun exited with status {code}" + (f" ({first})" if first else "")
    if status != 0:
        say(reason)
    return status


def form_cluster(
    args: argparse.Namespace, hosts: Sequence[str], ssh_command: Sequence[str], signals: StopFlag
) -> list[str]:
    """The hosts' addresses once every peer's sshd answers and the sampled logins let node 0
    in. When that does not happen, FormationError carries node 0's exit code (and node 0's end
    stops the other nodes, by the job's coordination)."""
    from marun.mpi.formation import Formation, FormationError

    say(
        f"cluster formation: checking {len(hosts)} hosts (sshd port {args.port}, "
        f"formation_timeout={args.formation_timeout:g}s)"
    )
    formation = Formation(
        hosts, args.port, ssh_command, args.formation_timeout, report=say, stop=signals.event
    )
    try:
        return formation.run()
    except FormationError as exc:
        say(str(exc))
        if exc.interrupted:
            status = signals.exit_code() or NO_CLUSTER_EXIT
            reason = f"node 0 received {signals.name()} during cluster formation"
        else:
            status = NO_CLUSTER_EXIT
            missing = formation.missing()
            named = [f"{c.label()}: {c.problem}" for c in missing[:SHOWN_MISSING]]
            more = len(missing) - SHOWN_MISSING
            reason = "the cluster did not form: " + "; ".join(named)
            reason += f"; and {more} more (see node 0)" if more > 0 else ""
        say(reason)
        exc.exit_code = status
        raise


def main(argv: Sequence[str] | None = None) -> int:
    from marun.mpi.helper_argv import split_command

    try:
        ours, mpirun_argv = split_command(
            sys.argv[1:] if argv is None else argv,
            "python -m marun.mpi.leader --hostfile FILE --port N --formation-timeout S "
            "[--ssh-option=WORD]... -- mpirun ...",
        )
        return launch(_parser().parse_args(ours), mpirun_argv)
    except MarunError as exc:
        say(f"error: {exc}")
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
