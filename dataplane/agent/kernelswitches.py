"""The agent's side of a lab deployed with `--dataplane kernel`: Linux forwards in every
switch namespace (the controller's routes as multipath kernel routes, put there by the
runtime), so there is no program to load. What the agent still serves, through the same
protocol as for XDP labs: counters (the kernel's link statistics of every switch port,
and its IP drop counters, as a CounterSnapshot), the load-balancing view, and the ECMP
hash settings the kernel has (fields and seed). Everything only XDP can do (other modes,
port model, traffic matrix, path trace, fault monitor) is refused with the reason.
"""
from __future__ import annotations

import subprocess
import time

from pyroute2 import IPRoute

from dataplane.agent import protocol as proto
from dataplane.kernel.netns import in_netns
from dataplane.runtime.labspec import LabSpec
from dataplane.xdp.abi import expand_hash_fields

WHY = "kernel forwarding only hashes flows over equal-cost routes"
NEEDS_XDP = "the lab forwards with the kernel (--dataplane kernel); {what} needs the XDP dataplane"
# net.ipv4.fib_multipath_hash_fields bits (Documentation/networking/ip-sysctl.rst), used
# with fib_multipath_hash_policy=3 (custom); the 5-tuple is policy 1.
KERNEL_HASH_BITS = {"src_ip": 0x01, "dst_ip": 0x02, "proto": 0x04, "src_port": 0x10, "dst_port": 0x20}
HASH_POLICY_L4 = 1
HASH_POLICY_CUSTOM = 3
# /proc/net/snmp "Ip:" fields counted as lab-wide drops, by railab's reason names
SNMP_DROPS = {"OutNoRoutes": "no_route", "InHdrErrors": "header_error", "InAddrErrors": "address_error",
              "InDiscards": "ip_in_discards", "OutDiscards": "ip_out_discards"}


def refuse(what: str):
    raise ValueError(NEEDS_XDP.format(what=what))


class KernelSwitches:
    """Same method names as SwitchProgrammer for what the control server dispatches."""

    def __init__(self, spec: LabSpec):
        self.spec = spec
        self.seeds: dict[str, int] = {n.name: 0 for n in spec.switches}
        self.hash_fields: dict[str, list[str]] = {n.name: ["src_ip", "dst_ip", "proto", "src_port", "dst_port"]
                                                  for n in spec.switches}

    def select(self, switch: str | None, role: str | None) -> list:
        return self.spec.select_switches(switch, role)

    # ------------------------------------------------------------ counters
    def counters(self, switch: str | None = None) -> dict:
        nodes = self.select(switch, None) if switch is not None else self.spec.switches
        started = time.monotonic_ns()
        result: dict = {"switches": {}, "verdicts": {}, "drops": {}}
        forwarded = 0
        for node in nodes:
            links, snmp = _read_switch(node)
            ports = {}
            for i in node.interfaces:
                stats = links[i.ifindex].get_attr("IFLA_STATS64") if i.ifindex in links else None
                ports[i.name] = _port_counters(stats, i.speed_bps)
            result["switches"][node.name] = {"ports": ports, "groups": {}}
            forwarded += snmp.get("ForwDatagrams", 0)
            for field, reason in SNMP_DROPS.items():
                result["drops"][reason] = result["drops"].get(reason, 0) + snmp.get(field, 0)
        # the kernel's counterpart of XDP's redirect verdict: datagrams IP forwarded
        result["verdicts"] = {"forwarded (kernel)": {"packets": forwarded, "bytes": 0}}
        result["t_ns"] = (started + time.monotonic_ns()) // 2
        return result

    def port_load(self, switch: str | None = None) -> dict:
        """The port_load reply from the kernel's link statistics; a port is up while its
        link is (operstate UP); the only mode is the kernel's ECMP, where a route has several
        next hops (as lb_show says)."""
        nodes = self.select(switch, None) if switch is not None else self.spec.switches
        started = time.monotonic_ns()
        out: dict = {"fields": list(proto.LOAD_FIELDS), "switches": {}}
        for node in nodes:
            links, _ = _read_switch(node, snmp=False)
            ports = {}
            for i in node.interfaces:
                msg = links.get(i.ifindex)
                stats = msg.get_attr("IFLA_STATS64") if msg is not None else None
                up = msg is not None and msg.get_attr("IFLA_OPERSTATE") == "UP"
                ports[i.name] = proto.load_row(proto.PortCounters(**_port_counters(stats, i.speed_bps)), up)
            multipath = any(len(r.nexthops) > 1 for r in self.spec.routes.get(node.name, []))
            out["switches"][node.name] = {"ports": ports, "modes": ["ecmp"] if multipath else []}
        out["t_ns"] = (started + time.monotonic_ns()) // 2
        return out

    # ------------------------------------------------------------ load balancing
    def lb_show(self) -> dict:
        out = {"port_model": None, "dataplane": "kernel", "switches": {}}
        for node in self.spec.switches:
            groups = {}
            for n, route in enumerate(r for r in self.spec.routes.get(node.name, []) if len(r.nexthops) > 1):
                groups[str(n + 1)] = {"mode": "ecmp", "members": list(route.nexthops), "prefixes": [route.prefix],
                                      "hash_fields": self.hash_fields[node.name], "weights": None,
                                      "flowlet_timeout_us": None, "busy_util": None, "busy_timeout_us": None}
            ports = {i.name: {"lbn": 0, "nominal_speed_bps": i.speed_bps, "speed_bps": 0, "peer": i.peer}
                     for i in node.interfaces}
            out["switches"][node.name] = {"role": node.role, "switch_id": node.switch_id,
                                          "hash_seed": self.seeds[node.name],
                                          "hash_fields": self.hash_fields[node.name],
                                          "groups": groups, "ports": ports}
        return out

    def lb_set(self, switch=None, role=None, mode=None, seed=None, hash_fields=None,
               flowlet_timeout_us=None, busy_util=None, busy_timeout_us=None, weights=None,
               bandwidth=False, lbn=None) -> dict:
        """ECMP only: the hash fields the kernel can take and its hash seed, per switch."""
        nodes = self.select(switch, role)
        if mode not in (None, "ecmp"):
            raise ValueError(f"mode {mode}: {WHY} (ECMP); other modes need the XDP dataplane")
        for name, value in (("weights", weights), ("bandwidth", bandwidth or None), ("lbn", lbn),
                            ("flowlet_timeout_us", flowlet_timeout_us), ("busy_util", busy_util),
                            ("busy_timeout_us", busy_timeout_us)):
            if value is not None:
                raise ValueError(f"{name}: {WHY} (ECMP); it needs the XDP dataplane")
        fields = None
        if hash_fields is not None:
            fields = expand_hash_fields(hash_fields)
            other = [f for f in fields if f not in KERNEL_HASH_BITS]
            if other:
                raise ValueError(f"hash field {', '.join(other)}: the kernel's multipath hash "
                                 f"takes only {', '.join(KERNEL_HASH_BITS)}")
        if seed not in (None, "auto") and not 0 <= int(seed) < 2**32:
            raise ValueError(f"seed {seed} is not between 0 and 2^32-1")
        for node in nodes:
            settings = []
            if fields is not None:
                bits = sum(KERNEL_HASH_BITS[f] for f in fields)
                if set(fields) == set(KERNEL_HASH_BITS):
                    settings.append(f"net.ipv4.fib_multipath_hash_policy={HASH_POLICY_L4}")
                else:
                    settings += [f"net.ipv4.fib_multipath_hash_fields=0x{bits:x}",
                                 f"net.ipv4.fib_multipath_hash_policy={HASH_POLICY_CUSTOM}"]
            if seed is not None:
                # 0 gives the kernel's own random seed back
                settings.append(f"net.ipv4.fib_multipath_hash_seed={0 if seed == 'auto' else int(seed)}")
            if settings:
                subprocess.run(["ip", "netns", "exec", node.netns, "sysctl", "-qw", *settings],
                               check=True, capture_output=True, text=True)
            if fields is not None:
                self.hash_fields[node.name] = fields
            if seed is not None:
                self.seeds[node.name] = 0 if seed == "auto" else int(seed)
        groups = [gid for node in nodes for gid in self.lb_show()["switches"][node.name]["groups"]]
        return {"switches": [n.name for n in nodes], "groups": groups, "mode": "ecmp"}

    def lb_restore(self, snapshot: dict) -> dict:
        for name, saved in snapshot.get("switches", {}).items():
            self.lb_set(switch=name, seed=saved.get("hash_seed"), hash_fields=saved.get("hash_fields"))
        return {"switches": list(snapshot.get("switches", {}))}

    # ------------------------------------------------------------ XDP only
    def trace(self, flows):
        refuse("a path trace (railab pathtrace reads XDP's route cache)")

    def apply_port_model(self, **_):
        refuse("the port model")

    def tm_add(self, **_):
        refuse("a traffic matrix")

    tm_del = tm_add

    def tm_list(self, switch=None):
        refuse("a traffic matrix")

    def port_speed(self, **_):
        refuse("an emulated port speed")

    def switch_reset(self, switch=None):
        refuse("a switch reset")

    def port_states(self, switch=None):
        refuse("the port state masks")

    def reaction_stamps(self, clear=False):
        refuse("the reaction stamps")


def _read_switch(node, snmp: bool = True) -> tuple[dict, dict]:
    """A switch namespace's links by ifindex and its IP counters (/proc/net/snmp)."""
    with in_netns(node.netns):
        with IPRoute() as ipr:
            links = {msg["index"]: msg for msg in ipr.get_links()}
        return links, _ip_snmp() if snmp else {}


def _port_counters(stats, nominal_speed_bps: int) -> dict:
    stats = stats or {}
    drops = {}
    for field, reason in (("rx_dropped", "kernel_rx_dropped"), ("tx_dropped", "kernel_tx_dropped")):
        if stats.get(field):
            drops[reason] = int(stats[field])
    return {"rx_packets": int(stats.get("rx_packets", 0)), "rx_bytes": int(stats.get("rx_bytes", 0)),
            "tx_packets": int(stats.get("tx_packets", 0)), "tx_bytes": int(stats.get("tx_bytes", 0)),
            "ecn_marked": 0, "drops": drops, "queue_bytes": 0, "utilization": 0.0,
            "speed_bps": 0, "nominal_speed_bps": nominal_speed_bps}


def _ip_snmp() -> dict[str, int]:
    """The calling thread's namespace's /proc/net/snmp 'Ip:' counters."""
    with open("/proc/thread-self/net/snmp") as f:
        lines = [line.split() for line in f if line.startswith("Ip:")]
    if len(lines) < 2:
        return {}
    return {k: int(v) for k, v in zip(lines[0][1:], lines[1][1:]) if v.lstrip("-").isdigit()}
