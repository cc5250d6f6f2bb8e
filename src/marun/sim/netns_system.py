"""What the machine holds beneath marun.sim.netns's clusters: the system tools, the named network
namespaces (stale ones removed), and the processes of a namespace, found and ended as `ip netns
pids` would find them, without ever signalling a pid that was reused meanwhile."""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import time
from collections.abc import Collection, Sequence
from pathlib import Path

from marun._files import find_executable

NsId = tuple[int, int]  # (st_dev, st_ino) of a network namespace
_KILL_BOUND = 5.0  # seconds of SIGKILL rounds before teardown gives up and reports survivors
_POLL = 0.01
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NAME_PREFIX = "mrn"
_NAME_RE = re.compile(rf"^{NAME_PREFIX}(\d+)_([0-9a-z]+)_(\d+)_(sw|h\d+)$")
_NETNS_DIR = "/var/run/netns"  # where `ip netns` keeps its names (iproute2's NETNS_RUN_DIR)


def _tool(name: str) -> str | None:
    # Look in the sbin directories too: `ip` lives in /usr/sbin, often missing from PATH.
    return find_executable(name, _SYSTEM_PATH.split(":"))


def _need(name: str) -> str:
    path = _tool(name)
    if path is None:
        raise RuntimeError(f"`{name}` not found")
    return path


@functools.cache
def _start_time(pid: int) -> int | None:
    """Clock ticks from boot to the start of `pid` (with the pid, names one process for good);
    None when it has ended, zombies included."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields 3 (state) and 22; the command name (field 2, in parentheses) may hold spaces.
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while True:
        number, rest = divmod(number, 36)
        text = digits[rest] + text
        if not number:
            return text


def _creator_alive(pid: int, start36: str) -> bool:
    start = _start_time(pid)
    return start is not None and _base36(start) == start36


def _netns_id(path: str) -> NsId | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _pids_in(netns: Collection[NsId]) -> list[int]:
    """Every process whose network namespace is one of `netns` (what `ip netns pids` does)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _netns_id(f"/proc/{entry.name}/ns/net") in netns:
            found.append(int(entry.name))
    return sorted(found)


def _signal(pid: int, sig: int, netns: Collection[NsId]) -> None:
    """Signal `pid` only if it is still a process of `netns`: through a pidfd, so a pid that
    ended and was reused by some other process meanwhile is never hit."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        if _netns_id(f"/proc/{pid}/ns/net") in netns:
            signal.pidfd_send_signal(fd, sig)
    except ProcessLookupError:
        pass
    finally:
        os.close(fd)


def _wait_gone(netns: Collection[NsId], timeout: float, keep: Collection[int]) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in _pids_in(netns) if p not in keep]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(_POLL)


def _end_processes(netns: Collection[NsId], grace: float, keep: Collection[int] = ()) -> list[int]:
    """SIGTERM every process of `netns` but `keep`, up to `grace` seconds for them to go, then
    SIGKILL rounds (a process may fork meanwhile). Returns what survived."""
    left = [p for p in _pids_in(netns) if p not in keep]
    if left and grace > 0:
        for pid in left:
            _signal(pid, signal.SIGTERM, netns)
        left = _wait_gone(netns, grace, keep)
    deadline = time.monotonic() + _KILL_BOUND
    while left and time.monotonic() < deadline:
        for pid in left:
            _signal(pid, signal.SIGKILL, netns)
        left = _wait_gone(netns, 0.2, keep)
    return left


def _ip_batch(netns: str | None, commands: Sequence[str], force: bool = False) -> None:
    argv = [_need("ip")]
    if netns is not None:
        argv += ["-n", netns]
    if force:
        argv.append("-force")
    res = subprocess.run(
        [*argv, "-batch", "-"],
        input="".join(f"{c}\n" for c in commands),
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0 and not force:
        raise RuntimeError(f"{' '.join(argv)} -batch failed: {res.stderr.strip()}")


def _netns_names() -> list[str]:
    res = subprocess.run(
        [_need("ip"), "netns", "list"], capture_output=True, text=True, check=False
    )
    return [line.split()[0] for line in res.stdout.splitlines() if line.strip()]


def cleanup_stale() -> list[str]:
    """Remove the namespaces (and every process in them) of clusters whose creator is dead: what
    a test run killed before its teardown left behind. Returns the names removed."""
    stale = []
    for name in _netns_names():
        match = _NAME_RE.match(name)
        if match and not _creator_alive(int(match.group(1)), match.group(2)):
            stale.append(name)
    if not stale:
        return []
    netns = {i for i in (_netns_id(f"{_NETNS_DIR}/{n}") for n in stale) if i is not None}
    # Nobody waits on these processes any more: no grace.
    _end_processes(netns, grace=0)
    _ip_batch(None, [f"netns del {n}" for n in stale], force=True)
    return stale
