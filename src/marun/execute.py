"""Carry out this node's plan: write its files, then exec a lone process or supervise many."""

from __future__ import annotations

import os
from pathlib import Path

from marun.errors import MarunError
from marun.plan import FileSpec, LaunchPlan, NodePlan, ProcessSpec


def write_files(files: tuple[FileSpec, ...]) -> None:
    for spec in files:
        path = Path(spec.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Created with its final mode so it is never readable by others, even for a moment.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, spec.mode)
        with os.fdopen(fd, "w") as fh:
            fh.write(spec.content)
        os.chmod(path, spec.mode)


def exec_process(proc: ProcessSpec) -> None:
    """Replace marun with the process: no extra process, no extra latency, signals and exit
    status go straight to and from the platform."""
    os.makedirs(proc.cwd, exist_ok=True)
    os.chdir(proc.cwd)
    env = dict(os.environ)
    env.update(proc.env)
    try:
        os.execvpe(proc.argv[0], list(proc.argv), env)
    except OSError as exc:
        raise MarunError(f"cannot start {proc.argv[0]!r}: {exc.strerror}") from None


def execute(plan: LaunchPlan, supervise: bool = False) -> int:
    if len(plan.nodes) != 1:
        raise MarunError(f"expected a plan for this node only, got {len(plan.nodes)} nodes")
    node: NodePlan = plan.nodes[0]
    write_files(node.files)
    lone = len(node.processes) == 1 and not node.processes[0].daemon
    if lone and not supervise:
        exec_process(node.processes[0])
    raise MarunError(
        f"this node's plan has {len(node.processes)} processes; supervising several processes "
        "is not supported yet (part 2)"
    )
