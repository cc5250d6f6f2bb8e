"""The launch plan: a plain value saying what marun starts, and where.

Every mode is a function from the platform's inputs to a `LaunchPlan`. `marun plan` renders it,
`marun run` executes it: one code path up to this value, so a dry-run never disagrees with a run.
The JSON schema (`to_dict`) is documented in docs/plan-schema.md and kept stable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from marun.plan.coordination import Coordination

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class FileSpec:
    """A file marun writes before starting anything (hostfile, sshd config, ...)."""

    path: str
    content: str
    mode: int = 0o644


@dataclass(frozen=True)
class ProcessSpec:
    """One process to start.

    `env` holds only what marun sets or changes; the process inherits the rest of marun's
    environment. `role` is the engine's name for the process (worker, scheduler, ps, chief,
    sshd, mpirun). `rank` is the job-wide rank where the engine has one. A `daemon` is a process
    that never ends by itself (a TF parameter server, sshd): it is stopped once the others are done
    and its exit does not count toward the job's status.
    """

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    log: str
    role: str = "worker"
    rank: int | None = None
    daemon: bool = False


@dataclass(frozen=True)
class NodePlan:
    index: int
    host: str
    files: tuple[FileSpec, ...] = ()
    processes: tuple[ProcessSpec, ...] = ()


@dataclass(frozen=True)
class LaunchPlan:
    mode: str
    nodes: tuple[NodePlan, ...]
    notes: tuple[str, ...] = field(default=())
    # How this node's marun joins the job's others (multi-node jobs of every mode but MPI).
    coordination: Coordination | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "mode": self.mode,
            "nodes": [
                {
                    "index": n.index,
                    "host": n.host,
                    "files": [{"path": f.path, "content": f.content} for f in n.files],
                    "processes": [
                        {
                            "name": p.name,
                            "argv": list(p.argv),
                            "env": dict(p.env),
                            "cwd": p.cwd,
                            "log": p.log,
                            "role": p.role,
                            "rank": p.rank,
                            "daemon": p.daemon,
                        }
                        for p in n.processes
                    ],
                }
                for n in self.nodes
            ],
            "notes": list(self.notes),
        }
        if self.coordination is not None:
            data["coordination"] = self.coordination.to_dict()
        return data
