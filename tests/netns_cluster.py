"""The network-namespace cluster of `marun simulate --mode mpi`, with the faults only tests
inject: a cut link, a dead host."""

from __future__ import annotations

from marun.sim import netns
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
        ns = self._netns[self.netns(i)]
        left = netns._end_processes({ns}, grace=0, keep={self._anchors[i].pid})
        if left:
            raise RuntimeError(f"host {i}: processes {left} survived SIGKILL")
        self.cut_link(i)

    def _port(self, i: int) -> int:
        self._check(i)
        if not self._started or self._done:
            raise RuntimeError(f"cluster {self.id} is not running")
        return i
