"""The preflight's typed results and their bounded wire form.

A `CheckResult` is one per-node check (devices, shm, disk, address, ifname, ports, clock); a
`LinkResult` one link of the ring probe (node i to node i+1); a `NodeReport` what one node's
marun sends node 0 while it waits at the barrier: its checks and where its probe listener is.
Each has `to_dict` (JSON-ready, what goes on the wire and into job.json) and a `from_dict` that
trusts nothing: a wrong type is ValueError, a long text is cut, a long list is cut, so what
node 0 takes in per node stays under `MAX_REPORT_BYTES` whatever a member sends.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
STATUSES = (OK, WARN, FAIL, SKIP)
_RANK = {SKIP: 0, OK: 1, WARN: 2, FAIL: 3}

Figure = Union[int, float, str, bool, None]
MAX_NAME = 40  # characters of a check's name
MAX_MESSAGE = 240  # characters of a one-line message
MAX_FIGURES = 12  # figures per check
MAX_CHECKS = 16  # checks per node report
MAX_TEXT = 255  # host names, addresses, errors
MAX_FIGURE_TEXT = 64  # a figure that is a word (a path, an address)
# Every field above at its bound, in JSON: what one node's report can cost node 0 at most.
MAX_REPORT_BYTES = 48 << 10


def worst(statuses: Sequence[str]) -> str:
    """The worst of `statuses` (fail > warn > ok > skip); ok for none."""
    return max(statuses, key=lambda s: _RANK.get(s, 0), default=OK)


def _text(value: object, limit: int, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected a string, got {type(value).__name__}")
    line = " ".join(value.split())  # one line
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _number(value: object, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what}: expected a finite number, got {value!r}")
    return float(value)


def _figures(value: object) -> dict[str, Figure]:
    if not isinstance(value, Mapping):
        raise ValueError("figures: expected a mapping")
    out: dict[str, Figure] = {}
    for key, item in list(value.items())[:MAX_FIGURES]:
        name = _text(key, MAX_NAME, "figure name")
        if isinstance(item, str):
            out[name] = _text(item, MAX_FIGURE_TEXT, name)
        elif item is None or isinstance(item, bool):
            out[name] = item
        else:
            number = _number(item, name)
            out[name] = int(number) if isinstance(item, int) and number is not None else number
    return out


@dataclass(frozen=True)
class CheckResult:
    """One check of one node: `status` ok, warn, fail or skip; `message` one line a person
    reads; `figures` the numbers behind it (bytes, seconds, counts) for job.json."""

    name: str
    status: str
    message: str
    figures: Mapping[str, Figure] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "message": self.message,
            "figures": dict(self.figures),
        }

    @classmethod
    def from_dict(cls, data: object) -> CheckResult:
        if not isinstance(data, Mapping):
            raise ValueError("check: expected a mapping")
        status = data.get("status")
        if status not in STATUSES:
            raise ValueError(f"check status: expected one of {STATUSES}, got {status!r}")
        return cls(
            name=_text(data.get("name"), MAX_NAME, "check name"),
            status=str(status),
            message=_text(data.get("message"), MAX_MESSAGE, "check message"),
            figures=_figures(data.get("figures", {})),
        )


@dataclass(frozen=True)
class LinkResult:
    """The ring probe from node `src` to node `dst` at `address`:`port`. `error` (then status
    fail: unreachable) or the figures: `connect_s`, `rtt_s` (the least of a few round trips),
    `throughput` (bytes per second, the best of a few chunks) over `bytes` sent."""

    src: int
    dst: int
    src_host: str
    dst_host: str
    address: str
    port: int
    connect_s: float | None = None
    rtt_s: float | None = None
    throughput: float | None = None
    bytes: int = 0
    error: str | None = None

    @property
    def reachable(self) -> bool:
        return self.error is None

    def name(self) -> str:
        """`node 1 (host-1) -> node 2 (host-2)`: how warnings and refusals name the link."""
        return f"node {self.src} ({self.src_host}) -> node {self.dst} ({self.dst_host})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "src": self.src,
            "dst": self.dst,
            "src_host": self.src_host,
            "dst_host": self.dst_host,
            "address": self.address,
            "port": self.port,
            "connect_s": _round(self.connect_s),
            "rtt_s": _round(self.rtt_s),
            "throughput": None if self.throughput is None else round(self.throughput),
            "bytes": self.bytes,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: object) -> LinkResult:
        if not isinstance(data, Mapping):
            raise ValueError("link: expected a mapping")
        ints = {}
        for key in ("src", "dst", "port", "bytes"):
            value = data.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"link {key}: expected a whole number >= 0, got {value!r}")
            ints[key] = value
        error = data.get("error")
        return cls(
            src=ints["src"],
            dst=ints["dst"],
            src_host=_text(data.get("src_host", "?"), MAX_TEXT, "src_host"),
            dst_host=_text(data.get("dst_host", "?"), MAX_TEXT, "dst_host"),
            address=_text(data.get("address", "?"), MAX_TEXT, "address"),
            port=ints["port"],
            connect_s=_number(data.get("connect_s"), "connect_s"),
            rtt_s=_number(data.get("rtt_s"), "rtt_s"),
            throughput=_number(data.get("throughput"), "throughput"),
            bytes=ints["bytes"],
            error=None if error is None else _text(error, MAX_TEXT, "error"),
        )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


@dataclass(frozen=True)
class NodeReport:
    """What one node's marun sends node 0 while it waits at the barrier: its checks, and where
    its probe listener listens (`address`:`probe_port`; port 0: none, the ring skips it)."""

    node: int
    host: str
    address: str
    probe_port: int
    checks: tuple[CheckResult, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "host": self.host,
            "address": self.address,
            "probe_port": self.probe_port,
            "checks": [c.to_dict() for c in self.checks],
        }

    @classmethod
    def from_dict(cls, data: object) -> NodeReport:
        if not isinstance(data, Mapping):
            raise ValueError("report: expected a mapping")
        node, port = data.get("node"), data.get("probe_port", 0)
        for key, value in (("node", node), ("probe_port", port)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"report {key}: expected a whole number >= 0, got {value!r}")
        checks = data.get("checks", [])
        if not isinstance(checks, list):
            raise ValueError("report checks: expected a list")
        assert isinstance(node, int) and isinstance(port, int)
        return cls(
            node=node,
            host=_text(data.get("host", "?"), MAX_TEXT, "host"),
            address=_text(data.get("address", "?"), MAX_TEXT, "address"),
            probe_port=port,
            checks=tuple(CheckResult.from_dict(c) for c in checks[:MAX_CHECKS]),
        )
