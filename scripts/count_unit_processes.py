"""Count the tests of a pytest run that start a process, per test module (part 12's figure:
"a unit test starts no process"). A pytest plugin: Python's audit events (subprocess.Popen,
os.fork, os.forkpty, os.posix_spawn, os.exec, os.system) are recorded per test, setup included,
whatever API started the process; non-local DNS lookups are counted beside them.

    PYTHONPATH=scripts .venv/bin/pytest -q -p count_unit_processes tests/unit

prints, at the end, how many tests started a process and which modules they are in. It counts,
it does not fail: tests/conftest.py is what fails a unit test that starts one.
"""

from __future__ import annotations

import collections
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

_STARTS = {
    "subprocess.Popen": "process",
    "os.fork": "process",
    "os.forkpty": "process",
    "os.posix_spawn": "process",
    "os.exec": "process",
    "os.system": "process",
    "socket.getaddrinfo": "dns",
    "socket.gethostbyname": "dns",
    "socket.gethostbyname_ex": "dns",
    "socket.gethostbyaddr": "dns",
}
_LOCAL = ("", "localhost", "::1", "0.0.0.0")
_PID = os.getpid()
_current: list[collections.Counter[str]] = []
_seen: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    kind = _STARTS.get(event)
    if kind is None or not _current or os.getpid() != _PID:
        return
    if kind == "dns":
        host = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
        if host in _LOCAL or host.startswith("127.") or args[0] is None:
            return
    _current[0][kind] += 1


sys.addaudithook(_audit)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    counter: collections.Counter[str] = collections.Counter()
    _current[:] = [counter]
    yield
    _current.clear()
    _seen[item.nodeid] += counter


def pytest_terminal_summary(terminalreporter: Any) -> None:
    started = [t for t, c in _seen.items() if c["process"]]
    dns = [t for t, c in _seen.items() if c["dns"]]
    say = terminalreporter.write_line
    say(f"tests: {len(_seen)}; start a process: {len(started)}; non-local DNS lookups: {len(dns)}")
    for module, count in collections.Counter(t.split("::")[0] for t in started).most_common():
        say(f"  {count:5d}  {module}")
