"""A rank table's own consistency, once its devices are read (marun.inputs.ranktable): each rank
once and none missing, each device once per server, and one parameter-plane NIC per device
where the table says how many."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from marun.errors import InputError

TYPE_CHECKING = False  # typing's, without importing typing on the path to exec (mypy: True)
if TYPE_CHECKING:
    from typing import Any, Protocol

    # What these checks read of marun.inputs.ranktable's values (its reader, a device entry, a
    # server), said here as protocols: that module imports this one.
    class _Reader(Protocol):
        def error(self, what: str) -> InputError: ...

        def integer(self, data: Mapping[str, Any], key: str, where: str) -> int | None: ...

    class _DeviceEntry(Protocol):
        @property
        def server_id(self) -> str: ...

        @property
        def device_id(self) -> int: ...

        @property
        def rank(self) -> int: ...

        @property
        def where(self) -> str: ...

    class Server(Protocol):
        @property
        def server_id(self) -> str: ...

        @property
        def devices(self) -> Sequence[object]: ...


def check_ranks(r: _Reader, device_entries: Sequence[_DeviceEntry]) -> None:
    if not device_entries:
        raise r.error("lists no devices: expected at least one device with a rank")
    by_rank: dict[int, _DeviceEntry] = {}
    for dev in device_entries:
        if dev.rank in by_rank:
            raise r.error(
                f"rank {dev.rank} is given twice ({by_rank[dev.rank].where} and {dev.where}): "
                "expected each rank_id once"
            )
        by_rank[dev.rank] = dev
    for rank in range(len(device_entries)):
        if rank not in by_rank:
            raise r.error(
                f"rank {rank} is missing (ranks go up to {max(by_rank)}): expected ranks "
                f"0 to {len(device_entries) - 1} with no gap"
            )
    by_device: dict[tuple[str, int], _DeviceEntry] = {}
    for dev in device_entries:
        key = (dev.server_id, dev.device_id)
        if key in by_device:
            raise r.error(
                f"device_id {dev.device_id} appears twice on server {dev.server_id!r} "
                f"({by_device[key].where} and {dev.where}): expected each device once per server"
            )
        by_device[key] = dev


def check_nic_count(r: _Reader, data: Mapping[str, Any], servers: Sequence[Server]) -> None:
    """`para_plane_nic_num` (the tutorial's tables): one parameter-plane NIC per device of a
    server, as `device_num` and `instance_count` are checked against what the table lists; and
    `para_plane_nic_name`, where given, names that many."""
    count = r.integer(data, "para_plane_nic_num", "")
    if count is None:
        return
    for server in servers:
        if len(server.devices) != count:
            raise r.error(
                f"para_plane_nic_num={data['para_plane_nic_num']!r} but server "
                f"{server.server_id!r} lists {len(server.devices)} device(s): expected one "
                "parameter-plane NIC per device"
            )
    names = data.get("para_plane_nic_name")
    if isinstance(names, list) and len(names) != count:
        raise r.error(
            f"para_plane_nic_num={data['para_plane_nic_num']!r} but para_plane_nic_name names "
            f"{len(names)} NIC(s): expected as many"
        )
