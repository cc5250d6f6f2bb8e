"""Starting one planned process: its environment on top of marun's, its output into a pipe, its
own session (a signal to its group reaches what it starts), and, between fork and exec, death
with marun (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable

from marun.plan.launch_plan import ProcessSpec
from marun.runtime.execute import prepare_error_file


def _die_with_marun_setup() -> Callable[[], None] | None:
    """A child-side hook that has the kernel SIGKILL the process when marun dies (Linux's
    PR_SET_PDEATHSIG), so that ranks never outlive a marun that was itself SIGKILLed (an OOM
    kill, `kill -9`, a node agent's force stop): they would hold the accelerators and the
    job's ports. None where it is not available; supervision works the same without it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def setup() -> None:  # runs in the child between fork and exec: a single system call
        prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)

    return setup


DIE_WITH_MARUN = _die_with_marun_setup()


def spawn(spec: ProcessSpec, output_fd: int) -> subprocess.Popen[bytes]:
    """`spec` started, its stdout and stderr on `output_fd`; OSError when it cannot start."""
    env = dict(os.environ)
    env.update(spec.env)
    prepare_error_file(spec)
    return subprocess.Popen(
        list(spec.argv),
        cwd=spec.cwd,
        env=env,
        stdout=output_fd,
        stderr=output_fd,
        start_new_session=True,
        # One prctl call between fork and exec: no lock is taken, so threads (the relay's pumps,
        # the job link's) cannot deadlock it.
        preexec_fn=DIE_WITH_MARUN,  # noqa: PLW1509
    )
