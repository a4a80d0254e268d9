"""`railab deploy LAB --runtime containerlab --hosts NAME=ADDRESS[@DEV],...`: one lab over
several machines ("hosts").

Every machine runs a part of the lab, a lab of its own named `<lab>-<host>`: containerlab
deploys that machine's nodes from a file of their own (cut links as `vxlan-stitch` to the
other machine's underlay address, one VNI per link), and one agent in that machine's
network namespace attaches and programs that machine's switches only (BPF maps and XDP
attachments are one kernel's). Every part holds the whole lab spec, so all agree on
addresses, routes, groups and MACs; the `local` list says which switches are theirs. Each
agent also listens on its machine's underlay address with a token; the CLI merges their
answers (dataplane.agent.remote), so every verb sees one lab.

On the test harness a machine is a network namespace of this one holding the address
(containerlab runs under `ip netns exec`, the agent under `nsenter --net`); an address
that is on no namespace here is refused: running parts on other machines over SSH is not
built. The deployer also configures the hosts' addresses and routes and sets the stitched
ports' MACs from this machine, through the containers' namespaces.
"""
from __future__ import annotations

import copy
import subprocess
import zlib
from dataclasses import dataclass


from dataplane.errors import RuntimeStateError, TopologyError
from dataplane.kernel.netns import in_netns, iproute
from dataplane.runtime import containerlab as clab_runtime
from dataplane.runtime import state
from dataplane.runtime import netns as rt
from dataplane.runtime.labspec import LabSpec
from dataplane.topology import multihost
from dataplane.topology.multihost import Host

NAME = "containerlab"
VNI_BLOCK = 1000                # cut links one lab may have; labs get disjoint VNI blocks
LAB_NAMESPACE_PREFIXES = ("clab-", "railab-")


@dataclass
class Machine:
    host: Host
    netns: str | None           # the namespace playing it here (None: this machine)
    dev: str
    mtu: int
    number: int                 # its place in --hosts (its management network)

    def run(self, argv: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
        """A command on this machine (inside its namespace on the harness)."""
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        return clab_runtime.run_tool([*prefix, *argv], timeout=timeout)


# ------------------------------------------------------------------ checks, before anything is made
def locate(host: Host, number: int, candidates: list[str | None] | None = None) -> Machine:
    """The namespace of this machine that holds the host's address, its underlay device
    and MTU. One-line refusal for an address on none of them."""
    if candidates is None:
        candidates = [None] + [n for n in rt.list_netns() if not n.startswith(LAB_NAMESPACE_PREFIXES)]
    for netns in candidates:
        with in_netns(netns):
            ipr = iproute()
        try:
            found = ipr.get_addr(address=host.address)
            if not found:
                continue
            dev_index = found[0]["index"]
            if host.dev:
                named = ipr.link_lookup(ifname=host.dev)
                if not named:
                    raise RuntimeStateError(f"host {host.name}: no device {host.dev} where "
                                            f"{host.address} is")
                dev_index = named[0]
            link = ipr.link("get", index=dev_index)[0]
            return Machine(host, netns, link.get_attr("IFLA_IFNAME"), link.get_attr("IFLA_MTU"), number)
        finally:
            ipr.close()
    raise RuntimeStateError(f"host {host.name}: no interface of this machine or its namespaces has "
                            f"{host.address} (parts on other machines, over SSH, are not built)")


def check_machine(machine: Machine) -> None:
    """containerlab and railab's node image on the machine, underlay MTU for 1500-byte
    frames plus VXLAN; one line each."""
    try:
        multihost.check_underlay_mtu(machine.mtu)
    except TopologyError as err:
        raise RuntimeStateError(f"host {machine.host.name} ({machine.dev}): {err}") from None
    if machine.run(["containerlab", "version"], timeout=30).returncode != 0:
        raise RuntimeStateError(f"host {machine.host.name}: containerlab does not run there "
                                "(scripts/setup.sh installs it)")
    image = clab_runtime.node_image()
    if machine.run(["docker", "image", "inspect", "--format", "{{.Id}}", image], timeout=30).returncode != 0:
        raise RuntimeStateError(f"host {machine.host.name}: railab's node image {image} is not "
                                "there (scripts/setup.sh builds it)")


def check(spec: LabSpec, machines: list[Machine]) -> None:
    if spec.runtime != "containerlab":
        raise RuntimeStateError("--hosts: a lab split over machines runs with --runtime containerlab")
    if spec.dataplane != "xdp":
        raise RuntimeStateError(f"--hosts: --dataplane {spec.dataplane} cannot forward across "
                                "machines (generic XDP does not see frames the vxlan stitch "
                                "feeds in); use --dataplane xdp")
    for node in spec.nodes:
        if node.external:
            raise RuntimeStateError(f"--hosts: node {node.name} is external; a lab split over "
                                    "machines runs railab's own nodes only")
    for machine in machines:
        check_machine(machine)
        state.check_lab_name(part_name(spec.name, machine.host.name))


def part_name(lab: str, host: str) -> str:
    return f"{lab}-{host}"


# ------------------------------------------------------------------ the parts
def first_vni(lab: str) -> int:
    """A VNI block of the lab's own (two split labs on the same machines must not share
    a VNI and port), inside VXLAN's 24 bits."""
    return VNI_BLOCK * (1 + zlib.crc32(lab.encode()) % 16_000)


@dataclass(frozen=True)
class Stitch:
    """One end of a cut link on its machine. containerlab names the machine's veth end
    `ve-<node>_<interface>` and refuses names over 15 characters (`ve-spine1_down16`), so
    the container's port is made under a short alias and renamed to the lab's name after."""
    node: str
    interface: str
    alias: str
    vni: int
    remote_host: str

    @property
    def host_ends(self) -> tuple[str, str]:
        return f"ve-{self.node}_{self.alias}", f"vx-{self.node}_{self.alias}"


def stitches(spec: LabSpec, where: dict[str, str]) -> list[Stitch]:
    """Both ends of every link between machines, one VNI per link."""
    out, vni, per_node = [], first_vni(spec.name), {}
    for node, iface, peer, piface in spec.links():
        if where[node.name] == where[peer.name]:
            continue
        for end, ifname, far in ((node, iface.name, peer), (peer, piface.name, node)):
            number = per_node[end.name] = per_node.get(end.name, -1) + 1
            stitch = Stitch(end.name, ifname, "s" + _base36(number), vni, where[far.name])
            if len(stitch.host_ends[0]) > 15:
                raise RuntimeStateError(f"node {end.name}: its name is too long for a link between "
                                        "machines (containerlab's ve-<node>_<port> is 15 characters at most)")
            out.append(stitch)
        vni += 1
    if vni - first_vni(spec.name) > VNI_BLOCK:
        raise RuntimeStateError(f"lab {spec.name}: over {VNI_BLOCK} links between machines")
    return out


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    return digits[n] if n < 36 else _base36(n // 36) + digits[n % 36]


def part_topology(spec: LabSpec, where: dict[str, str], machine: Machine, address: dict[str, str],
                  cuts: list[Stitch]) -> dict:
    """The containerlab file of one machine's part (see the module's doc)."""
    part = part_name(spec.name, machine.host.name)
    doc = clab_runtime.derived_topology(spec)
    doc["name"] = part
    doc["mgmt"] = multihost.management_network(spec.name, machine.number)
    here = machine.host.name
    nodes = doc["topology"]["nodes"]
    for name in list(nodes):
        if where[name] != here:
            del nodes[name]
        else:
            nodes[name]["labels"][clab_runtime.LAB_LABEL] = part
    links = [l for l in doc["topology"]["links"]
             if all(where[e["node"]] == here for e in l["endpoints"])]
    for cut in cuts:
        if where[cut.node] == here:
            stitch = {"type": "vxlan-stitch", "endpoint": {"node": cut.node, "interface": cut.alias},
                      "remote": address[cut.remote_host], "vni": cut.vni,
                      "dst-port": multihost.DST_PORT, "mtu": multihost.FABRIC_MTU}
            if machine.host.dev:
                stitch["parent-interface"] = machine.host.dev
            links.append(stitch)
    doc["topology"]["links"] = links
    return doc


def part_spec(spec: LabSpec, part: str, local: list[str]) -> LabSpec:
    """The whole lab under the part's name, with its machine's nodes as `local`."""
    out = LabSpec.from_json(copy.deepcopy(spec.to_json()))
    out.name, out.local = part, sorted(local)
    return out


def container_netns(part: str, node: str) -> str:
    return f"{clab_runtime.CLAB_NETNS_PREFIX}{part}-{node}"
