"""The Ascend rank table (`RANK_TABLE_FILE`): read, wait for, validate, and find this node in.

Two formats are in use (docs/platform-contract.md), all values JSON strings:
- group_list (ModelArts' `jobstart_hccl.json`): groups of instances, each instance a
  `server_id` with its `devices`. Groups whose device count is "0" are skipped. An instance's
  `rank_id`, when given, is the rank of its first device (the rest follow); without one,
  instances are ranked in the order of the trailing `-N` of their `pod_name`, group after group,
  one rank per device (davincirun's rule). Instances sharing a `server_id` form one server (the
  tutorial's 8-card table lists 8 one-device instances on one server).
- server_list (`"version": "1.0"`; `"1.2"` SuperPoD tables add `super_pod_list`, ignored here):
  servers with a `host_nic_ip` (the Ascend Operator writes `host_ip` and `container_ip` instead)
  and `device` entries that each carry their `rank_id`.

Both become one `RankTable`: servers in the rank order of their first device, each with its
devices in rank order. The table is the authority on which physical device a rank runs on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import cached_property

from marun.errors import InputError, bad_value, show_value
from marun.inputs.hosts import is_ip, is_ipv4
from marun.inputs.numbers import MAX_RANKS, is_digits
from marun.inputs.records import dataclass
from marun.inputs.textfile import parse_guarded, read_input_text

TYPE_CHECKING = False  # typing's, without importing typing on the path to exec (mypy: True)
if TYPE_CHECKING:
    from typing import Any

GROUP_LIST = "group_list"
SERVER_LIST = "server_list"
COMPLETED = "completed"
INITIALIZING = "initializing"
_POD_INDEX = re.compile(r"-([0-9]{1,12})$")


@dataclass(frozen=True)
class Device:
    device_id: int  # the physical device on its server
    device_ip: str  # an IPv4 address: every device has one
    rank: int


@dataclass(frozen=True)
class Server:
    server_id: str
    host_ip: str | None  # host_nic_ip (else container_ip), or server_id when that is an IP
    devices: tuple[Device, ...]  # in rank order
    pod_names: tuple[str, ...] = ()  # group_list: the instances (pods) on this server
    # server_list: the pod's own address where the table gives it (the Ascend Operator writes
    # the pod's status.podIP there): what tells a pod its server
    container_ip: str | None = None


@dataclass(frozen=True)
class RankTable:
    path: str
    format: str  # GROUP_LIST | SERVER_LIST
    servers: tuple[Server, ...]  # in rank order of their first device

    @cached_property  # asked for by every process of a plan: once, not once per process
    def rank_size(self) -> int:
        return sum(len(s.devices) for s in self.servers)

    def device_of_rank(self, rank: int) -> tuple[int, Device]:
        """(server index, device) of a job-wide rank."""
        for index, server in enumerate(self.servers):
            for device in server.devices:
                if device.rank == rank:
                    return index, device
        raise bad_value("rank", rank, f"a rank from 0 to {self.rank_size - 1} in {self.path}")


class RankTableNotReady(InputError):
    """The table's status is still `initializing`: the platform has not filled it in yet."""


# -- reading one value ------------------------------------------------------------------------


class _Reader:
    """Typed access to the parsed JSON that names the file and the field in every error."""

    def __init__(self, path: str) -> None:
        self.path = path

    def error(self, what: str) -> InputError:
        return InputError(f"rank table {self.path}: {what}")

    def bad(self, where: str, value: object, expected: str) -> InputError:
        return self.error(f"{where}={show_value(value)}: expected {expected}")

    def obj(self, value: object, where: str) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.bad(where, _short(value), "a JSON object")
        return value

    def items(self, data: Mapping[str, Any], key: str, where: str) -> Sequence[Any]:
        value = data.get(key)
        if value is None:
            raise self.error(f"{_at(where, key)} is missing: expected a list")
        if not isinstance(value, list):
            raise self.bad(f"{_at(where, key)}", _short(value), "a list")
        return value

    def text(self, data: Mapping[str, Any], key: str, where: str, required: bool = True) -> str:
        value = data.get(key)
        if value is None:
            if required:
                raise self.error(f"{_at(where, key)} is missing: expected a string")
            return ""
        if not isinstance(value, str):
            raise self.bad(f"{_at(where, key)}", _short(value), "a string")
        return value

    def device_ip(self, device: Mapping[str, Any], where: str) -> str:
        """A device's address on the parameter plane: an IPv4 address, required (HCCL connects
        the devices by it: without one, or with `300.1.1.1`, it fails at the first
        collective)."""
        value = self.text(device, "device_ip", where)
        if not is_ipv4(value.strip()):
            raise self.bad(f"{where}.device_ip", value, "an IPv4 address (HCCL needs it)")
        return value.strip()

    def integer(self, data: Mapping[str, Any], key: str, where: str) -> int | None:
        """A non-negative integer, written as a string (the format) or as a JSON number."""
        value = data.get(key)
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_RANKS:
            return value
        if isinstance(value, str) and is_digits(value.strip()) and len(value.strip()) <= 12:
            return int(value.strip())
        raise self.bad(f"{_at(where, key)}", _short(value), "a non-negative integer")

    def required_integer(self, data: Mapping[str, Any], key: str, where: str) -> int:
        value = self.integer(data, key, where)
        if value is None:
            raise self.error(f"{_at(where, key)} is missing: expected a non-negative integer")
        return value


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _short(value: object) -> object:
    """Keep a wrong value's repr to one short line in the error."""
    if isinstance(value, (dict, list)):
        return type(value).__name__
    return value


# -- the two formats --------------------------------------------------------------------------


@dataclass
class _DeviceEntry:
    """A device on its way into a Server: where it came from, for error messages."""

    server_id: str
    host_ip: str | None
    pod_name: str
    device_id: int
    device_ip: str
    rank: int
    where: str
    container_ip: str | None = None


def _devices(r: _Reader, entry: Mapping[str, Any], key: str, where: str) -> list[tuple[int, str]]:
    """(device_id, device_ip) of each device listed under `key`; at least one."""
    out: list[tuple[int, str]] = []
    for j, raw in enumerate(r.items(entry, key, where)):
        dwhere = f"{where}.{key}[{j}]"
        device = r.obj(raw, dwhere)
        out.append((r.required_integer(device, "device_id", dwhere), r.device_ip(device, dwhere)))
    if not out:
        raise r.error(f"{where}.{key} is empty: expected at least one device")
    return out


@dataclass(frozen=True)
class _Instance:
    where: str
    server_id: str
    pod_name: str
    rank_id: int | None
    pod_index: int | None  # the trailing -N of pod_name
    devices: tuple[tuple[int, str], ...]


def _group_instances(r: _Reader, group: Mapping[str, Any], gwhere: str) -> list[_Instance]:
    """A group's instances in file order; [] for a group with device count 0."""
    key = "device_count" if "device_count" in group else "device_num"
    device_count = r.integer(group, key, gwhere)
    if device_count == 0:
        return []  # a task of the job without devices (davincirun skips it too)
    members = r.items(group, "instance_list", gwhere)
    instance_count = r.integer(group, "instance_count", gwhere)
    if instance_count is not None and instance_count != len(members):
        raise r.error(
            f"{gwhere}.instance_count={group['instance_count']!r} but its instance_list has "
            f"{len(members)} instance(s)"
        )
    out = []
    for i, raw in enumerate(members):
        where = f"{gwhere}.instance_list[{i}]"
        instance = r.obj(raw, where)
        pod_name = r.text(instance, "pod_name", where, False)
        match = _POD_INDEX.search(pod_name)
        out.append(
            _Instance(
                where=where,
                server_id=r.text(instance, "server_id", where),
                pod_name=pod_name,
                rank_id=r.integer(instance, "rank_id", where),
                pod_index=int(match.group(1)) if match else None,
                devices=tuple(_devices(r, instance, "devices", where)),
            )
        )
    total = sum(len(inst.devices) for inst in out)
    if device_count is not None and device_count != total:
        raise r.error(f"{gwhere}.{key}={group[key]!r} but its instances list {total} device(s)")
    server_num = r.integer(group, "server_num", gwhere)
    servers = len({inst.server_id for inst in out})
    if server_num is not None and server_num != servers:
        raise r.error(
            f"{gwhere}.server_num={group['server_num']!r} but its instances are on {servers} "
            "server(s) (distinct server_id)"
        )
    return out


def _by_pod_index(r: _Reader, instances: Sequence[_Instance]) -> list[_Instance]:
    seen: dict[int, str] = {}
    for inst in instances:
        if inst.pod_index is None:
            raise r.error(
                f"{inst.where} has neither a rank_id nor a pod_name ending in -<index> "
                f"(pod_name={inst.pod_name!r}): expected one of them to order the instances"
            )
        if inst.pod_index in seen:
            raise r.error(
                f"{inst.where}.pod_name={inst.pod_name!r} has the index {inst.pod_index} of "
                f"{seen[inst.pod_index]} too: expected each index once"
            )
        seen[inst.pod_index] = inst.where
    return sorted(instances, key=lambda inst: inst.pod_index or 0)


def _group_list_devices(r: _Reader, data: Mapping[str, Any]) -> list[_DeviceEntry]:
    groups = r.items(data, "group_list", "")
    # Required as `status` is: a table that states its counts is checked against them.
    count = r.required_integer(data, "group_count", "")
    if count != len(groups):
        raise r.error(
            f"group_count={data['group_count']!r} but group_list has {len(groups)} group(s)"
        )
    per_group = [
        _group_instances(r, r.obj(g, f"group_list[{i}]"), f"group_list[{i}]")
        for i, g in enumerate(groups)
    ]
    instances = [inst for group in per_group for inst in group]
    explicit = any(inst.rank_id is not None for inst in instances)
    if explicit:
        lacking = next((inst for inst in instances if inst.rank_id is None), None)
        if lacking is not None:
            raise r.error(
                f"{lacking.where} has no rank_id while other instances have one: expected "
                "rank_id on every instance or on none"
            )
    else:
        # davincirun's order: by pod index within a group, group after group.
        instances = [inst for group in per_group for inst in _by_pod_index(r, group)]
    device_entries: list[_DeviceEntry] = []
    next_rank = 0
    for inst in instances:
        first = next_rank if inst.rank_id is None else inst.rank_id
        host_ip = inst.server_id if is_ip(inst.server_id) else None
        for j, (device_id, device_ip) in enumerate(inst.devices):
            where = f"{inst.where}.devices[{j}]"
            device_entries.append(
                _DeviceEntry(
                    inst.server_id, host_ip, inst.pod_name, device_id, device_ip, first + j, where
                )
            )
        next_rank = first + len(inst.devices)
    return device_entries


def _server_list_devices(r: _Reader, data: Mapping[str, Any]) -> list[_DeviceEntry]:
    servers = r.items(data, "server_list", "")
    count = r.required_integer(data, "server_count", "")
    if count != len(servers):
        raise r.error(
            f"server_count={data['server_count']!r} but server_list has {len(servers)} server(s)"
        )
    seen: dict[str, str] = {}
    device_entries: list[_DeviceEntry] = []
    for s, raw_server in enumerate(servers):
        swhere = f"server_list[{s}]"
        server = r.obj(raw_server, swhere)
        server_id = r.text(server, "server_id", swhere)
        if server_id in seen:
            raise r.error(
                f"{swhere}.server_id={server_id!r} is also that of {seen[server_id]}: "
                "expected each server once"
            )
        seen[server_id] = swhere
        # The address this server's processes hold: the host NIC's, else the container's (MindIE
        # and SuperPoD tables give container_ip, server_id being the physical host).
        # Only addresses count: MindSpore's own example tables write "host_nic_ip": "reserve".
        candidates = (
            r.text(server, "host_nic_ip", swhere, False),
            r.text(server, "container_ip", swhere, False),
            server_id,
        )
        host_ip = next((c for c in candidates if c and is_ip(c)), None)
        pod_ip = r.text(server, "container_ip", swhere, False)
        container_ip = pod_ip if pod_ip and is_ip(pod_ip) else None
        entries = r.items(server, "device", swhere)
        if not entries:
            raise r.error(f"{swhere}.device is empty: expected at least one device")
        for j, raw_device in enumerate(entries):
            dwhere = f"{swhere}.device[{j}]"
            device = r.obj(raw_device, dwhere)
            device_entries.append(
                _DeviceEntry(
                    server_id,
                    host_ip,
                    "",
                    r.required_integer(device, "device_id", dwhere),
                    r.device_ip(device, dwhere),
                    r.required_integer(device, "rank_id", dwhere),
                    dwhere,
                    container_ip,
                )
            )
    return device_entries


def _servers(device_entries: Sequence[_DeviceEntry]) -> tuple[Server, ...]:
    grouped: dict[str, list[_DeviceEntry]] = {}
    for dev in sorted(device_entries, key=lambda s: s.rank):
        grouped.setdefault(dev.server_id, []).append(dev)
    servers = []
    for server_id, members in grouped.items():  # dicts keep insertion order: first-rank order
        pods = tuple(dict.fromkeys(m.pod_name for m in members if m.pod_name))
        servers.append(
            Server(
                server_id=server_id,
                host_ip=members[0].host_ip,
                devices=tuple(Device(m.device_id, m.device_ip, m.rank) for m in members),
                pod_names=pods,
                container_ip=members[0].container_ip,
            )
        )
    return tuple(servers)


# -- the file ---------------------------------------------------------------------------------


def _document(text: str, path: str) -> tuple[Mapping[str, Any], str]:
    """The parsed JSON object and its status, or InputError."""
    r = _Reader(path)
    if not text.strip():
        raise r.error("the file is empty: expected a JSON rank table")
    try:
        data = parse_guarded(json.loads, text, f"rank table {path}")
    except json.JSONDecodeError as exc:
        raise r.error(f"not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise r.error(f"top level is a JSON {type(data).__name__}: expected a JSON object")
    status = data.get("status")
    if status is None:
        raise r.error(f"status is missing: expected {COMPLETED!r}")
    if status not in (COMPLETED, INITIALIZING):
        raise r.bad("status", _short(status), f"{COMPLETED!r} or {INITIALIZING!r}")
    return data, status


def parse_rank_table(text: str, path: str) -> RankTable:
    """Parse and validate a rank table. InputError (one line naming `path`) on bad input;
    `RankTableNotReady` when its status is still `initializing`."""
    from marun.inputs.ranktable_checks import check_nic_count, check_ranks

    data, status = _document(text, path)
    r = _Reader(path)
    if status == INITIALIZING:
        raise RankTableNotReady(f"rank table {path}: status={status!r}: expected {COMPLETED!r}")
    has_groups, has_servers = GROUP_LIST in data, SERVER_LIST in data
    if has_groups == has_servers:
        raise r.error(
            "expected exactly one of group_list (ModelArts jobstart_hccl.json) and server_list "
            '("version": "1.0")' + (", found both" if has_groups else ", found neither")
        )
    fmt = GROUP_LIST if has_groups else SERVER_LIST
    device_entries = _group_list_devices(r, data) if has_groups else _server_list_devices(r, data)
    check_ranks(r, device_entries)
    servers = _servers(device_entries)
    check_nic_count(r, data, servers)
    return RankTable(path=path, format=fmt, servers=servers)


def read_table_text(path: str) -> str:
    return read_input_text(path, "rank table", "a JSON rank table")
