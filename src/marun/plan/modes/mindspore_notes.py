"""Plan notes for MindSpore settings that MindSpore's documents do not cover: values it reads
otherwise than the user may think, and recovery set up where it cannot work as documented.

Notes, not refusals: each of these runs, and MindSpore, not marun, has the last word on it.
"""

from __future__ import annotations

import os

from marun.inputs.injected import Platform

# MindSpore's documented values for MS_HCCL_CM_INIT: 1 (on) and 0 (off).
HCCL_CM_INIT_VALUES = ("0", "1")


def hccl_cm_init_notes(platform: Platform) -> tuple[str, ...]:
    raw = platform.env.get("MS_HCCL_CM_INIT", "")
    if raw.strip() in ("", *HCCL_CM_INIT_VALUES):
        return ()
    return (
        f"MS_HCCL_CM_INIT={raw!r}: MindSpore documents 1 (HCCL through the dynamic cluster) and "
        "0 (off); passed on as it is, and MindSpore may take another value for off",
    )


def recovery_notes(
    platform: Platform, recovery: dict[str, str] | None, nodes: int, cpu_only: bool
) -> tuple[str, ...]:
    """`recovery`: the MS_ENABLE_RECOVERY/MS_RECOVERY_PATH every process gets, or None/{}."""
    if not recovery:
        return ()
    notes = []
    path = recovery["MS_RECOVERY_PATH"]
    if nodes > 1 and not os.path.isabs(path):
        notes.append(
            f"MS_RECOVERY_PATH={path!r} is relative, on a job of {nodes} nodes: each node "
            "resolves it in its own working directory, but recovery needs one directory every "
            "node shares (an absolute path on a shared volume)"
        )
    if cpu_only:
        notes.append(
            "MS_ENABLE_RECOVERY=1 on a CPU-only job (MA_NUM_GPUS=0): MindSpore documents "
            "disaster recovery for GPU and Ascend; marun restarts the processes all the same, "
            "but whether MindSpore recovers on the CPU is outside its documents"
        )
    return tuple(notes)
