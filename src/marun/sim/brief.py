"""`marun simulate`'s first screen: what the platform injects into each simulated container and
what marun makes of it, short enough to read before the ranks' output (`--full-plan`: the whole
plan instead)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from marun.plan.launch_plan import LaunchPlan

if TYPE_CHECKING:
    from marun.sim.simulate import Container

T = TypeVar("T")


def _wrapped(head: str, words: Sequence[str], width: int = 120) -> list[str]:
    """`head` then `words`, wrapped at `width` with a hanging indent."""
    import textwrap

    return textwrap.wrap(
        " ".join(words),
        width,
        initial_indent=head,
        subsequent_indent="      ",
        break_on_hyphens=False,
        break_long_words=False,
    ) or [head.rstrip()]


SHOWN = 4  # containers, and processes, shown in full: the first ones and the last


def _bounded(items: list[T]) -> tuple[list[T], int]:
    """All of `items` up to SHOWN, else the first SHOWN - 1 and the last, and how many not."""
    if len(items) <= SHOWN:
        return items, 0
    return [*items[: SHOWN - 1], items[-1]], len(items) - SHOWN


def brief_plan(job: LaunchPlan, planned: Sequence[Container], mode: str, nodes: int) -> str:
    """The point of marun in a screen: what the platform injects into each container, what marun
    makes of it (the variables every process gets alike, once; then per process the ones that
    differ), and the plan's notes. `--full-plan` prints the whole plan instead."""
    from marun.inputs.variables import PLATFORM_PREFIXES
    from marun.redact import mask_env

    procs = [(node.index, p) for node in job.nodes for p in node.processes]
    lines = [
        f"marun simulate: a {nodes}-node {mode} job on this machine, each container one "
        "`marun run` given what the platform injects"
    ]
    lines.append("the platform injects:")
    shown, skipped = _bounded(list(planned))
    for container in shown:
        env = mask_env({k: v for k, v in container.env.items() if k.startswith(PLATFORM_PREFIXES)})
        words = [f"{k}={v}" for k, v in sorted(env.items())]
        if container.appended:
            words += ["+ appended:", *container.appended]
        lines += _wrapped(f"  {container.name}: ", words)
        if skipped and container is shown[-2]:
            lines.append(f"  ... {skipped} more container(s), each with its own index")
    # A value under the process's own log directory is shown relative to it: `<logs>/...`.
    envs = [
        {k: v.replace(os.path.dirname(p.log), "<logs>") for k, v in mask_env(p.env).items()}
        for _, p in procs
    ]
    common = dict(envs[0]) if envs else {}
    for env in envs[1:]:
        common = {k: v for k, v in common.items() if env.get(k) == v}
    lines.append("marun makes of it:")
    lines += _wrapped("  every process: ", [f"{k}={v}" for k, v in sorted(common.items())])
    pairs, hidden = _bounded(list(zip(procs, envs)))
    for n, ((index, proc), env) in enumerate(pairs):
        own = [f"{k}={v}" for k, v in sorted(env.items()) if k not in common]
        lines += _wrapped(f"  node {index} {proc.name}: ", own or ["(nothing else)"])
        if hidden and n == len(pairs) - 2:
            lines.append(f"  ... {hidden} more process(es), each with its own ranks")
    lines.append(
        f"  (<logs>: each node's under {os.path.dirname(os.path.dirname(procs[0][1].log))})"
    )
    for note in job.notes:
        if not note.startswith("one process: marun execs it"):
            lines += _wrapped("note: ", [note])
    return "\n".join(lines) + "\n"
