"""The network-namespace cluster of `marun simulate --mode mpi`, with the faults only tests
inject: a cut link, a dead host."""

from __future__ import annotations

import time
from collections.abc import Collection
from pathlib import Path

from marun.sim import netns, netns_system
from marun.sim.netns import NAME_PREFIX, available, cleanup_stale

__all__ = ["NAME_PREFIX", "NetnsCluster", "available", "cleanup_stale"]


class NetnsCluster(netns.NetnsCluster):
    def cut_link(self, i: int) -> None:
        """Unplug host i: its switch port goes down. Its processes keep running; peers get no
        answer from it (time-outs, not refusals), as from a partitioned node."""
        netns._ip_batch(self.switch, [f"link set p{self._port(i)} down"])

    def restore_link(self, i: int) -> None:
        netns._ip_batch(self.switch, [f"link set p{self._port(i)} up"])

    def drop_host(self, i: int) -> None:
        """Host i dies: every process on it is SIGKILLed (a dead machine gets no SIGTERM) and
        its link cut. Its namespaces stay, so `restore_link` + `popen` can 'reboot' it."""
        self.kill_host(i)
        self.cut_link(i)

    def kill_host(self, i: int) -> None:
        """Host i's pod is gone at once: every process on it SIGKILLed, its link up (its
        connections close: the kernel says so to their peers)."""
        ns = self._netns[self.netns(i)]
        left = netns._end_processes({ns}, grace=0, keep={self._anchors[i].pid})
        if left:
            raise RuntimeError(f"host {i}: processes {left} survived SIGKILL")

    def _port(self, i: int) -> int:
        self._check(i)
        if not self._started or self._done:
            raise RuntimeError(f"cluster {self.id} is not running")
        return i

    # -- looking at the cluster -------------------------------------------------------------
    def pids(self) -> list[int]:
        """Every process in the cluster's namespaces (as `ip netns pids` finds them), nested
        PID namespaces included, but the cluster's own anchors."""
        return self._pids(set(self._netns.values()))

    def host_pids(self, i: int) -> list[int]:
        """The processes of host i (its anchor left out)."""
        ns = self._netns.get(self.netns(i))
        return self._pids({ns} if ns else set())

    def _pids(self, netns: Collection[netns_system.NsId]) -> list[int]:
        anchors = {a.pid for a in self._anchors}
        return [p for p in netns_system._pids_in(netns) if p not in anchors] if netns else []

    def listening(self, i: int, port: int) -> bool:
        """Whether a TCP socket listens on `port` on host i (read from the kernel's table of
        host i's network namespace: nothing is started)."""
        self._check(i)
        for table in ("tcp", "tcp6"):
            try:
                lines = Path(f"/proc/{self._anchors[i].pid}/net/{table}").read_text()
            except OSError:
                continue
            for line in lines.splitlines()[1:]:
                fields = line.split()
                # local address `HEXADDR:HEXPORT`, state 0A = LISTEN
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                    return True
        return False

    def wait_listening(self, i: int, port: int, timeout: float = 10.0) -> None:
        """Wait until something listens on host i's `port`; TimeoutError after `timeout` s."""
        deadline = time.monotonic() + timeout
        while not self.listening(i, port):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"nothing listens on {self.name(i)}:{port} after {timeout:g}s")
            time.sleep(0.01)
