"""The exit codes marun ends with, one name each (`*_EXIT`), as a shell and the platform read
them. A node's marun ends with the job's code, so these are job-wide: every node of a job that
was stopped for one of these reasons exits with the same number (docs/supervision.md).

Besides these, a process's own non-zero code is passed on unchanged (the job's first failure).
"""

from __future__ import annotations

import errno

LOST_EXIT = 1  # a node vanished, or never arrived (the job's coordination)
NO_CLUSTER_EXIT = 1  # MPI: the cluster did not form (a host never answered), mpirun never ran
BAD_INPUT_EXIT = 2  # bad input: one line naming it, nothing started
HANG_EXIT = 124  # the hang watchdog stopped the job (timeout(1)'s code)
CANNOT_EXECUTE_EXIT = 126  # the command was found but cannot be run (a shell's code)
NOT_FOUND_EXIT = 127  # the command was not found (a shell's code)
SIGNAL_EXIT_BASE = 128  # a process ended by signal N, or marun stopped by it: 128+N


def signal_exit(signum: int) -> int:
    """The exit code for signal N: 128+N, as a shell reports it."""
    return SIGNAL_EXIT_BASE + int(signum)


def cannot_start_exit(error: int | None) -> int:
    """A shell's code for a command that could not start with OSError `error` (its errno):
    126 when it is there but cannot be run, else 127."""
    cannot_run = error in (errno.EACCES, errno.ENOEXEC, errno.EISDIR)
    return CANNOT_EXECUTE_EXIT if cannot_run else NOT_FOUND_EXIT


def failure_exit(code: object, otherwise: int = 1) -> int:
    """The job's exit code for a failure that says `code`: an exit code (1-255) as it is,
    anything else (none, 0, not a whole number) `otherwise`."""
    if isinstance(code, int) and not isinstance(code, bool) and 0 < code < 256:
        return code
    return otherwise
