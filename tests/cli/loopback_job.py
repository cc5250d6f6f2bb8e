"""A multi-node job of real `marun run` processes on this machine (PyTorch mode, every node on
127.0.0.1, each with the environment and appended arguments the platform gives one node), for
tests that signal, kill, restart or attack a node's marun. Lighter than the network-namespace
cluster of tests/e2e: the nodes share the loopback, so only node 0 binds the job's port.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from conftest import clean_env, free_port, shown_while_running

DEADLINE = 90.0  # a hang guard only

# Each rank says it is up, then runs for RUN_FOR seconds (long by default: the job's end comes
# from marun), or, with GO_ON (a path), until that file exists (a test that needs the job to
# outlive something waits for it, then writes the file), and exits 0.
RANKS = """\
import os, time
rank = int(os.environ["RANK"])
print(f"rank {rank} up", flush=True)
go_on = os.environ.get("GO_ON")
if go_on:
    while not os.path.exists(go_on):
        time.sleep(0.05)
else:
    time.sleep(float(os.environ.get("RUN_FOR", "120")))
print(f"rank {rank} done", flush=True)
"""


@dataclass
class Node:
    index: int
    proc: subprocess.Popen[bytes]
    out: Path

    @property
    def output(self) -> str:
        return self.out.read_text(errors="replace")


class LoopbackJob:
    def __init__(
        self,
        root: Path,
        nodes: int = 3,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        self.python = python
        self.root = root
        self.n = nodes
        self.port = free_port()
        self.master = free_port()
        self.extra = dict(env or {})
        self.nodes: dict[int, Node] = {}
        self.runs: dict[int, int] = {}
        self.options: list[str] = []
        self.wrapper: list[str] = []  # a command each marun runs under (`nohup`)

    def env(self, i: int) -> dict[str, str]:
        return clean_env(
            {
                "MA_NUM_HOSTS": str(self.n),
                "MA_NUM_GPUS": "2",
                "VC_TASK_INDEX": str(i),
                "MA_TASK_NAME": "worker",
                "VC_WORKER_HOSTS": ",".join(["127.0.0.1"] * self.n),
                "MA_CURRENT_IP": "127.0.0.1",
                "MARUN_JOB_PORT": str(self.port),
                "MARUN_RUN_DIR": str(self.root / f"node{i}" / "run"),
                "MARUN_GRACE_PERIOD": "5",
                "MARUN_JOB_TOKEN": "loopback-token",
                "MARUN_ARRIVAL_TIMEOUT": "60",
                "MARUN_PEER_TIMEOUT": "20",
                **self.extra,
            }
        )

    def work(self, i: int) -> Path:
        return self.root / f"node{i}" / "job"

    def start(self, hosts: list[int], script: str = RANKS, env: Mapping[str, str] = {}) -> None:
        for i in hosts:
            work = self.work(i)
            work.mkdir(parents=True, exist_ok=True)
            (work / "ranks.py").write_text(script)
            argv = [
                *self.wrapper,
                self.python,
                "-m",
                "marun",
                "run",
                *self.options,
                "--",
                "ranks.py",
            ]
            argv += ["--init_method", f"tcp://127.0.0.1:{self.master}"]
            argv += ["--rank", str(i), "--world_size", str(self.n)]
            self.runs[i] = self.runs.get(i, 0) + 1
            out = self.root / f"node{i}" / f"console{self.runs[i]}.txt"
            with out.open("wb") as sink:
                proc = subprocess.Popen(
                    argv,
                    env={**self.env(i), **env},
                    cwd=work,
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.nodes[i] = Node(i, proc, out)

    def signal(self, i: int, signum: int) -> None:
        self.nodes[i].proc.send_signal(signum)

    def wait_for(self, i: int, pattern: str) -> None:
        node = self.nodes[i]
        if not shown_while_running(
            lambda: bool(re.search(pattern, node.output)), node.proc, DEADLINE
        ):
            raise AssertionError(f"node {i} never showed {pattern!r}\n{self.report()}")

    def finish(self) -> dict[int, int]:
        deadline = time.monotonic() + DEADLINE
        for node in self.nodes.values():
            left = max(0.1, deadline - time.monotonic())
            try:
                node.proc.wait(left)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"node {node.index} still runs\n{self.report()}") from None
        return {i: n.proc.returncode for i, n in self.nodes.items()}

    def report(self) -> str:
        return "\n".join(
            f"--- node {i}: exit {n.proc.poll()}\n{n.output[-4000:]}"
            for i, n in sorted(self.nodes.items())
        )

    def job_json(self) -> str:
        return (self.work(0) / "marun_logs" / "job.json").read_text()

    def kill_all(self) -> None:
        for node in self.nodes.values():
            if node.proc.poll() is None:
                os.killpg(node.proc.pid, signal.SIGKILL)
                node.proc.wait()
