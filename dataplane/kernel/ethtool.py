"""The two offload settings the XDP fabric needs on host ports, through the ethtool ioctl
of a socket in the host's namespace (no ethtool process per port).

- GRO on: a veth accepts frames another veth's XDP program redirects into it only if
  GRO is on (or an XDP program is attached to it).
- TX checksum offload off: a frame redirected by XDP loses its 'checksum still to do'
  mark, so hosts must checksum in software or receivers drop what they send.
"""
from __future__ import annotations

import array
import fcntl
import socket
import struct

from dataplane.kernel.netns import in_netns

SIOCETHTOOL = 0x8946
ETHTOOL_GTXCSUM, ETHTOOL_STXCSUM = 0x16, 0x17
ETHTOOL_GGRO, ETHTOOL_SGRO = 0x2B, 0x2C
IFNAMSIZ = 16


def _ethtool_value(sock: socket.socket, ifname: str, cmd: int, data: int = 0) -> int:
    """One struct ethtool_value command (u32 cmd, u32 data) on ifname; returns data."""
    value = array.array("I", [cmd, data])
    address, _ = value.buffer_info()
    ifreq = struct.pack(f"{IFNAMSIZ}sP", ifname.encode(), address) + b"\0" * 16  # sizeof(ifreq) 40
    fcntl.ioctl(sock, SIOCETHTOOL, ifreq)
    return value[1]


def host_port_offloads(netns: str, ifnames: list[str], *, tx_checksum_off: bool = True) -> None:
    """GRO on (and TX checksum offload off) on every named interface of netns."""
    with in_netns(netns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
    with sock:
        for name in ifnames:
            try:
                _ethtool_value(sock, name, ETHTOOL_SGRO, 1)
                if tx_checksum_off:
                    _ethtool_value(sock, name, ETHTOOL_STXCSUM, 0)
            except OSError as err:
                raise OSError(err.errno, f"ethtool {name}: {err.strerror}") from None


def offloads(netns: str, ifname: str) -> dict[str, bool]:
    """{'gro': .., 'tx_checksum': ..} of one interface (what host_port_offloads set)."""
    with in_netns(netns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
    with sock:
        return {"gro": bool(_ethtool_value(sock, ifname, ETHTOOL_GGRO)),
                "tx_checksum": bool(_ethtool_value(sock, ifname, ETHTOOL_GTXCSUM))}
