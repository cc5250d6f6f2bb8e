"""The network-namespace cluster lives in the package (`marun simulate --mode mpi` uses it);
tests import it from here under its old name."""

from marun.netns_cluster import NAME_PREFIX, NetnsCluster, available, cleanup_stale

__all__ = ["NAME_PREFIX", "NetnsCluster", "available", "cleanup_stale"]
