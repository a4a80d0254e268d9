"""Fault injection on a deployed lab, as a Python API (the experiment runner schedules
these; `railab fault` is a thin CLI around them).

    from dataplane.lab import faults
    t = faults.link_down("mylab", "leaf1:up1", "spine1:down1")["t_ns"]
    faults.apply("mylab", {"fault": "switch-down", "switch": "spine2"})
    faults.degrade("mylab", "spine1:down3", "100G")
    faults.clear("mylab")

Every function takes the lab name and returns a dict with "t_ns": time.monotonic_ns()
taken just before the change was made (CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns()
and of the agent's event log), so a runner can compute reaction and recovery times.

What a fault is:
- link-down A:IF [B:IF]: both ends are set administratively down (`ip link set X down`),
  so each end also loses carrier. Both switches' agents see it through netlink (IFF_UP /
  IFF_LOWER_UP off) and stop using the port at once (local fast failover); a switch that
  has no path left for a prefix notifies its upstream neighbours (dataplane/agent/monitor.py).
- switch-down NAME: every port of the switch down (its neighbours lose carrier).
  switch-up NAME: the switch's XDP state is reset first (flowlets, queues, counters,
  exclusions, learned hosts: as after a reboot), then its ports come up.
- plane-down N / plane-up N: switch-down/up of every switch whose `plane` is N (the
  lab's railab.plane labels, 0-based as in the lab file).
- degrade A:IF SPEED: the emulated port speed becomes SPEED (nominal, e.g. "100G"; the
  lab's port-model scale applies as to every port). restore A:IF undoes it.
Active faults are recorded in the lab's state directory (faults.json), so `clear` finds
them from any process; destroying the lab removes them with everything else.
"""
from __future__ import annotations

import json
import time

from dataplane.agent import client
from dataplane.errors import RuntimeStateError
from dataplane.kernel.netns import in_netns, iproute
from dataplane.runtime import state
from dataplane.units import parse_speed

FAULTS = ("link-down", "link-up", "switch-down", "switch-up", "plane-down", "plane-up",
          "degrade", "restore", "clear")


# ------------------------------------------------------------------ lab access
def _spec(lab: str):
    current = state.load(lab)
    if current is None:
        raise RuntimeStateError(f"lab {lab} is not deployed")
    return current.spec


def _faults_path(lab: str):
    return state.state_dir(lab) / "faults.json"


def _load(lab: str) -> dict:
    try:
        data = json.loads(_faults_path(lab).read_text())
    except (FileNotFoundError, ValueError):
        data = {}
    data.setdefault("links_down", [])
    data.setdefault("switches_down", [])
    data.setdefault("degraded", {})
    return data


def _save(lab: str, data: dict) -> None:
    path = _faults_path(lab)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(path)


def _endpoint(spec, ref: str):
    try:
        return spec.endpoint(ref)
    except KeyError:
        raise ValueError(f"lab {spec.name} has no interface {ref}") from None


def _set_links(items: list[tuple[object, object]], up: bool) -> int:
    """Set interfaces up/down over netlink in their namespaces; returns the monotonic ns
    taken right before the first change."""
    by_ns: dict[str, list[int]] = {}
    for node, iface in items:
        by_ns.setdefault(node.netns, []).append(iface.ifindex)
    sockets = []
    try:
        for netns in by_ns:
            with in_netns(netns):
                sockets.append((iproute(), by_ns[netns]))
        t = time.monotonic_ns()
        for ipr, indexes in sockets:
            for index in indexes:
                ipr.link("set", index=index, state="up" if up else "down")
        return t
    finally:
        for ipr, _ in sockets:
            ipr.close()


def _req(lab: str, op: str, **fields):
    return client.request(lab, op, **fields)


def _bring_up(lab: str, first: list, then: list, settle_s: float = 0.2) -> int:
    """Set interfaces up as one repair: the agent holds their port state while carriers
    come back, then applies it at once, `first` before `then` (a returning switch's own
    ports before its neighbours' ends), so nobody sends into a half-ready switch or link.
    Returns the monotonic ns of the change."""
    ifx_first = [i.ifindex for _, i in first]
    ifx_then = [i.ifindex for _, i in then]
    switch_ports = [x for x in ifx_first + ifx_then if x in _switch_ports(lab)]
    _req(lab, "hold_ports", ifindexes=switch_ports)
    try:
        t = _set_links(first + then, True)
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline and not _all_carrier(first + then):
            time.sleep(0.002)
    finally:
        order = [x for x in ifx_first + ifx_then if x in switch_ports]
        _req(lab, "release_ports", ifindexes=order)
    return t


def _switch_ports(lab: str) -> set[int]:
    return {i.ifindex for n in _spec(lab).switches for i in n.interfaces}


def _all_carrier(items) -> bool:
    """Every interface has its carrier back (IFF_LOWER_UP), read over netlink."""
    by_ns: dict[str, list[int]] = {}
    for node, iface in items:
        by_ns.setdefault(node.netns, []).append(iface.ifindex)
    for netns, indexes in by_ns.items():
        with in_netns(netns):
            ipr = iproute()
        try:
            for index in indexes:
                if not ipr.link("get", index=index)[0]["flags"] & 0x10000:
                    return False
        finally:
            ipr.close()
    return True


# ------------------------------------------------------------------ links
def link_down(lab: str, a: str, b: str | None = None) -> dict:
    """Cut link A-B: both ends go administratively down (each also loses carrier).

    Both, not one: a veth whose far end is merely without carrier still accepts frames
    that XDP redirects into it (veth_xdp_xmit checks the receiving end's NAPI, not the
    carrier), so with one end down the link would keep carrying XDP-forwarded traffic in
    one direction."""
    spec = _spec(lab)
    node, iface = _endpoint(spec, a)
    if b is not None and iface.peer != b:
        raise ValueError(f"{a} is linked to {iface.peer}, not {b}")
    pnode, piface = _endpoint(spec, iface.peer)
    data = _load(lab)
    again = a in data["links_down"] or iface.peer in data["links_down"]
    t = _set_links([(node, iface), (pnode, piface)], False)
    if not again:
        data["links_down"].append(a)
    _save(lab, data)
    return {"fault": "link-down", "a": a, "b": iface.peer, "t_ns": t,
            **({"note": "was already down"} if again else {})}


def link_up(lab: str, a: str, b: str | None = None) -> dict:
    """Repair link A-B (both ends administratively up, unless a switch-down holds one)."""
    spec = _spec(lab)
    node, iface = _endpoint(spec, a)
    pnode, piface = _endpoint(spec, iface.peer)
    if b is not None and iface.peer != b:
        raise ValueError(f"{a} is linked to {iface.peer}, not {b}")
    data = _load(lab)
    recorded = a in data["links_down"] or iface.peer in data["links_down"]
    ends = [(n, i) for n, i in ((node, iface), (pnode, piface)) if n.name not in data["switches_down"]]
    t = _bring_up(lab, ends, [])
    data["links_down"] = [x for x in data["links_down"] if x not in (a, iface.peer)]
    _save(lab, data)
    return {"fault": "link-up", "a": a, "b": iface.peer, "t_ns": t,
            **({} if recorded else {"note": "no link-down of it was recorded"})}


# ------------------------------------------------------------------ switches and planes
def _switches(spec, names: list[str]):
    out = []
    for name in names:
        try:
            node = spec.node(name)
        except KeyError:
            raise ValueError(f"lab {spec.name} has no node {name!r}") from None
        if node.role == "host":
            raise ValueError(f"{name} is a host, not a switch")
        out.append(node)
    return out


def _switches_down(lab: str, names: list[str], fault: str) -> dict:
    spec = _spec(lab)
    nodes = _switches(spec, names)
    # Ports to hosts first: a real switch or plane fails at once, here it takes a netlink
    # call per port (milliseconds each on a busy machine), and a host moves its traffic
    # only when its own port loses carrier: in the other order every call before it was
    # loss (seen: a 96 ms window for a dual plane's plane-down, 50 allowed).
    hosts = {h.name for h in spec.hosts}
    ports = sorted(((n, i) for n in nodes for i in n.interfaces),
                   key=lambda port: port[1].peer.split(":")[0] not in hosts)
    t = _set_links(ports, False)
    data = _load(lab)
    for n in nodes:
        if n.name not in data["switches_down"]:
            data["switches_down"].append(n.name)
    _save(lab, data)
    return {"fault": fault, "switches": [n.name for n in nodes], "t_ns": t}


def _switches_up(lab: str, names: list[str], fault: str) -> dict:
    spec = _spec(lab)
    nodes = _switches(spec, names)
    data = _load(lab)
    # Only switches that a switch-down took down come back (and lose their run-time
    # state, as after a reboot); bringing up a switch that is up changes nothing.
    nodes = [n for n in nodes if n.name in data["switches_down"]]
    if not nodes:
        return {"fault": fault, "switches": [], "reset": {}, "t_ns": time.monotonic_ns(),
                "note": "already up"}
    reset = {}
    for n in nodes:   # a switch comes back without run-time state (as after a reboot)
        reset[n.name] = _req(lab, "switch_reset", switch=n.name)
    down = set(data["links_down"])
    still_down = set(data["switches_down"]) - {n.name for n in nodes}
    own, peers = [], []
    for n in nodes:
        for i in n.interfaces:
            if f"{n.name}:{i.name}" in down or i.peer in down:
                continue
            own.append((n, i))
            pnode, piface = _endpoint(spec, i.peer)
            if pnode.name not in still_down:
                peers.append((pnode, piface))
    t = _bring_up(lab, own, peers)
    data["switches_down"] = [s for s in data["switches_down"] if s not in {n.name for n in nodes}]
    _save(lab, data)
    return {"fault": fault, "switches": [n.name for n in nodes], "reset": reset, "t_ns": t}


def switch_down(lab: str, switch: str) -> dict:
    return _switches_down(lab, [switch], "switch-down")


def switch_up(lab: str, switch: str) -> dict:
    return _switches_up(lab, [switch], "switch-up")


def _plane(spec, plane) -> list[str]:
    names = [n.name for n in spec.switches if n.plane is not None and int(n.plane) == int(plane)]
    if not names:
        planes = sorted({int(n.plane) for n in spec.switches if n.plane is not None})
        raise ValueError(f"lab {spec.name} has no switch in plane {plane} (planes: {planes or 'none'})")
    return names


def plane_down(lab: str, plane: int) -> dict:
    out = _switches_down(lab, _plane(_spec(lab), plane), "plane-down")
    out["plane"] = int(plane)
    return out


def plane_up(lab: str, plane: int) -> dict:
    out = _switches_up(lab, _plane(_spec(lab), plane), "plane-up")
    out["plane"] = int(plane)
    return out


# ------------------------------------------------------------------ port speed
def degrade(lab: str, port: str, speed) -> dict:
    """Lower port A:IF's emulated speed to `speed` (nominal; scaled by the port model)."""
    spec = _spec(lab)
    node, iface = _endpoint(spec, port)
    bps = parse_speed(speed)
    t = time.monotonic_ns()
    res = _req(lab, "port_speed", switch=node.name, port=iface.name, speed_bps=bps)
    data = _load(lab)
    data["degraded"][port] = bps
    _save(lab, data)
    return {"fault": "degrade", "port": port, **res, "t_ns": t}


def restore(lab: str, port: str) -> dict:
    spec = _spec(lab)
    node, iface = _endpoint(spec, port)
    t = time.monotonic_ns()
    res = _req(lab, "port_speed", switch=node.name, port=iface.name, speed_bps=None)
    data = _load(lab)
    data["degraded"].pop(port, None)
    _save(lab, data)
    return {"fault": "restore", "port": port, **res, "t_ns": t}


# ------------------------------------------------------------------ all together
def active(lab: str) -> dict:
    """Faults in force: links_down (A ends), switches_down, degraded {port: b/s}."""
    _spec(lab)
    return _load(lab)


def recorded(lab: str) -> dict:
    """The faults recorded in the lab's state directory, without reading its spec (for
    pollers that ask often: `railab ui`)."""
    return _load(lab)


CLEAR_SETTLE_S = 2.0


def clear(lab: str) -> dict:
    """Undo every active fault: switches up (state reset), links up, speeds restored."""
    data = _load(lab)
    t = time.monotonic_ns()
    out = {"fault": "clear", "t_ns": t, "switches": list(data["switches_down"]),
           "links": list(data["links_down"]), "ports": list(data["degraded"])}
    if data["switches_down"]:
        _switches_up(lab, list(data["switches_down"]), "switch-up")
    for a in list(_load(lab)["links_down"]):
        link_up(lab, a)
    for port in list(_load(lab)["degraded"]):
        restore(lab, port)
    # The repairs' restore notices lift the exclusions the failures caused: wait for
    # them, so that whatever runs next finds the fabric as it was before the faults.
    deadline = time.monotonic() + CLEAR_SETTLE_S
    while status(lab)["exclusions"] and time.monotonic() < deadline:
        time.sleep(0.01)
    return out


def apply(lab: str, event: dict) -> dict:
    """One scheduled event, e.g. {"fault": "link-down", "a": "leaf1:up1", "b": "spine1:down1"},
    {"fault": "switch-down", "switch": "spine1"}, {"fault": "plane-down", "plane": 0},
    {"fault": "degrade", "port": "spine1:down3", "speed": "100G"}, {"fault": "restore",
    "port": ...}, {"fault": "clear"}. Returns the function's result (with "t_ns")."""
    kind = str(event.get("fault", "")).replace("_", "-")
    if kind in ("link-down", "link-up"):
        fn = link_down if kind == "link-down" else link_up
        return fn(lab, event["a"], event.get("b"))
    if kind in ("switch-down", "switch-up"):
        name = event.get("switch") or event.get("node")
        return (switch_down if kind == "switch-down" else switch_up)(lab, name)
    if kind in ("plane-down", "plane-up"):
        return (plane_down if kind == "plane-down" else plane_up)(lab, int(event["plane"]))
    if kind == "degrade":
        return degrade(lab, event["port"], event["speed"])
    if kind == "restore":
        return restore(lab, event["port"])
    if kind == "clear":
        return clear(lab)
    raise ValueError(f"unknown fault {event.get('fault')!r}; known: {', '.join(FAULTS)}")


# ------------------------------------------------------------------ reaction machinery
def notifications(lab: str, *, notify: bool | None = None, arn: bool | None = None,
                  arn_util: float | None = None, arn_queue_bytes: int | None = None,
                  hold_ms: float | None = None, interval_ms: float | None = None,
                  poll_ms: float | None = None, granularity: str | None = None,
                  arn_path: str | None = None, arn_capture: bool | None = None) -> dict:
    """Configure the agent's reaction: notify = FGLB link-down notices (default on); arn =
    adaptive routing notifications on congestion (default off) with its limits
    (utilisation 0..1, queue bytes), receiver hold time, per-port rate limit (both real-fabric
    ms at the nominal speed: the lab waits them / scale), poll period (wall-clock ms), and
    granularity: "prefix" (a leaf avoids the congested spine for the whole prefix) or "flow"
    (the notice names the flows caught on the port; the leaves move only those); arn_path:
    who makes and consumes the link-down notices, "agent" or "dataplane" (the switches' XDP
    programs: dataplane/agent/arnpath.py); arn_capture: with dataplane, consumed notices also go
    up the receiving switch's stack, where tcpdump sees them."""
    fields = dict(notify=notify, arn=arn, arn_util=arn_util, arn_queue_bytes=arn_queue_bytes,
                  hold_ms=hold_ms, interval_ms=interval_ms, poll_ms=poll_ms, granularity=granularity,
                  arn_path=arn_path, arn_capture=arn_capture)
    return _req(lab, "arn_config", **{k: v for k, v in fields.items() if v is not None})


def status(lab: str) -> dict:
    """ARN/notification config, per-switch counters (notify_sent/received, arn_sent/received,
    restore_received, expired, hosts_learned), active exclusions, learned hosts, active faults."""
    out = _req(lab, "arn_status")
    out["faults"] = _load(lab)
    return out


def events(lab: str, since_ns: int = 0) -> list[dict]:
    """The agent's event log since since_ns: port_down/port_up (t_rx_ns when netlink told the
    agent, t_map_ns when the maps were changed), notices sent/received, expiries, learned hosts."""
    return _req(lab, "events", since_ns=since_ns)


def port_states(lab: str, switch: str | None = None) -> dict:
    return _req(lab, "port_states", switch=switch)
