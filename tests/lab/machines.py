"""Emulated machines for labs split over hosts: a network namespace per machine, joined by
an underlay (a bridge in a namespace of its own, so that the root namespace's Docker
firewall rules do not filter the VXLAN traffic between machines), which the root
namespace joins too: the CLI reaches every machine's agent through it, as it would reach
real machines over their network."""
from __future__ import annotations

import contextlib
import subprocess

ROOT_HOST = 254                  # the root namespace's address on the underlay


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], capture_output=True, text=True, check=True)


@contextlib.contextmanager
def emulated_machines(tag: str, count: int, mtu: int = 1550, subnet: str = "192.168.79"):
    """{host name: (namespace, underlay address)} for hosts a, b, c, ... on SUBNET.0/24
    (each set of machines its own subnet: the root namespace has an address on it).
    Everything removed on exit."""
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
        subprocess.run(["ip", "link", "del", root_end], capture_output=True)
        for ns in made:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


def hosts_option(hosts: dict) -> str:
    return ",".join(f"{h}={address}" for h, (_, address) in hosts.items())


def stitch_devices(hosts: dict) -> dict[str, list[str]]:
    """The vxlan-stitch devices (`ve-`, `vx-`) on each machine."""
    found = {}
    for h, (ns, _) in hosts.items():
        out = subprocess.run(["ip", "-n", ns, "-br", "link"], capture_output=True, text=True).stdout
        found[h] = [line.split()[0].split("@")[0] for line in out.splitlines()
                    if line.startswith(("ve-", "vx-"))]
    return found
