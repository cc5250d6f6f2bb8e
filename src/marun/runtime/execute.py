"""Carry out this node's plan: write its files, then exec a lone process or supervise many."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from marun.errors import MarunError
from marun.plan.launch_plan import FileSpec, LaunchPlan, NodePlan, ProcessSpec

if TYPE_CHECKING:
    from marun.inputs.settings import Settings
    from marun.runtime.joblink import JobLink


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
    # exec discards Python's buffers: what marun has printed so far must get out first.
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(proc.argv[0], list(proc.argv), env)
    except OSError as exc:
        raise MarunError(f"cannot start {proc.argv[0]!r}: {exc.strerror}") from None


def execute(
    plan: LaunchPlan,
    supervise: bool = False,
    *,
    settings: Settings | None = None,
    record_dir: str | None = None,
) -> int:
    """Run this node's plan and return marun's exit code.

    A plan of exactly one non-daemon process is exec'd (marun becomes it) unless `supervise`;
    anything else is started and watched by the supervisor (marun.runtime.supervisor says how
    the exit code is chosen). `settings` default to the environment's and ./marun.yaml's (as the
    CLI reads them); `record_dir` is where result.json goes (default: the first process's log
    directory).
    """
    if len(plan.nodes) != 1:
        raise MarunError(f"expected a plan for this node only, got {len(plan.nodes)} nodes")
    node: NodePlan = plan.nodes[0]
    # As PID 1 (a container's ENTRYPOINT) marun never execs: the kernel gives PID 1 no default
    # signal actions, so a script without its own SIGTERM handler would ignore `docker stop`
    # until the SIGKILL, and nobody would reap orphans. marun stays, relays and reaps (tini's job).
    # A coordinated node (one of several) stays too: it reports to node 0 and follows its stop.
    lone = (
        len(node.processes) == 1
        and not node.processes[0].daemon
        and os.getpid() != 1
        and plan.coordination is None
    )
    if lone and not supervise:
        write_files(node.files)
        exec_process(node.processes[0])
    from marun.runtime.output import Console
    from marun.runtime.supervisor import Supervisor, options_from_settings

    if settings is None:
        from marun.inputs.settings import load_settings

        settings = load_settings({}, os.environ, os.getcwd()).settings
    options = options_from_settings(settings, record_dir)
    if not node.processes:
        write_files(node.files)
        return 0
    link = None
    if plan.coordination is not None:
        link = _open_link(plan)
    supervisor = Supervisor(plan, node, options, Console(), link)
    write_files(node.files)
    return supervisor.run()


def _open_link(plan: LaunchPlan) -> JobLink:
    """The coordination of a multi-node job (marun.job), loaded by name: the runtime never
    imports it, and a single-node job never loads it."""
    from importlib import import_module

    from marun.runtime.log import get_logger

    coord = plan.coordination
    assert coord is not None
    try:
        link: JobLink = import_module("marun.job.link").open_link(plan, get_logger("marun.job"))
    except OSError as exc:
        raise MarunError(
            f"job_port={coord.port}: node {coord.index} cannot listen for the job's nodes "
            f"({exc.strerror}); expected a free port (set job_port)"
        ) from None
    return link
