"""Load balancing of a deployed lab, as a Python API (tests, notebooks); the CLI verbs
`railab lb`, `railab tm` and `railab counters` are thin wrappers around it.

    from dataplane.lab.fabric import Fabric
    fab = Fabric("mylab")
    fab.set_mode("flowlet", role="leaf", flowlet_timeout_us=200)
    fab.set_mode("ecmp", role="spine", seed=7)
    fab.tm_add("leaf1", src="10.0.0.2", dst="10.0.4.2", sport=1000, dport=2000, egress="up2")
    fab.counters("leaf1")["switches"]["leaf1"]["ports"]["up2"]["utilization"]

Every call is one request to the lab's agent (dataplane.agent), which changes the
BPF maps of the running data plane: nothing is reloaded, traffic keeps flowing.

Modes (per group, set for all groups of the chosen switches): ecmp, lbn, flowlet,
spray-rr, spray-random, spraylink, wcmp (see bpf/railab_consts.h LB_MODE_*).
"""
from __future__ import annotations

import ipaddress
import time

from dataplane.agent import client
from dataplane.agent.protocol import CounterSnapshot
from dataplane.xdp import abi

MODES = tuple(abi.LB_MODES)


class Fabric:
    """A deployed lab's load balancing, counters and traffic matrix."""

    def __init__(self, lab: str, timeout_s: float = 30.0):
        self.lab = lab
        self.timeout_s = timeout_s

    def _req(self, op: str, **fields):
        return client.request(self.lab, op, timeout_s=self.timeout_s, **fields)

    # -------------------------------------------------------------- modes
    def set_mode(self, mode: str | None = None, *, switch: str | None = None, role: str | None = None,
                 seed: int | str | None = None, hash_fields: list[str] | None = None,
                 flowlet_timeout_us: float | None = None, busy_util: float | None = None,
                 busy_timeout_us: float | None = None, weights=None, bandwidth: bool = False,
                 lbn=None) -> dict:
        """Set the mode (and parameters) of every group of a switch, or of all switches of
        a role, or of all switches. mode None keeps the mode and changes only parameters.

        seed: per-switch hash seed (int), or "auto" for the per-switch default; giving two
        tiers the same seed reproduces hash polarization. hash_fields: names from
        abi.HASH_FIELDS ("5tuple" = the five); weights: list in member order or
        {interface: weight}; bandwidth=True: weights from the members' link speeds.
        lbn: "auto" or {interface: value}."""
        if mode is not None:
            abi.lb_mode(mode)   # validate before asking the agent
        if hash_fields is not None:
            hash_fields = abi.expand_hash_fields(hash_fields)
        return self._req("lb_set", mode=mode, switch=switch, role=role, seed=seed,
                         hash_fields=hash_fields, flowlet_timeout_us=flowlet_timeout_us,
                         busy_util=busy_util, busy_timeout_us=busy_timeout_us, weights=weights,
                         bandwidth=bandwidth or None, lbn=lbn)

    def show(self) -> dict:
        """Per switch: role, seed, hash fields, groups (mode, members, prefixes, parameters),
        ports (LBN value, nominal and emulated speed); and the lab's port model."""
        return self._req("lb_show")

    def restore(self, snapshot: dict) -> dict:
        """Give the lab back the load balancing and port model a show() reply recorded:
        every switch's seed, hash fields and LBN values, every group's mode and
        parameters, the port model."""
        out = self._req("lb_restore", snapshot=snapshot)
        self.set_port_model(**snapshot["port_model"])
        return out

    def set_port_model(self, *, scale: float | None = None, buffer_bytes: int | None = None,
                       ecn_bytes: int | None = None, window_us: float | None = None,
                       queue: str | None = None, ecn_max_bytes: int | None = None,
                       ecn_pmax: float | None = None, pfc: str | None = None,
                       xoff_bytes: int | None = None, xon_bytes: int | None = None,
                       headroom_bytes: int | None = None, pfc_dscp: int | None = None,
                       pfc_priority: int | None = None, pfc_quanta: int | None = None,
                       pfc_watchdog_us: float | None = None, pfc_restore_us: float | None = None) -> dict:
        """Emulated ports of the whole lab: speed = nominal x scale (0 = no model), tail-drop
        buffer, ECN threshold (-1 = never mark; with ecn_max_bytes above it and ecn_pmax,
        RED: Kmin, Kmax, Pmax), utilisation window (real-fabric us), queue 'virtual' (no
        added delay, fastest) or 'real' (frames wait in a shaper qdisc at the port's
        speed; see dataplane.kernel.realqueue). pfc 'on' (needs the real queue): frames with
        pfc_dscp are lossless (priority pfc_priority); an ingress port holding more than
        xoff_bytes pauses its neighbour with a PFC frame, xon_bytes resumes it,
        headroom_bytes absorb the frames in flight. Resets the queues."""
        return self._req("port_model", scale=scale, buffer_bytes=buffer_bytes,
                         ecn_bytes=ecn_bytes, window_us=window_us, queue=queue,
                         ecn_max_bytes=ecn_max_bytes, ecn_pmax=ecn_pmax, pfc=pfc,
                         xoff_bytes=xoff_bytes, xon_bytes=xon_bytes, headroom_bytes=headroom_bytes,
                         pfc_dscp=pfc_dscp, pfc_priority=pfc_priority, pfc_quanta=pfc_quanta,
                         pfc_watchdog_us=pfc_watchdog_us, pfc_restore_us=pfc_restore_us)

    # -------------------------------------------------------------- counters
    def counters(self, switch: str | None = None) -> dict:
        """The counters reply as sent (see snapshot() for it typed)."""
        return self._req("counters", switch=switch)

    def snapshot(self, switch: str | None = None) -> CounterSnapshot:
        """The counters as a dataplane.agent.protocol.CounterSnapshot."""
        return CounterSnapshot.from_wire(self.counters(switch))

    def drain(self, limit_s: float = 30.0, poll_s: float = 0.02) -> int:
        """Wait until no emulated port holds a frame, or limit_s; returns the bytes still
        waiting (0: drained). Frames queued when the senders stop are delivered, not lost;
        a queue still full after the limit is stuck, and its frames would land in the next run."""
        deadline = time.monotonic() + limit_s
        while (waiting := self.snapshot().waiting_bytes()) and time.monotonic() < deadline:
            time.sleep(poll_s)
        return waiting

    def group_of(self, switch: str, prefix_or_ip: str) -> tuple[str, dict]:
        """(group id, group counters) of the switch's group that routes prefix_or_ip."""
        target = ipaddress.ip_network(prefix_or_ip, strict=False)
        best = None
        for gid, g in self.counters(switch)["switches"][switch]["groups"].items():
            for p in g["prefixes"]:
                net = ipaddress.ip_network(p)
                if target.subnet_of(net) and (best is None or net.prefixlen > best[0]):
                    best = (net.prefixlen, gid, g)
        if best is None:
            raise KeyError(f"{switch}: no group routes {prefix_or_ip}")
        return best[1], best[2]

    # -------------------------------------------------------------- traffic matrix
    def tm_add(self, switch: str, *, src: str, dst: str, egress: str, sport: int = 0, dport: int = 0,
               proto: str | int = "udp") -> dict:
        """Static entry: this 5-tuple leaves `switch` by interface `egress`, whatever the mode."""
        return self._req("tm_add", switch=switch, src=src, dst=dst, sport=sport, dport=dport,
                         proto=proto, egress=egress)

    def tm_del(self, switch: str, *, src: str, dst: str, sport: int = 0, dport: int = 0,
               proto: str | int = "udp") -> bool:
        return self._req("tm_del", switch=switch, src=src, dst=dst, sport=sport, dport=dport,
                         proto=proto)["deleted"]

    def tm_list(self, switch: str | None = None) -> list[dict]:
        return self._req("tm_list", switch=switch)

    def trace(self, flows: list[dict]) -> list[dict]:
        """The path the data plane picks for each flow (dataplane.agent.pathtrace.FlowKey fields)."""
        return self._req("trace", flows=flows)

    # -------------------------------------------------------------- flows and navigation
    def flows(self, switch: str | None = None, window_us: float | None = None,
              top: int | None = None) -> list[dict]:
        """The `top` heaviest flows per egress port over the last window_us of real-fabric
        time (see dataplane.agent.flows), heaviest first per port."""
        return self._req("flows", switch=switch, window_us=window_us, top=top)

    def nav_start(self, interval_us: float | None = None) -> dict:
        """Start the lab's path-navigation controller (dataplane.agent.nav)."""
        return self._req("nav_start", interval_us=interval_us)

    def nav_stop(self) -> dict:
        """Stop it and remove every entry it installed."""
        return self._req("nav_stop")

    def nav_status(self) -> dict:
        return self._req("nav_status")

    def nav_announce(self, flows: list[dict]) -> dict:
        """End-network cooperation (the host-side API): flows about to be sent, each
        {src, dst, sport, dport, proto, bytes, start, rate_bps}; planned at once."""
        return self._req("nav_announce", flows=flows)

