"""Where each node and link of a lab is drawn: a pure function of the lab spec.

Tiers are rows (cores on top, hosts at the bottom); switches of each plane form a block
of columns, planes side by side; hosts, which reach every plane, span the whole width.
Every interface has its own attachment point on its node's edge (uplinks on the top
edge, downlinks on the bottom), ordered by where its peer sits, so parallel links stay
apart and each link of the lab is one visible line.

Coordinates are SVG user units; the page scales the drawing to its width.
"""
from __future__ import annotations

import re

from dataplane.runtime.labspec import LabSpec
from dataplane.topology.model import TIER, Role

PORT_GAP = 9          # between two attachment points on one edge
NODE_MIN_W = 70
NODE_H = 28
NODE_GAP = 18         # between nodes of one row
PLANE_GAP = 60        # between plane blocks
ROW_GAP = 150         # between tiers
MARGIN = 30

TIER_NAMES = {TIER[r]: r.value for r in TIER}      # 0 host, 1 leaf, 2 spine, 3 core


def natural_key(name: str) -> list:
    """'leaf10' after 'leaf9': digit runs compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def tier_of(role: str) -> int:
    try:
        return TIER[Role(role)]
    except (ValueError, KeyError):
        return TIER[Role.LEAF]      # a switch of a role without a tier sits with the leaves


def link_id(a: str, b: str) -> str:
    """A link's name on the page and in the JSON: its upper end first, 'node:if>node:if'."""
    return f"{a}>{b}"


def _ends_top_first(spec: LabSpec):
    """Each link once as (upper end, lower end) as 'node:if' strings; the upper end is the
    higher tier (ties: the one that sorts first), so a->b is always 'down'."""
    roles = {n.name: n.role for n in spec.nodes}
    for node, iface, peer, piface in spec.links():
        a, b = f"{node.name}:{iface.name}", f"{peer.name}:{piface.name}"
        ta, tb = tier_of(roles[node.name]), tier_of(roles[peer.name])
        if ta < tb or (ta == tb and natural_key(b) < natural_key(a)):
            a, b = b, a
        yield a, b


def layout(spec: LabSpec) -> dict:
    """{width, height, tiers, planes, nodes: [...], links: [...]} for the page (see README)."""
    nodes = {n.name: n for n in spec.nodes}
    tiers = {n.name: tier_of(n.role) for n in spec.nodes}
    switch_planes = sorted({n.plane for n in spec.switches if n.plane is not None})
    # A switch without a plane label in a lab that has planes sits in its own last block.
    blocks = switch_planes + ([None] if any(n.plane is None for n in spec.switches) or not switch_planes else [])

    up_ports = {n: [] for n in nodes}    # interfaces towards a higher tier (top edge)
    down_ports = {n: [] for n in nodes}  # towards the same or a lower tier (bottom edge)
    for node in spec.nodes:
        for iface in node.interfaces:
            if tiers[iface.peer_node] > tiers[node.name]:
                up_ports[node.name].append(iface)
            else:
                down_ports[node.name].append(iface)

    def width(name: str) -> float:
        edge = max(len(up_ports[name]), len(down_ports[name]))
        return max(NODE_MIN_W, (edge + 1) * PORT_GAP)

    # rows: tier -> block -> ordered node names
    rows: dict[int, dict] = {}
    for node in spec.nodes:
        block = "hosts" if node.role == "host" else node.plane if node.plane in switch_planes else None
        rows.setdefault(tiers[node.name], {}).setdefault(block, []).append(node.name)
    for row in rows.values():
        for names in row.values():
            names.sort(key=lambda n: (nodes[n].rail if nodes[n].rail is not None else -1, natural_key(n))
                       if nodes[n].role == "leaf" else natural_key(n))

    def row_width(names: list[str]) -> float:
        return sum(width(n) for n in names) + NODE_GAP * max(0, len(names) - 1)

    block_w = {b: max([row_width(rows[t].get(b, [])) for t in rows if t != 0] + [0]) for b in blocks}
    switches_w = sum(block_w.values()) + PLANE_GAP * max(0, len(blocks) - 1)
    hosts_w = row_width(rows.get(0, {}).get("hosts", []))
    total_w = max(switches_w, hosts_w)
    top_tier = max(rows) if rows else 0

    placed: dict[str, dict] = {}

    def place(names: list[str], left: float, span: float, tier: int) -> None:
        x = left + (span - row_width(names)) / 2
        y = MARGIN + (top_tier - tier) * ROW_GAP
        for name in names:
            w = width(name)
            n = nodes[name]
            placed[name] = {"name": name, "role": n.role, "tier": tier, "plane": n.plane, "rail": n.rail,
                            "x": round(x, 1), "y": y, "w": w, "h": NODE_H}
            x += w + NODE_GAP

    left = MARGIN + (total_w - switches_w) / 2
    for b in blocks:
        for tier, row in rows.items():
            if tier != 0 and b in row:
                place(row[b], left, block_w[b], tier)
        left += block_w[b] + PLANE_GAP
    if 0 in rows:
        place(rows[0].get("hosts", []), MARGIN, total_w, 0)

    # attachment points: each edge's interfaces ordered by their peer's x
    anchor: dict[str, tuple[float, float]] = {}
    for name, box in placed.items():
        for ports, y in ((up_ports[name], box["y"]), (down_ports[name], box["y"] + NODE_H)):
            def peer_x(iface):
                peer = placed[iface.peer_node]
                return (peer["x"] + peer["w"] / 2, natural_key(iface.peer), natural_key(iface.name))
            ordered = sorted(ports, key=peer_x)
            step = box["w"] / (len(ordered) + 1)
            for i, iface in enumerate(ordered):
                anchor[f"{name}:{iface.name}"] = (round(box["x"] + step * (i + 1), 1), y)

    links = []
    for a, b in _ends_top_first(spec):
        (ax, ay), (bx, by) = anchor[a], anchor[b]
        links.append({"id": link_id(a, b), "a": a, "b": b, "ax": ax, "ay": ay, "bx": bx, "by": by})
    links.sort(key=lambda l: (natural_key(l["a"]), natural_key(l["b"])))

    return {
        "lab": spec.name, "kind": spec.kind,
        "width": round(total_w + 2 * MARGIN, 1), "height": MARGIN * 2 + top_tier * ROW_GAP + NODE_H,
        "tiers": [TIER_NAMES[t] for t in sorted(rows, reverse=True)],
        "planes": switch_planes,
        "nodes": sorted(placed.values(), key=lambda n: (-n["tier"], n["x"])),
        "links": links,
    }
