"""A containerlab file rewritten to railab's container images (`railab topo images`), so
that a plain `containerlab deploy` builds the lab and `railab attach` brings it to life.

Each of railab's nodes says its image and settings itself (not through kinds or groups,
which the file's own nodes may share with a user's containers). What changes, and only
that (labels, addresses, vars and every other setting stay):
- switches run railab's switch image as `kind: linux` (a network OS kind becomes linux:
  railab's XDP program is the switch; its kind-only settings go);
- railab's hosts run railab's node image;
- railab's nodes get `restart-policy: "no"` (a restarted container comes back with an empty
  namespace), `network-mode: none` (railab drives them from outside, through their
  namespaces: no management network needed) and `privileged: false` (they need no
  capability);
- every fabric link gets `mtu: 1500`: containerlab's default 9500 stops native XDP on veth;
- interface names become the Linux names railab reads them as (srlinux `ethernet-1/1` is
  `e1-1`): a linux container cannot have a '/' in an interface name.
A user's own containers (railab.role external, or a host with its own image) are left as
they are.
"""
from __future__ import annotations

import yaml

from dataplane.topology import clab
from dataplane.topology.model import Role

LINK_MTU = 1500
RAILAB_NODE_SETTINGS = {"restart-policy": "no", "network-mode": "none", "privileged": False}
# Settings of a network OS kind that mean nothing to a linux container.
KIND_ONLY_SETTINGS = ("type", "license", "startup-config", "enforce-startup-config",
                      "suppress-startup-config", "components")


def rewrite(text: str, source: str, host_image: str, switch_image: str) -> str:
    """The file's text rewritten to railab's images (see the module's doc)."""
    loaded = clab.parse(text, source)
    doc = clab.load_yaml(clab.expand_env(text), source)
    topo = loaded.topology
    section = doc["topology"]
    for name, node in topo.nodes.items():
        if node.external:
            continue
        cfg = section["nodes"].get(name) or {}
        if node.role is Role.HOST:
            cfg["image"] = host_image
        else:
            cfg["image"] = switch_image
            if _kind_of(doc, cfg) != "linux":
                cfg["kind"] = "linux"
                for key in KIND_ONLY_SETTINGS:
                    cfg.pop(key, None)
        for key, value in RAILAB_NODE_SETTINGS.items():
            cfg.setdefault(key, value)
        section["nodes"][name] = cfg
    renamed = {(node, old): new for node, old, new in loaded.renamed}
    for link in section.get("links") or []:
        _rewrite_link(link, renamed, set(topo.nodes))
    out = yaml.dump(doc, Dumper=CompactDumper, sort_keys=False, width=200, default_flow_style=False)
    clab.parse(out, source)     # containerlab's schema and railab's reader both take it
    return (f"# {source} on railab's images (railab topo images): deploy with "
            f"`containerlab deploy -t <this file>`, then `railab attach {topo.name}`\n{out}")


def _kind_of(doc: dict, cfg: dict) -> str | None:
    section = doc["topology"]
    group = (section.get("groups") or {}).get(cfg.get("group")) or {}
    return cfg.get("kind") or group.get("kind") or (section.get("defaults") or {}).get("kind")


def _rewrite_link(link: dict, renamed: dict, fabric: set[str]) -> None:
    kind = link.get("type")
    ends = link.get("endpoints")
    if kind not in (None, "veth") or not isinstance(ends, list):
        return                          # a link railab skips: not part of the fabric
    if kind is None:
        new_ends = []
        for text in ends:
            node, _, iface = str(text).partition(":")
            new_ends.append(f"{node}:{renamed.get((node, iface), iface)}")
        link["endpoints"] = new_ends
        nodes = [str(e).partition(":")[0] for e in new_ends]
    else:
        for end in ends:
            end["interface"] = renamed.get((str(end["node"]), str(end["interface"])), end["interface"])
        nodes = [str(e["node"]) for e in ends]
    if all(n in fabric for n in nodes):
        link["mtu"] = LINK_MTU


class CompactDumper(yaml.SafeDumper):
    """Short mappings and lists of plain values on one line (labels, endpoints, ipv4, vars),
    as railab's generated files write them; everything else in block style."""


def _is_short(items) -> bool:
    return len(items) <= 8 and all(isinstance(v, (str, int, float, bool)) or v is None for v in items)


def _represent_dict(dumper, value):
    flow = bool(value) and _is_short(list(value.values()))
    return dumper.represent_mapping("tag:yaml.org,2002:map", value.items(), flow_style=flow)


def _represent_list(dumper, value):
    flow = bool(value) and _is_short(value)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=flow)


CompactDumper.add_representer(dict, _represent_dict)
CompactDumper.add_representer(list, _represent_list)
