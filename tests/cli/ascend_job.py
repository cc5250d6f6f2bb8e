"""A multi-node Ascend job of real `marun run` processes on this machine, as the platform starts
it: the start file once per device, each start with RANK_TABLE_FILE, RANK_ID, RANK_SIZE and
ASCEND_DEVICE_ID (per-device starts: a node's several maruns are its slots, and its slot 0 carries
the node's link to node 0, marun.job.relay). Server s of the rank table is 127.0.0.(s+1), so
every node is on this machine's loopback; only node 0 binds the job's port."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conftest import clean_env, free_port, free_ports_after

DEADLINE = 240.0  # a hang guard only


def rank_table(path: Path, servers: int, devices: int) -> Path:
    table = {
        "version": "1.0",
        "server_count": str(servers),
        "server_list": [
            {
                "server_id": f"127.0.0.{s + 1}",
                "host_nic_ip": f"127.0.0.{s + 1}",
                "device": [
                    {
                        "device_id": str(d),
                        "device_ip": f"192.0.2.{(s * devices + d) % 250 + 1}",
                        "rank_id": str(s * devices + d),
                    }
                    for d in range(devices)
                ],
            }
            for s in range(servers)
        ],
        "status": "completed",
    }
    path.write_text(json.dumps(table))
    return path


@dataclass
class Start:
    rank: int
    proc: subprocess.Popen[bytes]
    out: Path

    @property
    def output(self) -> str:
        return self.out.read_text(errors="replace")


class AscendJob:
    def __init__(
        self,
        root: Path,
        servers: int,
        devices: int,
        env: dict[str, str] | None = None,
        hub_ports: int = 0,
    ) -> None:
        self.root = root
        self.servers, self.devices = servers, devices
        self.size = servers * devices
        self.table = rank_table(root / "rank_table.json", servers, devices)
        # (with liveness hubs: the hubs' ports, the job's plus each group's number, free too)
        self.port = free_ports_after(hub_ports) if hub_ports else free_port()
        self.extra = dict(env or {})
        self.starts: dict[int, Start] = {}
        self.earlier: list[Start] = []  # the starts of a recreated pod's earlier maruns

    def start(self, command: list[str], options: tuple[str, ...] = ()) -> None:
        """Every device's start, all at once (node by node, as the platform may)."""
        for server in range(self.servers):
            self.start_server(server, command, options)

    def start_server(self, server: int, command: list[str], options: tuple[str, ...] = ()) -> None:
        """One server's device starts (its pod, created or recreated with the same index)."""
        for device in range(self.devices):
            rank = server * self.devices + device
            work = self.root / f"server{server}"
            work.mkdir(parents=True, exist_ok=True)
            env = clean_env(
                {
                    "RANK_TABLE_FILE": str(self.table),
                    "RANK_ID": str(rank),
                    "RANK_SIZE": str(self.size),
                    "ASCEND_DEVICE_ID": str(device),
                    "MA_NUM_GPUS": str(self.devices),
                    "MARUN_JOB_PORT": str(self.port),
                    "MARUN_JOB_TOKEN": "ascend-job-token",
                    # hundreds of maruns on 2 shared cores: a rank told to stop by a round may
                    # not run for 20 s (one that outlives SIGKILL fails the round)
                    "MARUN_GRACE_PERIOD": "30",
                    # 512 maruns spawned one by one on 2 busy cores arrive over about 150 s
                    # (153 s in a CI run; node 0's start to the last node_arrived): a hang
                    # guard well above that, not a limit the job should come near
                    "MARUN_ARRIVAL_TIMEOUT": "400",
                    "MARUN_PEER_TIMEOUT": "60",
                    **self.extra,
                }
            )
            argv = [sys.executable, "-m", "marun", "run", "--mode", "ascend", *options, "--"]
            earlier = self.starts.get(rank)
            if earlier is not None:  # a recreated pod: the earlier output stays, for the report
                self.earlier.append(earlier)
            again = sum(1 for e in self.earlier if e.rank == rank)
            out = self.root / (
                f"console_{rank}.txt" if not again else f"console_{rank}.{again}.txt"
            )
            with out.open("wb") as sink:
                proc = subprocess.Popen(
                    [*argv, *command],
                    env=env,
                    cwd=work,
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.starts[rank] = Start(rank, proc, out)

    def wait_up(self, up: Path) -> None:
        """Until every rank has written its file into `up` (the ranks' own doing); every marun
        stays up meanwhile."""
        self._wait(
            lambda: up.is_dir() and len(list(up.iterdir())) >= self.size,
            lambda: f"{up.name}: not every rank came up\n{self.report()}",
        )

    def wait_for_line(self, rank: int, text: str, *others: str) -> None:
        """Until rank `rank`'s marun has printed `text` (or one of `others`) on its console;
        every marun stays up meanwhile."""
        texts = (text, *others)
        self._wait(
            lambda: any(t in self.starts[rank].output for t in texts),
            lambda: f"none of {texts!r} from rank {rank}\n{self.report([rank])}",
        )

    def _wait(self, done: Callable[[], bool], missing: Callable[[], str]) -> None:
        end = time.monotonic() + DEADLINE
        while not done():
            assert time.monotonic() < end, missing()
            assert all(s.proc.poll() is None for s in self.starts.values()), self.report()
            time.sleep(0.1)

    def finish(self, ranks: list[int] | None = None) -> dict[int, int]:
        deadline = time.monotonic() + DEADLINE
        chosen = [self.starts[r] for r in (ranks if ranks is not None else sorted(self.starts))]
        for start in chosen:
            try:
                start.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise AssertionError(
                    f"rank {start.rank}'s marun still runs\n{self.report()}"
                ) from None
        return {s.rank: s.proc.returncode for s in chosen}

    def report(self, ranks: list[int] | None = None) -> str:
        chosen = ranks if ranks is not None else sorted(self.starts)[:16]
        return "\n".join(
            f"--- rank {r}: exit {self.starts[r].proc.poll()}\n{self.starts[r].output[-3000:]}"
            for r in chosen
        )

    def job_json(self) -> dict[str, object]:
        found = list((self.root / "server0").rglob("job.json"))
        assert found, "node 0 wrote no job.json"
        data: dict[str, object] = json.loads(found[0].read_text())
        return data

    def kill_all(self) -> None:
        for start in [*self.starts.values(), *self.earlier]:
            if start.proc.poll() is None:
                os.killpg(start.proc.pid, signal.SIGKILL)
                start.proc.wait()


def left_running(root: Path) -> list[str]:
    """The processes whose working directory is under root (every marun and rank of a job)."""
    left = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if cwd.startswith(f"{root}{os.sep}"):  # the servers' directories
            left.append(f"{pid}: {cmd}")
    return left
