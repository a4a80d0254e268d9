"""What a run did, from the agent's counters before and after it: bytes and packets per
link each way, the switches' drops and ECN marks, and the PFC counters of the ports that
paused (the RUN dict's "links", "switches" and "pfc_ports"; dataplane.report reads them)."""
from __future__ import annotations

from dataplane.agent.protocol import CounterSnapshot
from dataplane.runtime import splitstate
from dataplane.runtime.labspec import LabSpec
from dataplane.topology.model import TIER


def link_bytes(spec: LabSpec, before: CounterSnapshot, after: CounterSnapshot) -> list[dict]:
    """Per link, oriented upwards (host -> leaf -> spine -> core: a->b is "up"): bytes and
    packets each way from whichever end is a switch (hosts have no counters), the
    nominal speed and the emulated speed the agent reported for the link's ports."""
    roles = {n.name: n.role for n in spec.nodes}
    delta = after.minus(before)

    def count(a: tuple[str, str], b: tuple[str, str], field: str) -> int:
        """a -> b: what a sent, else what b received, else 0."""
        sent, got = delta.port(*a), delta.port(*b)
        if sent is not None:
            return getattr(sent, f"tx_{field}")
        return getattr(got, f"rx_{field}") if got is not None else 0

    links, seen = [], set()
    for node in spec.nodes:
        for iface in node.interfaces:
            key = frozenset((f"{node.name}:{iface.name}", iface.peer))
            if key in seen:
                continue
            seen.add(key)
            a, b = (node.name, iface.name), (iface.peer_node, iface.peer_if)
            if TIER[roles[a[0]]] > TIER[roles[b[0]]]:
                a, b = b, a
            port = after.port(*a) or after.port(*b)
            links.append({
                "a": f"{a[0]}:{a[1]}", "b": f"{b[0]}:{b[1]}", "a_role": roles[a[0]], "b_role": roles[b[0]],
                "bytes_ab": count(a, b, "bytes"), "bytes_ba": count(b, a, "bytes"),
                "packets_ab": count(a, b, "packets"), "packets_ba": count(b, a, "packets"),
                # the record's names: speed_bps nominal, scaled_bps emulated (None: no port model)
                "speed_bps": iface.speed_bps, "scaled_bps": (port.speed_bps or None) if port else None,
            })
    return links


def pfc_ports(before: CounterSnapshot, after: CounterSnapshot) -> dict:
    """'switch:port' -> its PFC counters over the run (ports that paused or were paused)."""
    out = {}
    for switch, port, c in after.minus(before).ports():
        if c.pfc and (c.pfc.get("pause_frames_sent") or c.pfc.get("pause_frames_received")
                      or c.pfc.get("headroom_drops")):
            out[f"{switch}:{port}"] = dict(c.pfc)
    return out


def switch_totals(before: CounterSnapshot, after: CounterSnapshot, lab: str | None = None) -> dict:
    """Drops and ECN marks over every switch; for a lab split over machines also the same
    per machine, with the packets its switches received and sent ("machines")."""
    record = splitstate.load(lab) if lab else None
    host_of = {n: p["host"] for p in record["parts"] for n in p["nodes"]} if record else {}
    machines = {p["host"]: {"rx_packets": 0, "tx_packets": 0, "drops": 0, "ecn_marked": 0}
                for p in record["parts"]} if record else {}
    drops: dict[str, int] = {}
    ecn = 0
    for switch, _, c in after.minus(before).ports():
        for reason, n in c.drops.items():
            if n:
                drops[reason] = drops.get(reason, 0) + n
        ecn += c.ecn_marked
        if switch in host_of:
            mine = machines[host_of[switch]]
            mine["rx_packets"] += c.rx_packets
            mine["tx_packets"] += c.tx_packets
            mine["drops"] += sum(c.drops.values())
            mine["ecn_marked"] += c.ecn_marked
    return {"drops": sum(drops.values()), "drops_by_reason": drops, "ecn_marked": ecn,
            **({"machines": machines} if record else {})}
