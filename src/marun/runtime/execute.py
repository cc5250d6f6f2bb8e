"""Carry out this node's plan: write its files, then exec a lone process or supervise many."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable

from marun._files import atomic_write, private_dir
from marun.errors import InputError, MarunError
from marun.plan.launch_plan import (
    ERROR_FILE_VAR,
    FileSpec,
    LaunchPlan,
    NodePlan,
    ProcessSpec,
    execs_lone_process,
    plan_file_name,
)

TYPE_CHECKING = False  # typing's, without importing typing on the path to exec (mypy: True)
if TYPE_CHECKING:  # a single-node job loads nothing of the job's link
    from marun.runtime.joblink import JobLink
    from marun.runtime.output import Console

    # Opens this node's link to the job's others (marun.launch.open_link: marun.job's, which
    # the runtime never imports).
    LinkOpener = Callable[[LaunchPlan], JobLink]


def write_files(files: tuple[FileSpec, ...]) -> None:
    """Write the plan's files, each atomically with its final mode and never through a planted
    symlink (marun._files.atomic_write), in a directory private to this user (created 0700; an
    existing one must be a real directory of ours: the run directory's path is predictable,
    `$TMPDIR/marun-<uid>/<job>`, and one made by another user first would let them swap the
    files). A file that cannot be written is bad input: one line naming the path and why."""
    for spec in files:
        try:
            private_dir(os.path.dirname(spec.path) or ".")
            atomic_write(spec.path, spec.content, spec.mode)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise InputError(
                f"cannot write {spec.path}: {reason}; expected a path marun can create "
                "(check the directory and its permissions, or the setting that names it)"
            ) from None


def refuse_taken_ports(node: NodePlan) -> None:
    """Every port a process of this node will listen on must be free now: a taken one (another
    job's scheduler, a leftover rank) is bad input, one line, before anything starts, instead of
    the framework's `address already in use` or its rendezvous time-out minutes later."""
    from marun.inputs.port_probe import bind_error

    for proc in node.processes:
        for port in proc.listens:
            exc = bind_error(port)
            if exc is not None:
                raise InputError(
                    f"port {port} ({proc.name} listens on it) is taken on this node "
                    f"({exc.strerror}); expected a free port: stop what holds it, or choose "
                    "another (the rendezvous or scheduler port)"
                )


def prepare_error_file(spec: ProcessSpec) -> None:
    """Before each start of a process given TORCHELASTIC_ERROR_FILE: its directory exists (torch's
    `@record` would otherwise fail writing it, over the script's own exception) and no file of
    an earlier start or run is left there (torchrun gives each attempt a new directory)."""
    path = spec.env.get(ERROR_FILE_VAR)
    if not path:
        return
    with contextlib.suppress(OSError):
        private_dir(os.path.dirname(path) or ".", strict=False)
    with contextlib.suppress(OSError):
        os.unlink(path)


def write_plan_record(plan: LaunchPlan, node: NodePlan) -> None:
    """The plan this node carries out, as `marun plan --format json` shows it (secrets masked),
    into its log directory (`plan.json`, `plan.node<i>.json`): the platform keeps that directory,
    so what each process was started with (argv, env, cwd) stays with its logs. A record that
    cannot be written stops nothing (the logs it would sit beside are the run's to report)."""
    directory = plan.supervision.record_dir
    if not directory and node.processes:
        directory = os.path.dirname(node.processes[0].log)
    if not directory or not node.processes:
        return
    from marun.plan.render import render_json

    with contextlib.suppress(OSError):
        path = os.path.join(private_dir(directory, strict=False), plan_file_name(node.index))
        atomic_write(path, render_json(plan), 0o600)


def exec_process(proc: ProcessSpec) -> None:
    """Replace marun with the process: no extra process, no extra latency, signals and exit
    status go straight to and from the platform."""
    try:
        os.makedirs(proc.cwd, exist_ok=True)
        os.chdir(proc.cwd)
    except OSError as exc:
        raise InputError(
            f"working directory of {proc.name} {proc.cwd!r}: expected a directory marun can "
            f"create ({exc.strerror})"
        ) from None
    env = dict(os.environ)
    env.update(proc.env)
    prepare_error_file(proc)
    # exec discards Python's buffers: what marun has printed so far must get out first.
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(proc.argv[0], list(proc.argv), env)
    except OSError as exc:
        raise MarunError(f"cannot start {proc.argv[0]!r}: {exc.strerror}") from None


def node_console(plan: LaunchPlan, node: NodePlan) -> Console:
    """marun's stdout for this node's supervisor: lines collapsed across ranks where the node
    shows more than two ranks and `collapse_window` is not 0 (marun.runtime.collapse), and the
    node's progress read from what the relay reads (`console.progress`, marun.runtime
    .node_progress). Neither where the processes are whole `marun run`s (no prefix: theirs do)."""
    from marun.runtime.output import Console

    supervision = plan.supervision
    if not supervision.prefix_output:
        return Console()
    selection = supervision.console
    shown = sum(selection.shows(p.name, p.role, p.rank) for p in node.processes)
    console: Console
    if shown > 2 and supervision.collapse_window > 0:
        from marun.runtime.collapse import CollapsingConsole

        console = CollapsingConsole(supervision.collapse_window)
    else:
        console = Console()
    from marun.runtime.node_progress import NodeProgress

    console.progress = NodeProgress(node.index, node.processes, supervision.progress_pattern)
    return console


def execute(plan: LaunchPlan, open_link: LinkOpener) -> int:
    """Run this node's plan and return marun's exit code.

    A plan of exactly one non-daemon process is exec'd (marun becomes it) unless its supervision
    says `always_supervise`; anything else is started and watched by the supervisor under
    `plan.supervision` (marun.runtime.supervisor says how the exit code is chosen).
    """
    if len(plan.nodes) != 1:
        raise MarunError(f"expected a plan for this node only, got {len(plan.nodes)} nodes")
    node: NodePlan = plan.nodes[0]
    refuse_taken_ports(node)
    # As PID 1 (a container's ENTRYPOINT) marun never execs: the kernel gives PID 1 no default
    # signal actions, so a script without its own SIGTERM handler would ignore `docker stop`
    # until the SIGKILL, and nobody would reap orphans. marun stays, relays and reaps (tini's job).
    # A coordinated node (one of several) stays too: it reports to node 0 and follows its stop.
    # A process MindSpore recovers must be restarted when it dies: marun stays in front of it.
    if execs_lone_process(plan) and os.getpid() != 1 and not plan.supervision.always_supervise:
        write_files(node.files)
        write_plan_record(plan, node)
        exec_process(node.processes[0])
    if not node.processes:
        write_files(node.files)
        return 0
    from marun.runtime import early_signals
    from marun.runtime.supervisor import Supervisor

    early_signals.hold()  # a stop signal now is the supervisor's to act on (early_signals)
    # The job: node 0's (a coordinated plan), or this node's own (marun.launch.open_link).
    link = open_link(plan)
    # Built first: what it refuses (a cwd or log it cannot create) is refused before any write.
    # marun simulate runs every node's marun on one console: it says so, and only node 0 then
    # prints the job's first failure with its last lines (the others, one line each).
    shared = os.environ.get("MARUN_SHARED_CONSOLE") == "1"
    console = node_console(plan, node)
    if console.progress is not None:
        link.watch_progress(console.progress.report)  # each heartbeat carries the steps
    supervisor = Supervisor(plan, node, link, console=console, shared_console=shared)
    write_files(node.files)
    write_plan_record(plan, node)
    return supervisor.run()
