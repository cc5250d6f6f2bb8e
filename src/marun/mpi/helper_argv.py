"""Command lines of marun's helper processes (`python -m marun.mpi.sshd_bootstrap`,
`python -m marun.mpi.leader`): their own options, then `--`, then the command they run."""

from __future__ import annotations

from collections.abc import Sequence

from marun.errors import MarunError


def split_command(argv: Sequence[str], usage: str) -> tuple[list[str], list[str]]:
    """(the helper's options, the command after the first `--`); the command may not be empty."""
    words = list(argv)
    if "--" not in words or words.index("--") == len(words) - 1:
        raise MarunError(f"expected `{usage}`")
    cut = words.index("--")
    return words[:cut], words[cut + 1 :]
