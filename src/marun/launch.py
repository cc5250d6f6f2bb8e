"""The composition root: the one route from what the platform injected to a running node,
inputs -> plan -> (the job's link) -> runtime. `marun plan`, `marun run` (the typer CLI and the
typer-free start path alike), `marun simulate` and `marun doctor` all go through here, so what
one shows is what another runs.

It is the only module that knows every planner (marun.plan.modes' and marun.mpi's) and the
job's coordination (marun.job): each is imported for real, inside the function that needs it
(a planner only when its mode is chosen, the job's link only on a coordinated node), so the
architecture test sees every edge and `marun run`'s exec path loads nothing it does not use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from marun.inputs.injected import Platform
from marun.inputs.records import replace
from marun.plan.launch_plan import LaunchPlan
from marun.plan.modes import Planner

TYPE_CHECKING = False  # typing's, without importing typing on the path to exec (mypy: True)
if TYPE_CHECKING:  # a single-node job loads nothing of the job's link
    from typing import Any

    from marun.runtime.joblink import JobLink


def planner(mode: str) -> Planner:
    """The planner of `mode` (one of marun.plan.modes.MODES), imported only when chosen. A new
    mode adds its branch here; tests/unit/test_modes.py checks every mode has one."""
    if mode == "ascend":
        from marun.plan.modes import ascend

        return ascend.plan
    if mode == "mindspore":
        from marun.plan.modes import mindspore

        return mindspore.plan
    if mode == "pytorch":
        from marun.plan.modes import pytorch

        return pytorch.plan
    if mode == "tensorflow":
        from marun.plan.modes import tensorflow

        return tensorflow.plan
    if mode == "mpi":
        from marun.mpi import planner as mpi_planner

        return mpi_planner.plan
    raise KeyError(mode)


def build_plan(
    mode: str, platform: Platform, all_nodes: bool = False, always_supervise: bool = False
) -> LaunchPlan:
    """The plan `marun plan` shows and `marun run` executes. `always_supervise` is `--supervise`."""
    from marun.plan.modes import plan_with

    return plan_with(mode, platform, planner, all_nodes, always_supervise)


def read_inputs(
    command: Sequence[str],
    config: str | None,
    cli_settings: Mapping[str, object],
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> Platform:
    """The settings (`cli_settings`: the options given, by Settings field name; then the
    MARUN_* variables of `env`; then `config`) and what the platform injected, read from `env`
    and `cwd` (this process's when None)."""
    from marun.inputs.injected import read_platform
    from marun.inputs.settings import load_settings

    env = dict(os.environ if env is None else env)
    cwd = os.getcwd() if cwd is None else cwd
    settings = load_settings(cli_settings, env, cwd, config).settings
    return read_platform(list(command), env, cwd, settings)


def plan_from_environment(
    command: Sequence[str],
    mode: str,
    config: str | None,
    cli_settings: Mapping[str, object],
    all_nodes: bool = False,
    always_supervise: bool = False,
    *,
    dry_run: bool = False,
) -> LaunchPlan:
    """What `marun plan` shows and `marun run` executes: this process's environment and working
    directory, the settings, the platform read from them, and the mode's plan. One function for
    both commands; `dry_run` (`marun plan`) waits for no host name (Platform.dry_run)."""
    return platform_and_plan(
        command, mode, config, cli_settings, all_nodes, always_supervise, dry_run=dry_run
    )[1]


def platform_and_plan(
    command: Sequence[str],
    mode: str,
    config: str | None,
    cli_settings: Mapping[str, object],
    all_nodes: bool = False,
    always_supervise: bool = False,
    *,
    dry_run: bool = False,
) -> tuple[Platform, LaunchPlan]:
    """`plan_from_environment`'s plan with the platform it was made from (`marun run` opens the
    job's link with it: its preflight setting)."""
    platform = read_inputs(command, config, cli_settings)
    if dry_run:
        platform = replace(platform, dry_run=True)
    return platform, build_plan(mode, platform, all_nodes, always_supervise)


def open_link(plan: LaunchPlan, platform: Platform | None = None) -> JobLink:
    """This node's link to its job (marun.job): to node 0's coordinator for a coordinated plan,
    else the job of this node alone, in this process (marun.job.local_job); `platform` (what
    this node was given) brings its preflight setting."""
    coord = plan.coordination
    if coord is None:
        from marun.job.local_job import LocalJob  # (nothing of the wire: no socket, no thread)

        return LocalJob(plan, _job_log)
    import contextlib

    from marun._files import private_dir
    from marun.errors import InputError
    from marun.job.link import open_link as open_job_link
    from marun.log import get_logger, log_to_file

    # The coordination's events (node_arrived, job_start, ...) go to this node's events file
    # from the start, as the supervisor's do (marun.log).
    node = plan.nodes[0]
    if node.processes:
        record_dir = plan.supervision.record_dir or os.path.dirname(node.processes[0].log)
        with contextlib.suppress(OSError):
            log_to_file(private_dir(record_dir, strict=False))
    try:
        link: Any = open_job_link(plan, get_logger("marun.job"), platform)
    except OSError as exc:
        # Bad input, as a taken rendezvous port is (runtime.execute.refuse_taken_ports): most
        # often another job's node 0 on this host with the same job port. Nothing started.
        raise InputError(
            f"job_port={coord.port}: node {coord.index} cannot listen for the job's nodes "
            f"({exc.strerror}: another job's marun on this host?); expected a free port "
            "(set job_port per job)"
        ) from None
    joined: JobLink = link
    return joined


def _job_log(event: str, level: str = "info", **fields: object) -> None:
    """A job of one node's events, into the node's events file: marun.log is imported by then
    (the job speaks only after the node's processes started)."""
    from marun.log import get_logger

    getattr(get_logger("marun.job"), level)(event, **fields)


def _run_placed(platform: Platform, plan: LaunchPlan, mode: str, supervise: bool) -> int:
    """Hot spares (marun.plan.spares): join the job, wait for the place node 0 gives this node
    (at the start for those that train; a spare when a lost node's place is its own), plan this
    node as that place, and run it on the same link. A stop signal before a place is said to node
    0 as any node's: before the start it is the job's failure (as without spares); after it, the
    node is a spare and leaves (its marun exits 128+N, the job goes on with one spare less). The
    job's stop before a place: this node ran nothing; it exits with the job's code."""
    import sys

    from marun.exit_codes import signal_exit
    from marun.runtime import early_signals
    from marun.runtime.execute import execute

    coord = plan.coordination
    assert coord is not None
    early_signals.hold()  # a stop signal from now on is recorded, and acted on below
    link = open_link(plan, platform)
    event = link.wait_for_place(early_signals.first)  # type: ignore[attr-defined]
    if event is None or event.kind != "place":
        signum = early_signals.first()
        # (node 0's stop before a place: its code is this node's, e.g. refused by the preflight)
        stop = event.code if event is not None and event.kind == "stop" else 0
        own = stop if signum is None else signal_exit(signum)
        if signum is not None:
            # Node 0 decides what it means: before the start, the job's failure (as without
            # spares); after it, a spare (no place) leaves and the job goes on.
            from marun.runtime.failure import Failure
            from marun.runtime.signals import signal_name

            name = signal_name(signum)
            why = f"node {coord.index} stopped by {name} before it had a place"
            link.report_failure(Failure(exit_code=own, signal=name, stop_signal=name, why=why))
        code = link.report_end("spare", own)
        link.close()
        if signum is not None:
            code = own  # (as any node stopped while it waits for the job's end)
        failure = event.failure if event is not None else None
        if failure is not None and failure.node == coord.index and failure.why:
            sys.stderr.write(f"marun: {failure.why}\n")  # why node 0 stopped this node
        sys.stderr.write(f"marun: node {coord.index} ran nothing (no place); it ends with {code}\n")
        return code
    place = event.code
    if place != plan.nodes[0].index or not plan.nodes[0].processes:
        from marun.plan.spares import as_place, check_place

        nodes = coord.nodes - coord.spares
        check_place(place, nodes)
        alone = replace(platform, settings=replace(platform.settings, spares=0))
        placed = build_plan(mode, as_place(alone, place, nodes), False, supervise)
        plan = replace(placed, coordination=coord)
    return execute(plan, lambda _plan: link)


def run_node(
    command: Sequence[str],
    mode: str,
    config: str | None,
    supervise: bool,
    cli: Mapping[str, object],
) -> int:
    """`marun run`: this node's plan, exec'd or supervised; the exit code. `cli`: the settings
    options given on the command line by name (None: not given)."""
    import functools

    from marun.runtime import early_signals
    from marun.runtime.execute import execute

    early_signals.listen()  # a stop signal from now on ends the job (runtime.early_signals)
    try:
        platform, plan = platform_and_plan(command, mode, config, cli, False, supervise)
        if plan.coordination is not None and plan.coordination.spares:
            return _run_placed(platform, plan, mode, supervise)
        return execute(plan, functools.partial(open_link, platform=platform))
    except early_signals.EarlyStop as stop:  # while planning: nothing started, nothing said
        from marun.exit_codes import signal_exit

        return signal_exit(stop.signum)
    except KeyboardInterrupt:  # Ctrl-C before the job starts: 130, as typer ends it
        import signal

        from marun.exit_codes import signal_exit

        return signal_exit(signal.SIGINT)
