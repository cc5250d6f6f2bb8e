"""Which network interface and address this node talks to its peers through.

Every mode takes the NIC from here, so NCCL/GLOO/HCCL_SOCKET_IFNAME and MPI's
btl_tcp_if_include always agree. Order: the configured `nic`; the interface holding an address
the platform says is ours or that peers meet at (MA_CURRENT_IP, the rank table's server address,
the rendezvous address: 127.0.0.1 picks `lo`, node 0's own address picks its interface); the
interface of the default route; the first interface with an IPv4 address.

The configured `nic` may be a comma-separated list (`eth0,bond0`, the platform's run_mpi.sh
form): the first listed interface this node has is the one whose address marun uses; the
`*_SOCKET_IFNAME` variables (NCCL, Gloo and HCCL each take a comma-separated list) get the listed
interfaces this node has (Gloo fails on a name the node lacks), and Open MPI's
`btl_tcp_if_include`, which reaches every node from node 0's command line, the list as given.
"""

from __future__ import annotations

from collections.abc import Iterable

from marun.errors import bad_value
from marun.inputs.records import dataclass


@dataclass(frozen=True)
class Nic:
    """An interface and the address marun talks through. `guessed`: chosen by the default route
    or as the first interface, not by configuration or a known address; the *_SOCKET_IFNAME
    variables are never pinned to a guess (common.socket_ifname_env)."""

    name: str
    address: str
    guessed: bool = False
    listed: tuple[str, ...] = ()  # a configured list (eth0,bond0), as given; () for one name
    present: tuple[str, ...] = ()  # those of `listed` this node has

    @property
    def ifname(self) -> str:
        """The configured list as given (for every node), else the one name."""
        return ",".join(self.listed) if self.listed else self.name

    @property
    def local_ifname(self) -> str:
        """What this node's `*_SOCKET_IFNAME` gets: the listed interfaces it has, else the name."""
        return ",".join(self.present) if self.present else self.name

    def network(self) -> str | None:
        """The IPv4 network of this address, in CIDR notation (`10.0.3.0/24`): names the same
        network on every node, whatever each node calls its interface. None where unknown."""
        import ipaddress

        import netifaces

        try:
            entries = netifaces.ifaddresses(self.name).get(netifaces.AF_INET, [])
        except ValueError:  # the interface is gone
            return None
        for entry in entries:
            if entry.get("addr") == self.address and entry.get("netmask"):
                iface = ipaddress.IPv4Interface(f"{self.address}/{entry['netmask']}")
                return str(iface.network)
        return None


def ipv4_by_interface() -> dict[str, list[str]]:
    import netifaces  # lazy: only modes that need a NIC pay for it

    table: dict[str, list[str]] = {}
    for name in netifaces.interfaces():
        try:
            addrs = netifaces.ifaddresses(name).get(netifaces.AF_INET, [])
        except ValueError:
            # Gone between the listing and this look (a container's veth, a netns host torn
            # down): it holds no address of ours any more.
            continue
        found = [a["addr"] for a in addrs if a.get("addr")]
        if found:
            table[name] = found
    return table


def _default_route_interface() -> str | None:
    try:
        with open("/proc/net/route") as fh:
            next(fh, None)
            for line in fh:
                parts = line.split()
                if len(parts) > 2 and parts[1] == "00000000":
                    return parts[0]
    except OSError:
        return None
    return None


def choose_nic(configured: str | None, hints: Iterable[str] = (), setting: str = "nic") -> Nic:
    """`setting` names the configured value in errors (`nic`, or the platform's variable)."""
    table = ipv4_by_interface()
    if configured:
        names = [name.strip() for name in configured.split(",")]
        if len(names) > 1 and (not all(names) or len(set(names)) != len(names)):
            raise bad_value(setting, configured, "interface names, each once, comma-separated")
        present = [name for name in names if name in table]
        if not present:
            raise bad_value(
                setting,
                configured,
                ("an interface" if len(names) == 1 else "a list naming at least one interface")
                + " with an IPv4 address, one of "
                + ", ".join(sorted(table) or ["(none)"]),
            )
        chosen = present[0]
        if len(names) == 1:
            return Nic(chosen, table[chosen][0])
        return Nic(chosen, table[chosen][0], listed=tuple(names), present=tuple(present))
    for addr in hints:
        for name, addrs in table.items():
            if addr and addr in addrs:
                return Nic(name, addr)
    default = _default_route_interface()
    if default and default in table:
        return Nic(default, table[default][0], guessed=True)
    for name, addrs in table.items():
        if name != "lo":
            return Nic(name, addrs[0], guessed=True)
    return Nic("lo", table.get("lo", ["127.0.0.1"])[0], guessed=True)
