"""Hot spares: the places a spare holds, in the processes of the other nodes that name every
place's host (docs/supervision.md, "Hot spares").

In pytorch and mindspore mode a node's processes name node 0's host alone, so a spare that takes
place j changes nothing elsewhere. In mpi mode node 0's mpirun reaches every place by ssh: its
hostfile names each place's host, so each round's `start` tells node 0 which places spares hold
(`Start.hosts`, node 0's job state: marun.job.spares.placed_hosts) and node 0's leader process
(marun.mpi.leader) gets them in `MARUN_PLACE_HOSTS` and rewrites those lines of the hostfile
before it checks the cluster and starts mpirun. In tensorflow mode (a cluster of workers alone)
every worker's `TF_CONFIG` lists every place's `HOST:PORT`: each worker of the round is started
with those places' hosts in it (the port stays the place's: a spare's TF server listens on it).
"""

from __future__ import annotations

from collections.abc import Sequence

from marun.errors import InputError
from marun.inputs.records import replace
from marun.plan.launch_plan import ProcessSpec

PLACE_HOSTS_VAR = "MARUN_PLACE_HOSTS"  # "1=host-d,2=10.0.0.7": place=host, a spare's each


def with_place_hosts(spec: ProcessSpec, hosts: Sequence[tuple[int, str]]) -> ProcessSpec:
    """The process as it starts while spares hold `hosts` (place, host): node 0's MPI leader is
    told them, a TensorFlow worker's TF_CONFIG names them; every other process is as planned."""
    if not hosts:
        return spec
    if spec.role == "leader":
        value = ",".join(f"{place}={host}" for place, host in hosts)
        return replace(spec, env={**spec.env, PLACE_HOSTS_VAR: value})
    if "TF_CONFIG" in spec.env:
        return replace(
            spec, env={**spec.env, "TF_CONFIG": _tf_config(spec.env["TF_CONFIG"], hosts)}
        )
    return spec


def _tf_config(text: str, hosts: Sequence[tuple[int, str]]) -> str:
    """TF_CONFIG with worker `place`'s host replaced, its port kept (as the planner writes it:
    marun.plan.modes.tensorflow.tf_config)."""
    import json

    from marun.inputs.tf_hosts import moved

    config = json.loads(text)
    workers = config.get("cluster", {}).get("worker", [])
    for place, host in hosts:
        address = moved(workers[place], host) if place < len(workers) else None
        if address is not None:
            workers[place] = address
    return json.dumps(config, separators=(",", ":"))


def parse_place_hosts(text: str, places: int) -> dict[int, str]:
    """`MARUN_PLACE_HOSTS` as the leader reads it (places 1 .. places-1: node 0 is never
    replaced); one line of bad input for anything else."""
    from marun.inputs.hosts import is_host

    out: dict[int, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        place, sep, host = item.partition("=")
        if not (sep and place.isdigit() and 0 < int(place) < places):
            raise InputError(
                f"{PLACE_HOSTS_VAR}={text!r}: {item!r} is not PLACE=HOST with a place from 1 to "
                f"{places - 1}"
            )
        if not is_host(host):
            raise InputError(
                f"{PLACE_HOSTS_VAR}={text!r}: {host!r} is not a host name or an IP address"
            )
        out[int(place)] = host
    return out
