"""Read, validate and write containerlab topology files (`*.clab.yml`).

Writing: a file that validates against containerlab's own schema (dataplane/schema/
clab.schema.json, BSD-3 from the containerlab project, see the LICENSE beside it). railab's
facts live where containerlab allows free-form data:
  topology.defaults.labels  railab.fabric (the kind), railab.param.<name> (generator params)
  node labels               railab.role, railab.rail, railab.plane, railab.pod,
                            railab.index, railab.gpus
  link vars                 railab.speed (e.g. 400G), railab.rail, railab.plane
  link ipv4                 containerlab's own per-endpoint addresses [a, b]
Reading: any containerlab file; see infer.py for how unlabelled facts are inferred.
Interface names become Linux names (<= 15 chars, no '/'): srlinux `ethernet-1/2[/3]` is
`e1-2[-3]` (containerlab's own short form), any other '/' becomes '-', and names still too
long lose a long vendor word (GigabitEthernet -> Gi, ...). Other names are refused.
"""
from __future__ import annotations

import copy
import functools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for

from dataplane import yamlfile
from dataplane.errors import TopologyError
from dataplane.topology import clabshapes, infer
from dataplane.topology.generate import INT_PARAMS, format_speed, parse_speed
from dataplane.topology.model import FABRIC_KINDS, Endpoint, Link, Node, Role, Topology

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schema" / "clab.schema.json"

FABRIC_LABEL = "railab.fabric"
PARAM_PREFIX = "railab.param."
NODE_INT_LABELS = {"rail": 0, "plane": 0, "pod": 0, "index": 0, "gpus": 1}  # name -> minimum
LINK_INT_VARS = {"rail": 0, "plane": 0}
RESERVED_NODE_LABELS = {"railab.role"} | {f"railab.{k}" for k in NODE_INT_LABELS}
RESERVED_LINK_VARS = {"railab.speed"} | {f"railab.{k}" for k in LINK_INT_VARS}

# Older containerlab kind names (still accepted by containerlab) that the schema's enum
# lacks; mapped to the current name for schema validation only.
KIND_ALIASES = {
    "srl": "nokia_srlinux", "ceos": "arista_ceos", "crpd": "juniper_crpd", "sonic": "sonic-vs",
    "xrd": "cisco_xrd", "cvx": "nvidia_cumulusvx", "cumulus_cvx": "nvidia_cumulusvx",
    "cisco_nxos": "cisco_n9kv", "cisco_csr": "cisco_csr1000v",
    "vr-sros": "nokia_sros", "vr-vmx": "juniper_vmx", "vr-vqfx": "juniper_vqfx",
    "vr-xrv": "cisco_xrv", "vr-xrv9k": "cisco_xrv9k", "vr-veos": "arista_veos",
    "vr-csr": "cisco_csr1000v", "vr-n9kv": "cisco_n9kv", "vr-ros": "mikrotik_ros",
    "vr-pan": "paloalto_panos", "vr-ftosv": "dell_ftosv", "vr-vsrx": "juniper_vsrx",
    "vr-aoscx": "aruba_aoscx",
}
# Link types railab skips (with a warning) because they do not touch the data plane.
SKIPPED_LINK_TYPES = {"dummy": "a dummy interface with no peer",
                      "mgmt-net": "a management-network attachment"}
REFUSED_LINK_TYPES = {"host": "connects to the lab's host machine",
                      "macvlan": "attaches to a physical interface of the lab's host machine",
                      "vxlan": "tunnels to another machine",
                      "vxlan-stitched": "tunnels to another machine",
                      "vxlan-stitch": "tunnels to another machine",
                      "veth-stitched": "is stitched to a tunnel"}
SPECIAL_ENDPOINT_NODES = {"host": "host", "macvlan": "macvlan", "mgmt-net": "mgmt-net"}


@dataclass
class Loaded:
    """A file read into the model, with what the reader noticed along the way."""

    topology: Topology
    warnings: list[str] = field(default_factory=list)
    renamed: list[tuple[str, str, str]] = field(default_factory=list)  # node, in file, Linux
    skipped: list[str] = field(default_factory=list)                   # nodes left out


# ---------------------------------------------------------------- reading

def read(path: str | Path, warnings: list[str] | None = None) -> Topology:
    """The Topology of a containerlab file. Warnings are appended to `warnings` if given."""
    loaded = load(path)
    if warnings is not None:
        warnings.extend(loaded.warnings)
    return loaded.topology


def load(path: str | Path) -> Loaded:
    return parse(yamlfile.read_text(path, TopologyError, "topology file"), str(path))


def parse(text: str, source: str = "<text>") -> Loaded:
    return from_document(load_yaml(expand_env(text), source), source)


# ${VAR}, ${VAR:=default}, ${VAR:-default}, ${VAR=default}, ${VAR-default}: containerlab
# substitutes these in the file's text before reading it (a ':' form also takes the
# default when VAR is set but empty). Bare $VAR is left alone: it appears in exec
# commands meant for the node's own shell.
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?)[=-]([^}]*))?\}")


def expand_env(text: str, env: dict[str, str] | None = None) -> str:
    env = os.environ if env is None else env

    def value(match: re.Match) -> str:
        name, colon, default = match.group(1), match.group(2), match.group(3)
        current = env.get(name)
        if default is None:
            return current or ""
        if current is None or (colon and current == ""):
            return default
        return current

    return _ENV_REF.sub(value, text)


def load_yaml(text: str, source: str) -> dict:
    doc = yamlfile.parse(text, source, TopologyError)
    if doc is None:
        raise TopologyError(f"{source}: is empty, not a containerlab topology")
    if not isinstance(doc, dict):
        raise TopologyError(f"{source}: top level is a {_yaml_type(doc)}, not a mapping with "
                            "'name' and 'topology'")
    return doc


def _yaml_type(value: object) -> str:
    return {list: "list", dict: "mapping", str: "string", int: "number", float: "number",
            bool: "boolean", type(None): "null (empty)"}.get(type(value), type(value).__name__)


@functools.lru_cache(maxsize=1)
def _validator():
    text = SCHEMA_PATH.read_text(encoding="utf-8")
    # The schema's mgmt address patterns use \p{N}\p{L} (Unicode classes), which Python's
    # `re` lacks; \w is the same set plus '_'. The file on disk stays an exact copy.
    text = text.replace("\\\\p{N}\\\\p{L}", "\\\\w")
    schema = json.loads(text)
    # The schema declares draft-07, so the brief-link `prefixItems` (a 2020-12 keyword) is
    # not enforced: the reader checks `node:interface` endpoint strings itself.
    return validator_for(schema)(schema)


def schema_kinds() -> frozenset[str]:
    return frozenset(_validator().schema["definitions"]["node-config"]["properties"]["kind"]["enum"])


def validate(doc: dict, source: str) -> None:
    """Raise a one-line TopologyError for the most relevant schema violation, if any."""
    error = best_match(_validator().iter_errors(doc))
    if error is None:
        return
    if error.validator in ("anyOf", "oneOf") and error.context:
        error = _branch_error(error) or error
    path = _json_path(error.absolute_path)
    parts = list(error.absolute_path)
    if parts[:2] == ["topology", "links"] and len(parts) > 2:
        path += f" (link {parts[2] + 1})"  # the numbering railab's own messages use
    message = " ".join(error.message.split())
    if error.validator == "type":   # the message would repeat the whole value
        wanted = error.validator_value if isinstance(error.validator_value, str) else \
            " or ".join(error.validator_value)
        wanted = {"object": "mapping", "array": "list"}.get(wanted, wanted)
        message = f"must be a {wanted}, not a {_yaml_type(error.instance)}"
    if error.validator == "pattern" and len(str(error.validator_value)) > 60:
        message = f"{error.instance!r} is not in the form the schema expects"
    if len(message) > 200:
        message = message[:197] + "..."
    raise TopologyError(f"{source}: does not match the containerlab schema at {path}: {message}")


def _branch_error(error):
    """For 'not valid under any of the given schemas' (links), the error of the branch meant:
    the one whose `type` matched (or the brief form when the link has no type)."""
    branches: dict[int, list] = {}
    for sub in error.context:
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    for subs in branches.values():
        about_type = any(s.validator == "const" or
                         (s.validator in ("required", "additionalProperties") and "'type'" in s.message)
                         for s in subs)
        if not about_type:
            return best_match(subs)
    return None


def _json_path(parts) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "top level"


def _normalised_for_schema(doc: dict, source: str, *, one_link_per_shape: bool = False) -> dict:
    """A copy as containerlab itself would check it: empty (null) sections are empty, old
    kind aliases are their new names, node types compare in lower case (containerlab
    lowercases them). Unknown kinds are refused with a clear message. one_link_per_shape:
    the links reduced to one of each shape (clabshapes), valid exactly when all are."""
    known = schema_kinds()
    given = doc["topology"]
    links = given.get("links")
    if one_link_per_shape and isinstance(links, list):
        links = clabshapes.one_per_shape(links, _validator().schema)
    # links are only read here: copied as a list (their mappings shared), not deeply
    doc = copy.deepcopy({**doc, "topology": {k: v for k, v in given.items() if k != "links"}})
    topo = doc["topology"]
    if "links" in given:
        topo["links"] = list(links) if isinstance(links, list) else copy.deepcopy(links)
    for section in ("kinds", "groups", "defaults", "links"):
        if section in topo and topo[section] is None:
            del topo[section]

    def fix(holder: object, where: str) -> None:
        if not isinstance(holder, dict):
            return
        if isinstance(holder.get("type"), str):
            holder["type"] = holder["type"].lower()
        if isinstance(holder.get("kind"), str):
            kind = holder["kind"]
            if kind in KIND_ALIASES:
                holder["kind"] = KIND_ALIASES[kind]
            elif kind not in known:
                raise TopologyError(f"{source}: {where} has kind {kind!r}, which containerlab "
                                    "does not know")

    for name, cfg in (topo.get("nodes") or {}).items():
        fix(cfg, f"node {name}")
    if isinstance(topo.get("groups"), dict):
        for name, cfg in topo["groups"].items():
            fix(cfg, f"group {name}")
    fix(topo.get("defaults"), "topology.defaults")
    if isinstance(topo.get("kinds"), dict):
        listed = set(_validator().schema["properties"]["topology"]["properties"]["kinds"]
                     .get("properties", {}))
        kinds = {}
        for kind, cfg in topo["kinds"].items():
            fix(cfg, f"topology.kinds.{kind}")
            # The schema's kinds section lists only some kinds; containerlab itself
            # takes settings for any known kind there, old names included.
            for name in (KIND_ALIASES.get(kind, kind), kind):
                if name in listed:
                    kinds[name] = cfg
                    break
        topo["kinds"] = kinds
    return doc


def from_document(doc: dict, source: str = "<document>") -> Loaded:
    if "name" not in doc:
        raise TopologyError(f"{source}: missing the lab name (top-level 'name:')")
    if not isinstance(doc.get("topology"), dict):
        raise TopologyError(f"{source}: missing the 'topology:' section (a mapping with nodes "
                            "and links)")
    if not doc["topology"].get("nodes"):
        raise TopologyError(f"{source}: has no nodes (topology.nodes is empty)")
    if not isinstance(doc["topology"]["nodes"], dict):
        raise TopologyError(f"{source}: topology.nodes must be a mapping of node names")
    try:
        validate(_normalised_for_schema(doc, source, one_link_per_shape=True), source)
    except TopologyError:
        # every link again, so that the message names the first link at fault
        validate(_normalised_for_schema(doc, source), source)
        raise
    return _Reader(doc, source).read()


def _merged_settings(layers) -> dict:
    """A node's containerlab settings with its defaults, kind and group applied (the later
    layer wins; mappings such as labels and env merge key by key)."""
    merged: dict = {}
    for layer in layers:
        for key, value in layer.items():
            if key == "group":
                continue
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    return merged


class _Reader:
    def __init__(self, doc: dict, source: str):
        self.doc, self.source = doc, source
        section = doc["topology"]
        self.defaults = section.get("defaults") or {}
        self.kinds = section.get("kinds") or {}
        self.groups = section.get("groups") or {}
        self.loaded = Loaded(Topology(name=str(doc["name"])))
        self.labelled: set[str] = set()        # nodes with railab.role
        self.unknown_tier: set[str] = set()    # switches whose tier is inferred
        self.unlabelled_links: set[int] = set()

    def fail(self, message: str) -> TopologyError:
        return TopologyError(f"{self.source}: {message}")

    def read(self) -> Loaded:
        topo = self.loaded.topology
        self._fabric_facts(self.defaults.get("labels") or {})
        for name, cfg in self.doc["topology"]["nodes"].items():
            topo.add_node(self._node(str(name), cfg or {}))
        self._links(self.doc["topology"].get("links") or [])
        self._drop_unlinked()
        if not topo.hosts:
            raise self.fail("has no hosts: railab fabrics need linux nodes to carry traffic")
        unlabelled = set(topo.nodes) - (self.labelled - self.unknown_tier)
        infer.complete(topo, self.source, self.unknown_tier, unlabelled, self.unlabelled_links)
        return self.loaded

    # -- fabric kind and generator parameters (topology.defaults.labels)
    def _fabric_facts(self, labels: dict) -> None:
        topo = self.loaded.topology
        kind = labels.get(FABRIC_LABEL)
        if kind is not None:
            if str(kind) not in FABRIC_KINDS:
                raise self.fail(f"label {FABRIC_LABEL} {kind!r} is not one of "
                                f"{', '.join(FABRIC_KINDS)}")
            topo.kind = str(kind)
        for key, value in labels.items():
            if key.startswith(PARAM_PREFIX):
                param = key[len(PARAM_PREFIX):]
                text = str(value)
                topo.params[param] = int(text) if param in INT_PARAMS and text.isdigit() else text

    # -- nodes
    def _node(self, name: str, cfg: dict) -> Node:
        # A group topology.groups does not define gives no settings: containerlab lets a
        # node's group be a plain label (used by its graph and by tools around it).
        group_name = cfg.get("group", self.defaults.get("group"))
        group = (self.groups.get(group_name) if group_name is not None else None) or {}
        kind = cfg.get("kind") or group.get("kind") or self.defaults.get("kind")
        if not kind:
            raise self.fail(f"node {name} has no kind (set kind on the node, its group or "
                            "topology.defaults)")
        kind_cfg = self.kinds.get(kind) or self.kinds.get(KIND_ALIASES.get(kind, kind)) or {}
        layers = (self.defaults, kind_cfg, group, cfg)  # containerlab's precedence, last wins
        labels: dict[str, str] = {}
        for layer in layers:
            labels.update({str(k): str(v) for k, v in (layer.get("labels") or {}).items()})
        image = next((l["image"] for l in reversed(layers) if l.get("image")), None)
        try:
            kind_role = infer.kind_class(kind, image, name)
        except KeyError as err:
            raise self.fail(f"node {name} has kind {kind}, which railab cannot emulate "
                            f"({err.args[0]})") from None
        node = Node(name=name, role=Role.HOST if kind_role == "host" else Role.LEAF, kind=kind)
        role_label = labels.get("railab.role")
        if role_label is not None:
            if role_label not in infer.ROLE_LABELS:
                raise self.fail(f"node {name}: label railab.role {role_label!r} is not one of "
                                f"{', '.join(infer.ROLE_LABELS)}")
            self.labelled.add(name)
            role = infer.ROLE_LABELS[role_label]
            if role is Role.HOST and kind_role == "switch" and kind != "linux":
                raise self.fail(f"node {name}: kind {kind} is a switch, it cannot have "
                                f"railab.role {role_label}")
            if role is not None:
                node.role = role
            else:
                node.role = Role.LEAF  # placeholder until the tier is inferred
                self.unknown_tier.add(name)
        elif kind_role == "switch":
            self.unknown_tier.add(name)
        for fact, minimum in NODE_INT_LABELS.items():
            if f"railab.{fact}" in labels:
                setattr(node, fact, self._int(f"node {name}: label railab.{fact}",
                                              labels[f"railab.{fact}"], minimum))
        own_image = bool(image) and infer.railab_image_role(image) is None
        if role_label == "external" or (role_label is None and kind_role == "host" and own_image):
            node.external = True
            node.container = _merged_settings(layers)
        node.labels = {k: v for k, v in labels.items()
                       if k not in RESERVED_NODE_LABELS and k != FABRIC_LABEL
                       and not k.startswith(PARAM_PREFIX)}
        return node

    def _int(self, what: str, value: object, minimum: int) -> int:
        text = str(value).strip()
        if not text.isdigit() or int(text) < minimum:
            raise self.fail(f"{what} {value!r} is not a whole number >= {minimum}")
        return int(text)

    # -- links
    def _links(self, raw_links: list) -> None:
        topo = self.loaded.topology
        seen_pairs: dict[frozenset, int] = {}
        seen_ends: dict[Endpoint, int] = {}
        for number, raw in enumerate(raw_links, start=1):
            parsed = self._link(number, raw)
            if parsed is None:
                continue
            link, what = parsed
            if link.a.node == link.b.node:
                raise self.fail(f"{what}: connects node {link.a.node} to itself")
            pair = frozenset((link.a, link.b))
            if pair in seen_pairs:
                raise self.fail(f"{what}: duplicates link {seen_pairs[pair]}")
            for end in (link.a, link.b):
                if end in seen_ends:
                    raise self.fail(f"{what}: interface {end} is already used by link "
                                    f"{seen_ends[end]}")
                seen_ends[end] = number
            seen_pairs[pair] = number
            roles = (topo.nodes[link.a.node].role, topo.nodes[link.b.node].role)
            if roles == (Role.HOST, Role.HOST):
                raise self.fail(f"{what}: host {link.a.node} is connected directly to host "
                                f"{link.b.node}; hosts connect to switches (if one is a router "
                                "whose image railab does not recognise, label it "
                                "railab.role: leaf|spine|core)")
            if not any(k.startswith("railab.") for k in link.vars):
                self.unlabelled_links.add(len(topo.links))
            link.vars = self._link_facts(link, what)
            topo.add_link(link)

    def _link(self, number: int, raw: dict) -> tuple[Link, str] | None:
        kind = raw.get("type")
        if kind is None:
            ends = raw.get("endpoints")
            if not isinstance(ends, list) or len(ends) != 2:
                raise self.fail(f"link {number}: needs exactly two endpoints, "
                                f"got {ends!r}"[:300])
            what = f"link {number} ({ends[0]} -- {ends[1]})"
            parts = []
            for text in ends:
                node, sep, iface = str(text).partition(":")
                if not sep or not node or not iface or any(c.isspace() for c in str(text)):
                    raise self.fail(f"{what}: endpoint {text!r} is not 'node:interface'")
                if node in SPECIAL_ENDPOINT_NODES and node not in self.doc["topology"]["nodes"]:
                    return self._special(number, SPECIAL_ENDPOINT_NODES[node], what)
                parts.append((node, iface))
            ipv4 = raw.get("ipv4")
        elif kind == "veth":
            ends = raw["endpoints"]
            what = f"link {number} ({_end_text(ends[0])} -- {_end_text(ends[1])})"
            parts = [(str(e["node"]), str(e["interface"])) for e in ends]
            given = [e.get("ipv4") for e in ends]
            ipv4 = given if any(given) else None
        else:
            endpoint = raw.get("endpoint") or {}
            return self._special(number, kind, f"link {number} (type {kind}, "
                                                f"{_end_text(endpoint)})")
        endpoints = [self._endpoint(what, node, iface) for node, iface in parts]
        link = Link(a=endpoints[0], b=endpoints[1], vars=dict(raw.get("vars") or {}))
        if ipv4:
            padded = [str(a) if a else None for a in list(ipv4) + [None, None]][:2]
            link.ipv4 = (padded[0], padded[1])
        return link, what

    def _special(self, number: int, kind: str, what: str) -> None:
        if kind in SKIPPED_LINK_TYPES:
            self.loaded.warnings.append(f"{what}: skipped, {SKIPPED_LINK_TYPES[kind]} is not part "
                                        "of the fabric")
            return None
        reason = REFUSED_LINK_TYPES.get(kind, "is not a veth between two lab nodes")
        raise self.fail(f"{what}: railab cannot emulate a {kind} link, it {reason}")

    def _endpoint(self, what: str, node: str, iface: str) -> Endpoint:
        if node not in self.loaded.topology.nodes:
            raise self.fail(f"{what}: node {node} is not defined in topology.nodes")
        try:
            linux = linux_ifname(iface)
        except ValueError as err:
            raise self.fail(f"{what}: node {node}: {err}") from None
        if linux != iface:
            entry = (node, iface, linux)
            if entry not in self.loaded.renamed:
                self.loaded.renamed.append(entry)
        return Endpoint(node, linux)

    def _link_facts(self, link: Link, what: str) -> dict:
        facts = link.vars
        if "railab.speed" in facts:
            link.speed_bps = parse_speed(facts["railab.speed"], f"{self.source}: {what}: railab.speed")
        for fact, minimum in LINK_INT_VARS.items():
            if f"railab.{fact}" in facts:
                setattr(link, fact, self._int(f"{what}: var railab.{fact}", facts[f"railab.{fact}"],
                                              minimum))
        return {k: v for k, v in facts.items() if k not in RESERVED_LINK_VARS}

    def _drop_unlinked(self) -> None:
        topo = self.loaded.topology
        linked = {e.node for e, _ in topo.iter_endpoints()}
        if not topo.links:
            raise self.fail("has no links between its nodes")
        for name in list(topo.nodes):
            if name in linked:
                continue
            if name in self.labelled:
                raise self.fail(f"node {name} (railab.role {topo.nodes[name].role.value}) has "
                                "no links")
            self.loaded.warnings.append(f"node {name} has no links: not part of the fabric, "
                                        "skipped")
            self.loaded.skipped.append(name)
            del topo.nodes[name]
            self.unknown_tier.discard(name)


def _end_text(endpoint: object) -> str:
    if isinstance(endpoint, dict):
        return f"{endpoint.get('node')}:{endpoint.get('interface')}"
    return str(endpoint)


_SRL_PORT = re.compile(r"^ethernet-(\d+)/(\d+)(?:/(\d+))?$")
_LONG_WORDS = (("FourHundredGigE", "FH"), ("TwoHundredGigE", "TH"), ("HundredGigE", "Hu"),
               ("FortyGigabitEthernet", "Fo"), ("TwentyFiveGigE", "Twe"),
               ("TenGigabitEthernet", "Te"), ("GigabitEthernet", "Gi"), ("Ethernet", "Et"))


def linux_ifname(name: str) -> str:
    """The Linux name railab gives an interface named `name` in a containerlab file."""
    new = name
    match = _SRL_PORT.match(name)
    if match:
        new = "e" + "-".join(g for g in match.groups() if g)
    new = new.replace("/", "-")
    if len(new) > 15:
        for long, short in _LONG_WORDS:
            if new.startswith(long):
                new = short + new[len(long):]
                break
    if (not new or len(new) > 15 or new in (".", "..")
            or any(c.isspace() or c in ":/" for c in new)):
        raise ValueError(f"interface name {name!r} cannot be a Linux interface name (at most "
                         "15 characters, no spaces or ':') and has no short form")
    return new


# ---------------------------------------------------------------- writing

def _address_plan(topo: Topology):
    # The one call into the addressing plan: the file carries containerlab's per-link ipv4.
    from dataplane.topology.addressing import plan_addresses
    return plan_addresses(topo)


def to_document(topo: Topology) -> dict:
    defaults: dict = {"kind": "linux"}
    labels = {}
    if topo.kind:
        labels[FABRIC_LABEL] = topo.kind
    for param, value in topo.params.items():
        if value is not None:
            labels[PARAM_PREFIX + param] = str(value)
    if labels:
        defaults["labels"] = labels
    nodes = {}
    for node in topo.nodes.values():
        entry: dict = {}
        if node.kind != "linux":
            entry["kind"] = node.kind
        node_labels = {"railab.role": "external" if node.external else node.role.value}
        for fact in NODE_INT_LABELS:
            if getattr(node, fact) is not None:
                node_labels[f"railab.{fact}"] = str(getattr(node, fact))
        node_labels.update({k: str(v) for k, v in node.labels.items()})
        if node.external and node.container.get("image"):
            entry["image"] = node.container["image"]
        entry["labels"] = _Flow(node_labels)
        nodes[node.name] = entry
    plan = _address_plan(topo)
    links = []
    for link in topo.links:
        entry = {"endpoints": _Flow([str(link.a), str(link.b)])}
        given = link.ipv4 or (None, None)
        addrs = []
        for end, text in zip(link.endpoints(), given):
            address = text or plan.address(end)
            addrs.append(str(address) if address else "")
        if any(addrs):
            entry["ipv4"] = _Flow(addrs)
        link_vars = {"railab.speed": format_speed(link.speed_bps)}
        if link.rail is not None:
            link_vars["railab.rail"] = link.rail
        if link.plane is not None:
            link_vars["railab.plane"] = link.plane
        link_vars.update(link.vars)
        entry["vars"] = _Flow(link_vars)
        links.append(entry)
    topology = {"defaults": defaults, "nodes": nodes}
    if links:
        topology["links"] = links
    return {"name": topo.name, "topology": topology}


class _Flow:
    """Marks a short list or mapping to be written on one line."""

    def __init__(self, value):
        self.value = value


class _Dumper(yaml.SafeDumper):
    pass


def _represent_flow(dumper: yaml.SafeDumper, flow: _Flow):
    if isinstance(flow.value, dict):
        return dumper.represent_mapping("tag:yaml.org,2002:map", flow.value.items(), flow_style=True)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", flow.value, flow_style=True)


_Dumper.add_representer(_Flow, _represent_flow)


def dumps(topo: Topology, header: str | None = None) -> str:
    body = yaml.dump(to_document(topo), Dumper=_Dumper, sort_keys=False, width=200,
                     default_flow_style=False)
    comment = "".join(f"# {line}\n".replace("# \n", "#\n") for line in (header or "").splitlines())
    return comment + body


def write(topo: Topology, path: str | Path, header: str | None = None) -> None:
    text = dumps(topo, header)
    # Never hand the user a file containerlab rejects.
    validate(_normalised_for_schema(yaml.safe_load(text), str(path)), str(path))
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as err:
        raise TopologyError(f"{path}: cannot write: {err.strerror}") from None
