"""Emulated machines for labs split over hosts: a network namespace per machine, joined by
an underlay (a bridge in a namespace of its own, so that the root namespace's Docker
firewall rules do not filter the VXLAN traffic between machines), which the root
namespace joins too: the CLI reaches every machine's agent through it, as it would reach
real machines over their network. The lab tests and `railab bench fabric
--across-machines` deploy split labs on them (`railab deploy --hosts`)."""
from __future__ import annotations

import contextlib
import json
import subprocess
from ipaddress import IPv4Network

from dataplane.runtime import lifecycle

ROOT_HOST = 254                  # the root namespace's address on the underlay
# RFC 2544's block for benchmarks: no real network of the machine should be in it
BENCH_BLOCK = IPv4Network("198.18.0.0/15")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], capture_output=True, text=True, check=True)


@contextlib.contextmanager
def emulated_machines(tag: str, count: int, mtu: int = 1550, subnet: str = "192.168.79"):
    """{host name: (namespace, underlay address)} for hosts a, b, c, ... on SUBNET.0/24
    (each set of machines its own subnet: the root namespace has an address on it).
    Everything is removed on exit, also on an error or Ctrl-C (the removal itself ignores
    a second Ctrl-C: half-removed machines would keep their addresses)."""
    names = "abcdefgh"[:count]
    under = f"rlu-{tag}"[:15]
    hosts = {h: (f"rlm-{tag}-{h}", f"{subnet}.{i + 1}") for i, h in enumerate(names)}
    made: list[str] = []
    root_end = f"rlu{tag}"[:13] + "r"
    try:
        for ns in [under] + [ns for ns, _ in hosts.values()]:
            _ip("netns", "add", ns)
            made.append(ns)
        _ip("-n", under, "link", "add", "br0", "mtu", str(mtu), "type", "bridge")
        _ip("-n", under, "link", "set", "br0", "up")
        for h, (ns, address) in hosts.items():
            _ip("-n", under, "link", "add", f"to-{h}", "mtu", str(mtu), "type", "veth", "peer", "name",
                "under0", "netns", ns, "mtu", str(mtu))
            _ip("-n", under, "link", "set", f"to-{h}", "master", "br0", "up")
            _ip("-n", ns, "address", "add", f"{address}/24", "dev", "under0")
            _ip("-n", ns, "link", "set", "under0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", root_end, "mtu", str(mtu), "type", "veth", "peer", "name", "to-root",
            "netns", under, "mtu", str(mtu))
        _ip("-n", under, "link", "set", "to-root", "master", "br0", "up")
        _ip("address", "add", f"{subnet}.{ROOT_HOST}/24", "dev", root_end)
        _ip("link", "set", root_end, "up")
        yield hosts
    finally:
        with lifecycle._signals_held():
            subprocess.run(["ip", "link", "del", root_end], capture_output=True)
            for ns in made:
                subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


def hosts_option(hosts: dict) -> str:
    """`--hosts` for these machines (a=ADDRESS,b=ADDRESS,...)."""
    return ",".join(f"{h}={address}" for h, (_, address) in hosts.items())


def stitch_devices(hosts: dict) -> dict[str, list[str]]:
    """The vxlan-stitch devices (`ve-`, `vx-`) on each machine."""
    found = {}
    for h, (ns, _) in hosts.items():
        out = subprocess.run(["ip", "-n", ns, "-br", "link"], capture_output=True, text=True).stdout
        found[h] = [line.split()[0].split("@")[0] for line in out.splitlines()
                    if line.startswith(("ve-", "vx-"))]
    return found


def leftover_devices(tag: str) -> list[str]:
    """What a set of machines made under `tag` that is still here (namespaces, the root
    namespace's underlay end)."""
    found = [f"netns {ns}" for ns in _netns() if ns == f"rlu-{tag}"[:15] or ns.startswith(f"rlm-{tag}-")]
    root_end = f"rlu{tag}"[:13] + "r"
    if subprocess.run(["ip", "link", "show", "dev", root_end], capture_output=True).returncode == 0:
        found.append(f"device {root_end}")
    return found


def _netns() -> list[str]:
    out = subprocess.run(["ip", "-j", "netns", "list"], capture_output=True, text=True).stdout
    return [n["name"] for n in json.loads(out or "[]")]


def free_subnet(used: list[IPv4Network], block: IPv4Network = BENCH_BLOCK) -> str:
    """The first /24 of `block` that overlaps none of `used`, as emulated_machines takes it
    ("198.18.0"): the root namespace gets an address on it, which must not shadow a
    network it already reaches."""
    for net in block.subnets(new_prefix=24):
        if not any(net.overlaps(u) for u in used):
            return str(net.network_address).rpartition(".")[0]
    raise RuntimeError(f"every /24 of {block} is in use on this machine")


def networks_in_use() -> list[IPv4Network]:
    """The root namespace's IPv4 networks: its addresses' and its routes' (not the default)."""
    used = []
    addrs = json.loads(subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True).stdout or "[]")
    for link in addrs:
        for a in link.get("addr_info", []):
            used.append(IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False))
    routes = json.loads(subprocess.run(["ip", "-j", "-4", "route", "show", "table", "all"],
                                       capture_output=True, text=True).stdout or "[]")
    for r in routes:
        dst = r.get("dst", "default")
        if dst != "default" and r.get("type", "unicast") == "unicast":
            used.append(IPv4Network(dst if "/" in dst else f"{dst}/32", strict=False))
    return used
