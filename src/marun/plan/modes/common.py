"""Pieces every mode uses: the script's argv, the log directory, the NIC variables, the
supervision settings."""

from __future__ import annotations

import os

from marun.inputs.injected import Platform, resolve_command
from marun.inputs.nic import Nic
from marun.plan.coordination import JobShape
from marun.plan.launch_plan import LaunchPlan, NodePlan, Supervision


def script_argv(platform: Platform) -> tuple[str, ...]:
    """The user's command, with the platform's appended words kept when asked to."""
    argv = resolve_command(platform.command, platform.cwd, platform.python)
    if platform.settings.keep_platform_args:
        argv = (*argv, *platform.appended.words)
    return argv


def log_dir(platform: Platform) -> str:
    """Where per-process logs go: --log-dir, else $MA_LOG_DIR/marun (collected by the platform),
    else ./marun_logs."""
    if platform.settings.log_dir:
        return os.path.join(platform.cwd, platform.settings.log_dir)
    if platform.env.get("MA_LOG_DIR"):
        return os.path.join(platform.env["MA_LOG_DIR"], "marun")
    return os.path.join(platform.cwd, "marun_logs")


def socket_ifname_env(platform: Platform, nic: Nic, names: tuple[str, ...]) -> dict[str, str]:
    """Set each `*_SOCKET_IFNAME` the user has not set already, to an interface chosen by the
    `nic` setting or by an address known to be this node's or its peers' meeting point; never to
    a guess from the default route, which would pin the collective library to the wrong NIC
    where it would have found the right one by itself."""
    if nic.guessed:
        return {}
    # NCCL, Gloo and HCCL each take a comma-separated list: a configured list goes as this
    # node's interfaces of it.
    return {name: nic.local_ifname for name in names if not platform.env.get(name)}


def supervision(platform: Platform, always_supervise: bool = False) -> Supervision:
    """The settings' supervision part, checked (bad input ends here, before any plan is made).
    result.json goes to the log directory."""
    settings = platform.settings
    return Supervision(
        grace_period=settings.grace_period,
        recovery_restarts=settings.recovery_restarts,
        recovery_wait=settings.recovery_wait,
        console_ranks=settings.console_ranks,
        record_dir=log_dir(platform),
        always_supervise=always_supervise,
        max_restarts=settings.max_restarts,
        fatal_exit_codes=exit_codes("fatal_exit_codes", settings.fatal_exit_codes),
        quick_failure=settings.quick_failure,
        collapse_window=settings.collapse_window,
        progress_pattern=settings.progress_pattern,
        preload=settings.preload,
    )


def exit_codes(name: str, words: tuple[str, ...]) -> tuple[int, ...]:
    """A setting's list of exit codes (1-255), each checked: one line naming the bad one."""
    from marun.inputs.numbers import parse_int

    where = f"--{name.replace('_', '-')}, MARUN_{name.upper()} or config key {name}"
    return tuple(parse_int(where, word, 1, 255) for word in words)


def pending_table_plan(mode: str, platform: Platform, raw_table: str, then: str) -> LaunchPlan:
    """A dry run's plan while the rank table is still `initializing`: this node, no process
    (which device each rank drives, and where, is the table's to say), and a note that `marun
    run` would wait for the table and plan `then` from it. `marun plan` never waits."""
    from marun.errors import InputError
    from marun.inputs.ranktable_platform import pending_note

    try:
        given = platform.given_task_index()
    except InputError:
        given = None  # a wrong index is the table's to refuse, once it is there
    index = given[1] if given is not None else 0
    note = pending_note(platform, raw_table, then)
    # The table gives the job's shape; a dry run does not wait for it: planned as one node,
    # with no coordination.
    return LaunchPlan(
        mode=mode,
        nodes=(NodePlan(index, platform.hostname),),
        notes=(note,),
        shape=JobShape.one_node(platform.hostname, index),
    )
