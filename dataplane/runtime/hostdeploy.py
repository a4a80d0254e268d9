"""Deploy and destroy a lab split over machines (see dataplane.runtime.hostsplit for what a
part is). Deploy records everything before making it (the lab's hosts.json with every
part, its machine, token and the stitch devices it will have; each part's own state), so
`railab destroy` removes all of it from every machine, also after `kill -9` of the
deployer; a deploy that fails undoes everything it began, on every machine."""
from __future__ import annotations

import os
import secrets
import time
from concurrent.futures import ThreadPoolExecutor

import yaml

from dataplane.errors import RuntimeStateError
from dataplane.kernel.ethtool import host_port_offloads
from dataplane.kernel.netns import in_netns, iproute
from dataplane.runtime import containerlab as clab_runtime
from dataplane.runtime import hostsplit as hs
from dataplane.runtime import lifecycle, splitstate, state
from dataplane.runtime import netns as rt
from dataplane.runtime.labspec import LabSpec
from dataplane.runtime.splitstate import TOKEN_ENV
from dataplane.topology.multihost import Host


def deploy(spec: LabSpec, hosts: list[Host], where: dict[str, str]) -> lifecycle.DeployResult:
    lifecycle.require_root()
    state.check_lab_name(spec.name)
    started = time.monotonic()
    if lifecycle.is_up(spec.name):
        return lifecycle.DeployResult(spec.name, True, 0.0)
    if lifecycle.lab_leftovers(spec.name):
        raise RuntimeStateError(f"lab {spec.name} is left from an earlier deploy; railab destroy "
                                f"{spec.name} first")
    machines = [hs.locate(h, i) for i, h in enumerate(hosts)]
    hs.check(spec, machines)
    for m in machines:
        if lifecycle.lab_leftovers(hs.part_name(spec.name, m.host.name)):
            raise RuntimeStateError(f"lab {hs.part_name(spec.name, m.host.name)} exists; railab "
                                    "destroy it first")
    cuts = hs.stitches(spec, where)
    for node in spec.nodes:
        node.netns = hs.container_netns(hs.part_name(spec.name, where[node.name]), node.name)
    spec.reindex()
    record = {"lab": spec.name, "parts": [{
        "host": m.host.name, "address": m.host.address, "netns": m.netns, "dev": m.dev,
        "part": hs.part_name(spec.name, m.host.name), "port": None, "agent_pid": None,
        "token": secrets.token_hex(16), "nodes": sorted(n for n, h in where.items() if h == m.host.name),
        "switches": {n.name: n.role for n in spec.switches if where[n.name] == m.host.name},
        "ports": [],        # its switch ports' ifindexes, once the kernel gave them
        "stitch_devices": [d for c in cuts if where[c.node] == m.host.name for d in c.host_ends]}
        for m in machines]}
    clock = lifecycle._PhaseClock()
    top = state.LabState(spec, "deploying", deployer_pid=os.getpid())
    top.save()
    splitstate.save(spec.name, record)
    try:
        with lifecycle._InterruptGuard() as interrupted:
            agents = _start_parts(spec, machines, record)
            clock.mark("state files, agents started")
            _run_containerlab(spec, machines, record, where, cuts)
            interrupted.check()
            clock.mark("containerlab on every machine")
            specs = {p["part"]: hs.part_spec(spec, p["part"], p["nodes"]) for p in record["parts"]}
            _stitch_ports(spec, machines, record, cuts, where)
            _renumber_switch_ports(spec, machines, where)
            for part_spec in specs.values():
                clab_runtime.adopt_ifindexes(part_spec)
            adopted = next(iter(specs.values()))
            spec.nodes = LabSpec.from_json(adopted.to_json()).nodes
            spec.reindex()
            for part in record["parts"]:
                part["ports"] = sorted(i.ifindex for n in spec.nodes if n.name in part["switches"]
                                       for i in n.interfaces)
            splitstate.save(spec.name, record)
            clock.mark("stitches: names, MACs, GRO; ifindexes")
            rt.configure_sysctls(spec)
            rt.configure_all(spec)
            clock.mark("sysctls, addresses, routes")
            for part in record["parts"]:
                state.LabState(specs[part["part"]], "deploying", part["agent_pid"], os.getpid()).save()
                if part["part"] in agents:
                    lifecycle._send_go(part["part"], agents[part["part"]][0])
            for part in record["parts"]:
                if part["part"] not in agents:      # a machine with hosts only: no switch to run
                    state.LabState(specs[part["part"]], "up").save()
                    continue
                agent, fd = agents[part["part"]]
                report = lifecycle._wait_ready(part["part"], agent, fd)
                part["port"] = report["listen"][1]
                state.LabState(specs[part["part"]], "up", part["agent_pid"]).save()
            splitstate.save(spec.name, record)
            clock.mark("agents: attach, program, learn")
            top.status, top.deployer_pid = "up", None
            top.spec_changed()
            top.save()
    except BaseException:
        with lifecycle._signals_held():
            lifecycle.destroy(spec.name)
        raise
    return lifecycle.DeployResult(spec.name, False, time.monotonic() - started, clock.phases)


def _start_parts(spec: LabSpec, machines: list[hs.Machine], record: dict) -> dict:
    """Each part's state (the whole spec, its nodes as local) and, where it has switches,
    its agent, started in its machine's namespace so that it listens on the machine's
    underlay address."""
    agents = {}
    for m, part in zip(machines, record["parts"]):
        splitstate.mark_part(part["part"], spec.name, m.host.name, m.netns)
        part_state = state.LabState(hs.part_spec(spec, part["part"], part["nodes"]), "deploying",
                                    deployer_pid=os.getpid())
        part_state.save()
        if not part["switches"]:
            continue
        prefix = ("nsenter", f"--net=/run/netns/{m.netns}") if m.netns else ()
        agent, fd = lifecycle._start_agent(part["part"], prefix, ("--listen", f"{m.host.address}:0"),
                                           {**os.environ, TOKEN_ENV: part["token"]})
        part["agent_pid"] = part_state.agent_pid = agent.pid
        part_state.save()
        agents[part["part"]] = (agent, fd)
    splitstate.save(spec.name, record)
    return agents


def _run_containerlab(spec: LabSpec, machines, record, where, cuts) -> None:
    address = {m.host.name: m.host.address for m in machines}

    def one(m):
        part = hs.part_name(spec.name, m.host.name)
        path = clab_runtime.topology_file(part)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(hs.part_topology(spec, where, m, address, cuts), sort_keys=False))
        result = m.run(["containerlab", "deploy", "-t", str(path), "--skip-labdir-acl", "--timeout", "5m"])
        if result.returncode != 0:
            raise RuntimeStateError(f"host {m.host.name}: containerlab deploy failed: "
                                    f"{clab_runtime._clab_error(result.stdout + result.stderr)}")

    with ThreadPoolExecutor(max_workers=len(machines)) as pool:
        for _ in pool.map(one, machines):
            pass


def _stitch_ports(spec: LabSpec, machines, record, cuts, where) -> None:
    """Each stitched port under the lab's name, with the lab's MAC (containerlab ignores a
    stitched endpoint's mac:) and MTU 1500; GRO on its machine-side `ve-` end, without
    which frames a native XDP program redirects into the port are lost."""
    netns_of = {m.host.name: m.netns for m in machines}
    gro: dict[str | None, list[str]] = {}
    for cut in cuts:
        node = spec.node(cut.node)
        iface = node.interface(cut.interface)
        with in_netns(node.netns):
            ipr = iproute()
        try:
            index = ipr.link_lookup(ifname=cut.alias)[0]
            ipr.link("set", index=index, state="down")
            ipr.link("set", index=index, ifname=cut.interface, address=iface.mac, mtu=1500)
            ipr.link("set", index=index, state="up")
        finally:
            ipr.close()
        gro.setdefault(netns_of[where[cut.node]], []).append(cut.host_ends[0])
    for netns, names in gro.items():
        host_port_offloads(netns, names, tx_checksum_off=False)


def _renumber_switch_ports(spec: LabSpec, machines, where) -> None:
    """Every switch port at an ifindex no other switch port of the lab has. One XDP object
    serves a machine's switches and tells their ports apart by ifindex, and requests
    naming ports (hold, release) find their machine by it; containerlab run in a young
    namespace makes veths whose indexes repeat across containers. The kernel takes a new
    index only when a device changes namespace (IFLA_NEW_IFINDEX), so each port steps
    out to its machine's namespace and back, at its planned index or the next free one."""
    netns_of = {m.host.name: m.netns for m in machines}
    used: set[int] = set()
    for node in spec.switches:
        machine_ns = netns_of[where[node.name]]
        home = os.open(f"/run/netns/{machine_ns}" if machine_ns else "/proc/1/ns/net", os.O_RDONLY)
        away = os.open(f"/run/netns/{node.netns}", os.O_RDONLY)
        with in_netns(node.netns):
            inside = iproute()
        with in_netns(machine_ns):
            outside = iproute()
        try:
            present = {link["index"] for link in inside.get_links()}
            for iface in node.interfaces:
                index = inside.link_lookup(ifname=iface.name)[0]
                target = iface.ifindex
                while target in used or (target in present and target != index):
                    target += 1
                used.add(target)
                if index == target:
                    continue
                inside.link("set", index=index, net_ns_fd=home)
                moved = outside.link_lookup(ifname=iface.name)[0]
                outside.link("set", index=moved, net_ns_fd=away, IFLA_NEW_IFINDEX=target)
                inside.link("set", index=target, state="up")
                present.discard(index)
                present.add(target)
        finally:
            inside.close()
            outside.close()
            os.close(home)
            os.close(away)
