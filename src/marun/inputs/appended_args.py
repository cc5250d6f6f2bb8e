"""The arguments a platform appends to the start command, found and taken off the user's.

ModelArts appends `--init_method tcp://IP:PORT [--rank N --world_size M]` for PyTorch-GPU and
`--task_index I --ps_hosts [..] --worker_hosts [..] --job_name J` for TensorFlow-GPU after the
user's own arguments (docs/platform-contract.md). They are recognised only as a trailing run of
one engine's flags (`--flag value` or `--flag=value`, each once) that holds the flag the
platform always appends for that engine:
- PyTorch: the run starts with `--init_method` (the platform puts it first, and it is the only
  flag on one node), so a user's own `--world_size 8` just before it stays the user's;
- TensorFlow: the run holds `--ps_hosts` or `--worker_hosts` (what auto mode looks for).
Anything else, such as a trailing `--rank 0` or `--job_name x` of a user's own under MPI or
Ascend, where the platform appends nothing, stays with the script.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from marun.inputs.records import dataclass, field

PYTORCH_FLAGS = ("init_method", "rank", "world_size")
TENSORFLOW_FLAGS = ("task_index", "ps_hosts", "worker_hosts", "job_name")
_FAMILIES = (PYTORCH_FLAGS, TENSORFLOW_FLAGS)
_KNOWN = frozenset(PYTORCH_FLAGS + TENSORFLOW_FLAGS)


@dataclass(frozen=True)
class AppendedArgs:
    values: Mapping[str, str] = field(default_factory=dict)
    words: tuple[str, ...] = ()  # exactly as appended, for --keep-platform-args

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.values


def _flag_name(word: str) -> str | None:
    if not word.startswith("--"):
        return None
    name = word[2:].split("=", 1)[0]
    return name if name in _KNOWN else None


def _parse_run(words: Sequence[str]) -> dict[str, str] | None:
    """Parse words that must consist only of known `--flag value`/`--flag=value` pairs."""
    values: dict[str, str] = {}
    i = 0
    while i < len(words):
        name = _flag_name(words[i])
        if name is None or name in values:
            return None
        if "=" in words[i]:
            values[name] = words[i].split("=", 1)[1]
            i += 1
        elif i + 1 < len(words):
            values[name] = words[i + 1]
            i += 2
        else:
            return None
    return values


def _is_platform_run(words: Sequence[str], values: Mapping[str, str]) -> bool:
    family = next((f for f in _FAMILIES if set(values) <= set(f)), None)
    if family is PYTORCH_FLAGS:
        return _flag_name(words[0]) == "init_method"
    if family is TENSORFLOW_FLAGS:
        return "ps_hosts" in values or "worker_hosts" in values
    return False  # flags of both engines: not something a platform appends


def split_appended(command: Sequence[str]) -> tuple[tuple[str, ...], AppendedArgs]:
    """Split `SCRIPT ARGS... APPENDED...` into the user's words and the platform's.

    The longest trailing run that parses as one engine's platform flags is taken (the script
    itself, word 0, never is).
    """
    for start in range(1, len(command)):
        if _flag_name(command[start]) is None:
            continue
        run = command[start:]
        values = _parse_run(run)
        if values is not None and _is_platform_run(run, values):
            return tuple(command[:start]), AppendedArgs(values, tuple(run))
    return tuple(command), AppendedArgs()
