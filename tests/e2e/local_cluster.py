"""Several platform "nodes" on this machine, each a real `marun run` under a framework's own venv.

A `LocalCluster` starts one marun per node (or container), each in its own working directory
holding a copy of `examples/` (the code an image would carry), with the platform variables the
test gives it and the framework venv's `bin` first on PATH, as in a real image. Every process it
starts carries a tag in its environment, which its children inherit, so the test can find any
process of the job still running, including those marun started in sessions of their own.
Leaving the `with` block kills whatever is left (marun's process group, then every tagged
process), whether the test passed or not.

The framework venvs come from `scripts/frameworks.sh`; a test skips when its venv is missing
(and fails under MARUN_REQUIRE_E2E=1, see tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import pytest

from conftest import REPO, clean_env, free_port

EXAMPLES = REPO / "examples"
TAG_VAR = "MARUN_E2E_JOB_TAG"  # not a setting: config.py reads only MARUN_<known key>
STAMP = ".marun-frameworks-stamp"  # written by scripts/frameworks.sh when an install is complete

# The line examples/pytorch_ddp.py and examples/mindspore_cluster.py end each rank with.
RANK_RESULT = re.compile(
    r"rank (\d+)/(\d+): all_reduce sum (\S+) \(expected (\d+)\); weights checksum (\S+)"
)


def venvs_dir() -> Path:
    return Path(os.environ.get("MARUN_VENVS") or REPO / ".cache" / "venvs")


def framework_python(name: str) -> Path:
    """The interpreter of the framework's venv; skip the test when it is not installed."""
    venv = venvs_dir() / name
    python = venv / "bin" / "python"
    if not (python.is_file() and (venv / STAMP).is_file()):
        pytest.skip(f"no {name} venv at {venv}: run scripts/frameworks.sh {name}")
    return python


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free right now, outside the ephemeral range (conftest.free_port)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@dataclass(frozen=True)
class RankResult:
    rank: int
    world: int
    total: float
    expected: float
    checksum: float


def rank_results(text: str) -> dict[int, RankResult]:
    found = {}
    for m in RANK_RESULT.finditer(text):
        result = RankResult(int(m[1]), int(m[2]), float(m[3]), float(m[4]), float(m[5]))
        found[result.rank] = result
    return found


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(none)"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Node:
    """One `marun run`: its process, working directory and captured console."""

    name: str
    cwd: Path
    proc: subprocess.Popen[bytes]
    out_path: Path
    err_path: Path

    @property
    def log_dir(self) -> Path:
        return self.cwd / "marun_logs"  # marun's default with no MA_LOG_DIR and no --log-dir

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def logs(self) -> str:
        """Every per-process log marun wrote for this node, concatenated."""
        if not self.log_dir.is_dir():
            return ""
        return "".join(p.read_text(errors="replace") for p in sorted(self.log_dir.glob("*.log")))

    def report(self) -> str:
        return (
            f"--- {self.name}: marun pid {self.proc.pid}, exit {self.proc.returncode}\n"
            f"--- stdout (tail):\n{_tail(self.out_path)}\n"
            f"--- stderr (tail):\n{_tail(self.err_path)}"
        )

    def wait(self, timeout: float, peers: Sequence[Node] = ()) -> int:
        """marun's exit code; a failure if it is still running after `timeout` seconds (a hang
        guard, not a measurement), or as soon as one of `peers`, which must outlive it, ends
        (a job whose server is gone would otherwise hang until the guard)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.proc.wait(timeout=min(0.5, max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
            for peer in peers:
                if peer.proc.poll() is not None:
                    # At the job's end the peers stop first and the node running the job's
                    # coordinator lingers (up to ~3 s) until they have read the stop: ending
                    # within that is no premature end.
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        return self.proc.wait(timeout=10)
                    pytest.fail(
                        f"{peer.name} ended while {self.name} still ran\n"
                        f"{peer.report()}\n{self.report()}"
                    )
            if time.monotonic() >= deadline:
                pytest.fail(f"{self.name}: marun still running after {timeout:g}s\n{self.report()}")

    def signal(self, signum: int) -> None:
        """What the platform does to a container: a signal to its PID 1, marun itself."""
        os.kill(self.proc.pid, signum)


class LocalCluster:
    def __init__(self, root: Path, framework: str) -> None:
        self.root = root
        self.python = framework_python(framework)
        self.tag = uuid.uuid4().hex
        self.nodes: list[Node] = []

    def start(self, name: str, args: Sequence[str], env: Mapping[str, str]) -> Node:
        """Start `<venv python> -m marun ARGS` as node `name` with the platform's `env`."""
        cwd = self.root / name
        cwd.mkdir(parents=True)
        shutil.copytree(EXAMPLES, cwd / "examples")
        bin_dir = str(self.python.parent)
        full_env = clean_env({**env, TAG_VAR: self.tag})
        full_env["PATH"] = bin_dir + os.pathsep + full_env.get("PATH", os.defpath)
        out_path, err_path = cwd / "marun.stdout", cwd / "marun.stderr"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                [str(self.python), "-m", "marun", *args],
                cwd=cwd,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,  # a container of its own: our signals do not reach it
            )
        node = Node(name, cwd, proc, out_path, err_path)
        self.nodes.append(node)
        return node

    def report(self) -> str:
        return "\n".join(node.report() for node in self.nodes)

    # -- what is left -----------------------------------------------------------------------
    def running(self) -> dict[int, str]:
        """Every live (not zombie) process carrying this job's tag: pid -> command line."""
        needle = f"{TAG_VAR}={self.tag}".encode()
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if needle not in (entry / "environ").read_bytes().split(b"\0"):
                    continue
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except (OSError, IndexError):
                continue  # gone meanwhile, or not ours to read
            if state != "Z":
                found[int(entry.name)] = cmdline.strip()
        return found

    def assert_nothing_left(self, settle: float = 5.0) -> None:
        """No process of the job still runs. Processes killed a moment ago may take a few
        milliseconds to die, so this looks again for up to `settle` seconds before failing."""
        deadline = time.monotonic() + settle
        left = self.running()
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = self.running()
        assert not left, "processes left running:\n" + "\n".join(
            f"  {pid}: {cmd}" for pid, cmd in sorted(left.items())
        )

    def kill_everything(self) -> None:
        for node in self.nodes:
            if node.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.proc.pid, signal.SIGKILL)
        for pid in self.running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for node in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(timeout=10)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill_everything()
