"""The files MPI mode keeps in a node's run directory, by name, shared by the planner
and the processes that carry it out (sshd_bootstrap, leader).

The run directory is `<run_dir>/<MA_VJ_NAME or "local">`, mode 0700, one per node.
"""

from __future__ import annotations

SSHD_CONFIG = "sshd_config"
SSHD_LOG = "sshd.log"
PID_FILE = "sshd.pid"
HOST_KEY = "ssh_host_ed25519_key"  # generated per container
JOB_KEY = "id_ed25519"  # the per-job client key, when the platform mounts none
AUTHORIZED_KEYS = "authorized_keys"  # authorizes the per-job key (or the mounted id_rsa.pub)
HOSTFILE = "hostfile"  # node 0: host names as planned, addresses once the cluster has formed
