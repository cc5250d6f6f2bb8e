"""The per-node checks, run while the node waits at the barrier and by `marun doctor`.

`run_node_checks(needs)` runs each check against what this node's plan wants (`NodeNeeds`) and
returns their `CheckResult`s, bounded: the two that may wait on something outside (a device tool,
the resolver) get what is left of `budget` (about 2 s in all), the rest read the kernel's tables
and files. Nothing here raises for what it finds; a check that cannot look says so (skip).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from marun.preflight.result import FAIL, OK, SKIP, WARN, CheckResult, Figure

BUDGET = 2.0  # seconds all checks of a node may take together
MIB = 1 << 20
GIB = 1 << 30
SHM_MIN = 256 * MIB  # /dev/shm below this warns whatever the plan (Docker's default: 64 MB)
SHM_PER_PROCESS = 64 * MIB  # per process of the plan (DataLoader workers, NCCL's buffers)
DISK_WARN = GIB  # free space below this where logs and checkpoints go: a warning
DISK_FAIL = 16 * MIB  # below this: a failure (a log line may not be written)
CLOCK_WARN = 1.0  # seconds of clock offset to node 0 beyond the measure's uncertainty
# Device files per kind, and the tool that lists the devices when the files do not show
_DEVICE_PREFIX = {"gpu": "nvidia", "npu": "davinci"}
_DEVICE_FILES = {kind: re.compile(prefix + r"(\d+)$") for kind, prefix in _DEVICE_PREFIX.items()}
_DEVICE_TOOLS = {"gpu": ("nvidia-smi", "-L"), "npu": ("npu-smi", "info", "-l")}
_DEVICE_LINES = {"gpu": re.compile(r"^GPU \d+:"), "npu": re.compile(r"NPU ID\s*:")}
_DEVICE_WORDS = {"gpu": "GPU", "npu": "NPU"}
_PREFIX_IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")  # prefixes, as NCCL takes them
_SIOCGIFFLAGS, _IFF_UP, _IFF_RUNNING = 0x8913, 0x1, 0x40


@dataclass(frozen=True)
class NodeNeeds:
    """What this node's plan wants of it (marun.preflight.needs builds it from a plan)."""

    node: int = 0
    host: str = ""  # this node's name, as the others resolve it ("": not checked)
    address: str = ""  # the address the others use for it ("": not checked)
    device_kind: str | None = None  # "gpu", "npu", or None: no device check
    devices: int = 0  # devices the plan uses on this node
    processes: int = 1
    dirs: tuple[tuple[str, str], ...] = ()  # (what, path): where logs and checkpoints go
    ifnames: tuple[tuple[str, str], ...] = ()  # (variable, its value): *_SOCKET_IFNAME
    ports: tuple[tuple[str, int], ...] = ()  # (what, port) the plan listens on
    dev_root: str = "/dev"
    shm_path: str = "/dev/shm"
    env_path: str | None = field(default=None, compare=False)  # PATH for the device tools

    @property
    def shm_need(self) -> int:
        return max(SHM_MIN, SHM_PER_PROCESS * self.processes)


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.0)


def _count_device_files(needs: NodeNeeds, kind: str) -> list[int]:
    try:
        names = os.listdir(needs.dev_root)
    except OSError:
        return []
    pattern = _DEVICE_FILES[kind]
    return sorted(int(m.group(1)) for m in map(pattern.match, names) if m)


def _count_by_tool(needs: NodeNeeds, kind: str, deadline: float) -> int | None:
    argv = _DEVICE_TOOLS[kind]
    tool = shutil.which(argv[0], path=needs.env_path)
    if tool is None or _left(deadline) <= 0:
        return None
    try:
        out = subprocess.run(
            [tool, *argv[1:]],
            capture_output=True,
            text=True,
            timeout=_left(deadline),
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    pattern = _DEVICE_LINES[kind]
    return sum(1 for line in out.stdout.splitlines() if pattern.search(line))


def check_devices(needs: NodeNeeds, deadline: float) -> CheckResult:
    """The plan's devices against those visible here: `/dev/nvidia<N>` (`/dev/davinci<N>`),
    else what `nvidia-smi -L` (`npu-smi info -l`) lists."""
    kind = needs.device_kind
    if kind not in _DEVICE_FILES or needs.devices <= 0:
        return CheckResult("devices", SKIP, "the plan names no devices on this node")
    word = _DEVICE_WORDS[kind]
    found = _count_device_files(needs, kind)
    if found:
        count, source = len(found), f"{needs.dev_root}/{_DEVICE_PREFIX[kind]}<N>"
    else:
        listed = _count_by_tool(needs, kind, deadline)
        count, source = listed or 0, " ".join(_DEVICE_TOOLS[kind]) if listed else "nothing"
    figures: dict[str, Figure] = {"wanted": needs.devices, "visible": count, "kind": kind}
    if count >= needs.devices:
        return CheckResult(
            "devices",
            OK,
            f"{count} {word}(s) visible ({source}), the plan uses {needs.devices}",
            figures,
        )
    if not count:
        # None at all: a CPU node (MA_NUM_GPUS also sets the processes per node where there is
        # no device) or a container without the driver: said, not refused. Some but not all: a
        # device is broken or gone, and the job would fail on it.
        return CheckResult(
            "devices",
            WARN,
            f"the plan uses {needs.devices} {word}(s) on this node, none visible (neither "
            f"{needs.dev_root}/{_DEVICE_PREFIX[kind]}<N> nor {' '.join(_DEVICE_TOOLS[kind])}): "
            "its processes run without them",
            figures,
        )
    shown = f" ({source}: {', '.join(map(str, found))})" if found else f" ({source})"
    return CheckResult(
        "devices",
        FAIL,
        f"the plan uses {needs.devices} {word}(s) on this node, {count} visible{shown}",
        figures,
    )


def _fs_sizes(path: str) -> tuple[int, int] | None:
    """(size, free to us) of the file system holding `path` or its nearest existing parent."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        st = os.statvfs(probe)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _mib(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


def check_shm(needs: NodeNeeds) -> CheckResult:
    """/dev/shm's size against what the plan's processes will want: PyTorch's DataLoader workers
    die with a bus error on Docker's default 64 MB, NCCL's shared-memory transport with it."""
    if not os.path.isdir(needs.shm_path):
        return CheckResult("shm", WARN, f"{needs.shm_path} does not exist here")
    sizes = _fs_sizes(needs.shm_path)
    if sizes is None:
        return CheckResult("shm", SKIP, f"{needs.shm_path}: cannot read its size")
    size, free = sizes
    figures = {"size": size, "free": free, "need": needs.shm_need}
    if size < needs.shm_need:
        return CheckResult(
            "shm",
            WARN,
            f"{needs.shm_path} is {_mib(size)}, {needs.processes} process(es) want "
            f"{_mib(needs.shm_need)} or more (docker run --shm-size, a Memory emptyDir)",
            figures,
        )
    return CheckResult("shm", OK, f"{needs.shm_path} {_mib(size)} ({_mib(free)} free)", figures)


def check_disk(needs: NodeNeeds) -> list[CheckResult]:
    """Free space where the logs and the checkpoints go."""
    results = []
    for what, path in needs.dirs:
        sizes = _fs_sizes(path)
        name = f"disk {what}"
        if sizes is None:
            results.append(CheckResult(name, SKIP, f"{path}: cannot read its file system"))
            continue
        free = sizes[1]
        status = FAIL if free < DISK_FAIL else WARN if free < DISK_WARN else OK
        results.append(
            CheckResult(name, status, f"{path}: {_mib(free)} free", {"free": free, "path": path})
        )
    return results


def _bounded(call: Callable[[], str], timeout: float) -> str | None:
    """`call()` in a thread, waited for up to `timeout` s (a resolver may hang): its answer,
    or None on an error or time-out."""
    answer: list[str] = []

    def run() -> None:
        with contextlib.suppress(OSError, UnicodeError, ValueError):
            answer.append(call())

    thread = threading.Thread(target=run, name="preflight-resolve", daemon=True)
    thread.start()
    thread.join(timeout)
    return answer[0] if answer else None


def check_address(needs: NodeNeeds, deadline: float) -> list[CheckResult]:
    """This node's address (the one the others use) is on one of its interfaces, and its
    name resolves here to that address, as the others will resolve it."""
    if not needs.address:
        return [CheckResult("address", SKIP, "the plan names no address for this node")]
    from marun.inputs.nic import ipv4_by_interface

    table = ipv4_by_interface()
    on = sorted(name for name, addrs in table.items() if needs.address in addrs)
    results = [
        CheckResult(
            "address", OK, f"{needs.address} is on {', '.join(on)}", {"address": needs.address}
        )
        if on
        else CheckResult(
            "address",
            WARN,
            f"{needs.address}, the address the others use, is on no interface here",
            {"address": needs.address},
        )
    ]
    if needs.host and needs.host != needs.address:
        timeout = min(_left(deadline), 1.0)
        got = _bounded(
            lambda: str(socket.getaddrinfo(needs.host, None, socket.AF_INET)[0][4][0]), timeout
        )
        if got is None:
            message = f"{needs.host} does not resolve within {timeout:.1f}s"
            results.append(CheckResult("resolve", WARN, message))
        elif got != needs.address and not any(got in addrs for addrs in table.values()):
            message = (
                f"{needs.host} resolves to {got}, not to {needs.address} nor to any address here"
            )
            results.append(CheckResult("resolve", WARN, message, {"resolved": got}))
        else:
            results.append(CheckResult("resolve", OK, f"{needs.host} -> {got}", {"resolved": got}))
    return results


def _interface_flags(name: str) -> int | None:
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            raw = fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return int(struct.unpack_from("H", raw, 16)[0])


def _ifname_matches(var: str, item: str, present: list[str]) -> list[str]:
    exact = item.startswith("=") or var not in _PREFIX_IFNAME_VARS
    wanted = item.lstrip("=")
    return [n for n in present if n == wanted or (not exact and n.startswith(wanted))]


def check_ifnames(needs: NodeNeeds) -> list[CheckResult]:
    """Each interface a `*_SOCKET_IFNAME` names exists here and is up, one result per variable.
    NCCL and HCCL take each name as a prefix (`=name`: exactly) and need one of the list;
    Gloo fails on any name the node lacks. A `^name` list excludes: not checked."""
    present = [name for _, name in socket.if_nameindex()]
    results = []
    for var, value in needs.ifnames:
        if value.startswith("^"):
            continue
        items = [v.strip() for v in value.split(",") if v.strip()]
        found = {item: _ifname_matches(var, item, present) for item in items}
        missing = [item for item, names in found.items() if not names]
        matches = sorted({n for names in found.values() for n in names})
        up = [n for n in matches if (_interface_flags(n) or 0) & _IFF_UP]
        name = f"ifname {var}"
        if missing and (var not in _PREFIX_IFNAME_VARS or not matches):
            message = (
                f"{var}={value}: no interface {', '.join(missing)} here ({', '.join(present)})"
            )
            results.append(CheckResult(name, FAIL, message))
        elif not up:
            results.append(CheckResult(name, FAIL, f"{var}={value}: {', '.join(matches)} down"))
        else:
            results.append(CheckResult(name, OK, f"{var}={value}: {', '.join(up)} up"))
    return results


def check_ports(needs: NodeNeeds) -> list[CheckResult]:
    """The ports the plan listens on are free (as `marun run` checks them before it starts)."""
    from marun.inputs.port_probe import bind_error

    results = []
    for what, port in needs.ports:
        exc = bind_error(port)
        status, said = (OK, "free") if exc is None else (FAIL, f"taken ({exc.strerror})")
        results.append(CheckResult(f"port {port}", status, f"{what}={port} {said}", {"port": port}))
    return results


def clock_offset(sent: float, leader: float, received: float) -> tuple[float, float]:
    """(offset, uncertainty) of this node's clock to node 0's, from one exchange: this node's
    wall clock when it sent (`sent`) and when the answer came (`received`), node 0's in between
    (`leader`). Offset > 0: node 0's clock is ahead. The answer is within +- uncertainty."""
    half = max(received - sent, 0.0) / 2
    return leader - (sent + half), half


def check_clock(offset: float, uncertainty: float, limit: float = CLOCK_WARN) -> CheckResult:
    figures = {"offset_s": round(offset, 6), "uncertainty_s": round(uncertainty, 6)}
    if abs(offset) - uncertainty > limit:
        ahead = "behind" if offset > 0 else "ahead of"
        message = f"this node's clock is {abs(offset):.2f}s {ahead} node 0's (timestamps disagree)"
        return CheckResult("clock", WARN, message, figures)
    return CheckResult(
        "clock", OK, f"offset to node 0 {offset:+.3f}s (+-{uncertainty:.3f}s)", figures
    )


def run_node_checks(needs: NodeNeeds, budget: float = BUDGET) -> tuple[CheckResult, ...]:
    """Every per-node check, within about `budget` seconds (the clock's needs node 0: see
    `clock_offset`)."""
    deadline = time.monotonic() + budget
    results = [check_devices(needs, deadline), check_shm(needs)]
    results += check_disk(needs)
    results += check_ifnames(needs)
    results += check_ports(needs)
    results += check_address(needs, deadline)
    return tuple(results)
