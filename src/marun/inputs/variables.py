"""The environment variables marun reads, by name, and the ones a letter or two away from them.

A typo'd variable is otherwise silent: `MA_NUM_GPU=2` (no S) leaves `MA_NUM_GPUS` unset and the
job runs with one process per node; `MARUN_MAX_RESTART=3` leaves the budget at 0. A set variable
whose name is one or two edits from one marun reads, while that one is unset, is:
- a platform variable (`MA_*`, `VC_*`, `VK_*`, `RANK_*`, `ASCEND_*`, `TF_*`, `MY_*`): a note
  (the platform may add variables of its own that happen to be near one of these);
- marun's own (`MARUN_*`): bad input, as the same typo of a key in marun.yaml is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

# Every platform variable marun reads (tests/unit/test_variables.py checks the source against it).
PLATFORM_VARS = (
    "MA_NUM_HOSTS",
    "MA_NUM_GPUS",
    "MA_TASK_INDEX",
    "MA_TASK_NAME",
    "MA_VJ_NAME",
    "MA_CURRENT_IP",
    "MA_CURRENT_HOST_IP",
    "MA_CURRENT_INSTANCE_NAME",
    "MA_LOG_DIR",
    "VC_TASK_INDEX",
    "VK_TASK_INDEX",
    "RANK_TABLE_FILE",
    "RANK_ID",
    "RANK_SIZE",
    "ASCEND_DEVICE_ID",
    "DEVICE_ID",
    "TF_CONFIG",
    "TF_WORKER_HOSTS",
    "TF_PS_HOSTS",
    "MY_SSHD_PORT",
    "MY_MPI_SLOTS",
    "MY_MPI_BTL_TCP_IF",
)
PLATFORM_PREFIXES = ("MA_", "VC_", "VK_", "RANK_", "ASCEND_", "TF_", "MY_")
# Volcano's per-task variables (VC_WORKER_HOSTS, VC_PS_NUM, ...): any task name is the platform's.
_VOLCANO_TASK_VAR = re.compile(r"VC_[A-Z0-9_]+_(HOSTS|NUM)")
# marun's own variables besides MARUN_<SETTING> (inputs.settings.FIELDS). The job's token
# (plan.coordination.TOKEN_VAR, its one owner) is far from every other name: not listed here.
MARUN_OTHER_VARS = (
    "MARUN_CONFIG",
    "MARUN_LOG_LEVEL",
    "MARUN_LOG_FORMAT",
    "MARUN_MS_TLS_CONFIG",
    "MARUN_MS_CLIENT_PASSWORD",
    "MARUN_MS_SERVER_PASSWORD",
    "MARUN_SHARED_CONSOLE",
    "MARUN_RESTART_COUNT",
    "MARUN_SIM_PORTS",
)
MAX_EDITS = 2


def edits(a: str, b: str, limit: int = MAX_EDITS) -> int:
    """Levenshtein distance (insert, delete, replace one character) between `a` and `b`, capped at
    `limit + 1` (names are short; nothing beyond the cap matters)."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        if min(current) > limit:
            return limit + 1
        previous = current
    return min(previous[-1], limit + 1)


def _near(name: str, known: Iterable[str], env: Mapping[str, str]) -> str | None:
    """The known, unset variable `name` is a letter or two from, if any (the closest)."""
    best: tuple[int, str] | None = None
    for real in known:
        if real in env or real == name:
            continue
        # In a short name every letter counts: one edit only below 12 characters.
        limit = MAX_EDITS if len(real) >= 12 else 1
        distance = edits(name, real, limit)
        if distance <= limit and (best is None or distance < best[0]):
            best = (distance, real)
    return best[1] if best else None


def platform_near_misses(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """(set, meant) for each set platform variable that looks like a typo of one marun reads."""
    found = []
    for name in sorted(env):
        if not name.startswith(PLATFORM_PREFIXES) or name in PLATFORM_VARS:
            continue
        if _VOLCANO_TASK_VAR.fullmatch(name):
            continue
        meant = _near(name, PLATFORM_VARS, env)
        if meant is not None:
            found.append((name, meant))
    return found


def near_miss_note(found: list[tuple[str, str]]) -> str:
    """The plan's note for the platform variables `platform_near_misses` found."""
    return "; ".join(
        f"{name} is set but {meant}, which marun reads, is not: a typo of {meant}? (marun "
        f"went on without it)"
        for name, meant in found
    )


def marun_near_miss(env: Mapping[str, str], known: Iterable[str]) -> tuple[str, str] | None:
    """(set, meant) for the first set `MARUN_*` variable that is a letter or two from one of
    marun's (`known`: MARUN_<SETTING> and MARUN_OTHER_VARS) while that one is unset."""
    names = tuple(known)
    for name in sorted(env):
        if name.startswith("MARUN_") and name not in names:
            meant = _near(name, names, env)
            if meant is not None:
                return name, meant
    return None
