"""The traffic matrix: exact-flow entries that send one flow out of a given port of a
switch (`railab tm`, the nav controller, flow-granular ARN). A part of the agent's
programmer (dataplane.agent.programmer)."""
from __future__ import annotations


class TrafficMatrix:
    def __init__(self, spec, dataplane):
        self.spec = spec
        self.dp = dataplane

    def _tm_args(self, switch: str, flow: dict) -> tuple:
        node = self.spec.select_switches(switch, None)[0]
        five = {k: flow[k] for k in ("src", "dst")}
        five.update(sport=int(flow.get("sport", 0)), dport=int(flow.get("dport", 0)),
                    proto=flow.get("proto", "udp"))
        for key in ("sport", "dport"):
            if not 0 <= five[key] <= 65535:
                raise ValueError(f"{key} {five[key]} is not a port number (0-65535)")
        if five["proto"] not in ("udp", "tcp", 6, 17) and (five["sport"] or five["dport"]):
            raise ValueError(f"protocol {five['proto']} has no ports: leave sport and dport at 0")
        return node, five

    def tm_add(self, switch: str, egress: str, **flow) -> dict:
        node, five = self._tm_args(switch, flow)
        if egress not in {i.name for i in node.interfaces}:
            raise ValueError(f"{node.name} has no interface {egress!r}; its interfaces: "
                             f"{', '.join(i.name for i in node.interfaces)}")
        iface = node.interface(egress)
        self.dp.tm_add(node.switch_id, **five, egress_ifindex=iface.ifindex, dmac=iface.peer_mac)
        return {"switch": node.name, **five, "egress": egress}

    def tm_del(self, switch: str, **flow) -> dict:
        node, five = self._tm_args(switch, flow)
        return {"deleted": self.dp.tm_del(node.switch_id, **five)}

    def tm_list(self, switch: str | None = None) -> list[dict]:
        out = []
        for node in self.spec.select_switches(switch, None):
            names = {i.ifindex: i.name for i in node.interfaces}
            for e in self.dp.tm_list(node.switch_id):
                e = dict(e)
                e.pop("switch_id")
                e["egress"] = names.get(e.pop("egress_ifindex"))
                out.append({"switch": node.name, **e})
        return out
