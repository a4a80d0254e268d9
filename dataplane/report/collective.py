"""A collective's numbers: how evenly each leaf's uplinks carried it, when its last byte
arrived, and the ideal completion time the fabric's capacity allows.

Computed from a RUN dict of the experiment runner (see metrics; its accessors are in
rundata). Definitions:

* **per-leaf uplink spread**: for each sending leaf (one that sent at least
  rundata.SENDING_LEAF_SHARE of what the busiest leaf sent upwards), the bytes each of its
  leaf->spine uplinks sent over the run's whole window (counters read before the senders
  start and after the queues drained, so from the first packet to the last);
  ``leaf_uplink_max_over_mean`` / ``leaf_uplink_min_over_mean`` are the worst leaf's
  max/mean and min/mean.
* **completion**: the last delivery of any flow (receiver's CLOCK_MONOTONIC) minus the run's
  common start (t0_ns, the senders are told to go). None when any message is incomplete
  or any packet was lost: the collective never completed.
* **ideal**: the largest of these lower bounds (a collective cannot finish before the most
  loaded resource has carried its share, nor before its senders' own pacing sends the last
  frame), fluid and splittable, so no placement of the flows can beat it:
    - ``uplinks L``: the bytes L's uplinks must carry whatever the placement / the sum
      of their speeds (the emulated ones). Those bytes are the frames of the flows from
      L to another leaf, or what L's uplinks carried over the run when that is more (the
      receivers' ACKs and the probes cross them too; their sum over a leaf's uplinks
      does not depend on which uplink each flow took);
    - ``downlinks L``: the same for the spine->L links (flows into L from other leaves);
    - ``nic tx X`` / ``nic rx X``: bytes a host NIC sends / receives / its link's speed;
    - ``pacing``: the latest flow's schedule end (last message start + its frames at the
      flow's rate).
  ``ideal_bound`` names the binding one, so a reader sees whether the fabric or the
  senders set the ideal.
* **senders' end**: the latest send time (railab header) of any delivered packet minus the
  common start: when this run's senders had actually sent everything. Python senders on
  a busy machine can be late by seconds; the fabric cannot finish before they have sent,
  so ``achievable_s`` = max(ideal, senders' end) is the ideal given this run's senders,
  and ``completion_over_achievable`` judges the fabric alone (on a quiet machine the
  senders are on time and it equals ``completion_over_ideal``).
"""
from __future__ import annotations

from collections import defaultdict

from dataplane.report.rundata import SENDING_LEAF_SHARE, host_port_links
from dataplane.report.stats import max_mean
from dataplane.topology.model import Endpoint

# (lower role, upper role) of the links that leave a leaf for a spine
_LEAF_SPINE = ("leaf", "spine")


def _host_links(run: dict) -> dict[str, tuple[str, float]]:
    """Host NIC ("srv1:nic0") -> (its leaf, the link's emulated speed b/s)."""
    return {port: (leaf, float(link.get("scaled_bps") or 0)) for port, (leaf, link) in host_port_links(run).items()}


def _leaf_uplinks(run: dict) -> list[dict]:
    """Leaf->spine links oriented upwards: {leaf, port, up_bytes, down_bytes, speed}."""
    out = []
    for link in run.get("links", []):
        roles = (link.get("a_role"), link.get("b_role"))
        if roles == _LEAF_SPINE:
            low, up, down = link["a"], link.get("bytes_ab", 0), link.get("bytes_ba", 0)
        elif roles[::-1] == _LEAF_SPINE:
            low, up, down = link["b"], link.get("bytes_ba", 0), link.get("bytes_ab", 0)
        else:
            continue
        out.append({"leaf": Endpoint.parse(low).node, "port": low, "up_bytes": int(up or 0),
                    "down_bytes": int(down or 0), "speed": float(link.get("scaled_bps") or 0)})
    return out


def ideal_bounds(run: dict) -> dict[str, float]:
    """Every lower bound on the completion time, seconds (module doc). Flows need
    ``wire_bytes`` and ``schedule_end_s`` (the runner records them); bounds whose
    resource has no emulated speed are left out."""
    hosts = _host_links(run)
    capacity_up: dict[str, float] = defaultdict(float)
    carried_up: dict[str, int] = defaultdict(int)
    carried_down: dict[str, int] = defaultdict(int)
    for up in _leaf_uplinks(run):
        capacity_up[up["leaf"]] += up["speed"]
        carried_up[up["leaf"]] += up["up_bytes"]
        carried_down[up["leaf"]] += up["down_bytes"]
    up_bytes: dict[str, int] = defaultdict(int)
    down_bytes: dict[str, int] = defaultdict(int)
    tx: dict[str, int] = defaultdict(int)
    rx: dict[str, int] = defaultdict(int)
    pacing = 0.0
    for flow in run.get("flows", []):
        size = int(flow.get("wire_bytes") or 0)
        src, dst = flow.get("src"), flow.get("dst")
        tx[src] += size
        rx[dst] += size
        pacing = max(pacing, float(flow.get("schedule_end_s") or 0.0))
        src_leaf, dst_leaf = hosts.get(src, (None, 0))[0], hosts.get(dst, (None, 0))[0]
        if src_leaf and dst_leaf and src_leaf != dst_leaf:
            up_bytes[src_leaf] += size
            down_bytes[dst_leaf] += size
    bounds = {"pacing": pacing}
    # leaf-spine links are symmetric: spine->L carries at the speed of L->spine
    for name, per_leaf, carried in (("uplinks", up_bytes, carried_up),
                                    ("downlinks", down_bytes, carried_down)):
        for leaf, n in per_leaf.items():
            if capacity_up.get(leaf):
                bounds[f"{name} {leaf}"] = max(n, carried.get(leaf, 0)) * 8 / capacity_up[leaf]
    for name, per_nic in (("nic tx", tx), ("nic rx", rx)):
        for nic, n in per_nic.items():
            speed = hosts.get(nic, (None, 0.0))[1]
            if speed:
                bounds[f"{name} {nic}"] = n * 8 / speed
    return bounds


def ideal_completion(run: dict) -> tuple[float, str] | None:
    """(ideal seconds, the binding bound's name); None without flows."""
    if not run.get("flows"):
        return None
    bounds = ideal_bounds(run)
    name = max(bounds, key=lambda k: (bounds[k], k))
    return bounds[name], name


def completion_s(run: dict) -> float | None:
    """Last delivery minus the common start; None when the collective did not complete."""
    flows = run.get("flows", [])
    t0 = run.get("t0_ns")
    if not flows or t0 is None:
        return None
    if any(int(f.get("lost") or 0) or int(f.get("messages_incomplete") or 0)
           or not int(f.get("messages_completed") or 0) or not f.get("last_rx_ns") for f in flows):
        return None
    return (max(int(f["last_rx_ns"]) for f in flows) - int(t0)) / 1e9


def senders_end_s(run: dict) -> float | None:
    """Latest send time of any delivered packet minus the common start (module doc)."""
    t0 = run.get("t0_ns")
    ends = [int(f.get("last_send_ns") or 0) for f in run.get("flows", [])]
    if t0 is None or not ends or not max(ends):
        return None
    return (max(ends) - int(t0)) / 1e9


def leaf_uplink_spread(run: dict) -> dict[str, dict]:
    """Per sending leaf: {max_mean, min_mean, bytes: {port: n}} over the whole run."""
    per_leaf: dict[str, dict[str, int]] = defaultdict(dict)
    for up in _leaf_uplinks(run):
        per_leaf[up["leaf"]][up["port"]] = up["up_bytes"]
    busiest = max((sum(v.values()) for v in per_leaf.values()), default=0)
    out = {}
    for leaf, ports in sorted(per_leaf.items()):
        total = sum(ports.values())
        if not busiest or total < SENDING_LEAF_SHARE * busiest:
            continue
        mean = total / len(ports)
        out[leaf] = {"max_mean": max_mean(ports.values()),
                     "min_mean": min(ports.values()) / mean if mean else 1.0,
                     "bytes": dict(sorted(ports.items()))}
    return out


def collective_metrics(run: dict) -> dict:
    """The scalars run_metrics adds: worst leaf's uplink max/mean and min/mean over the
    whole run, completion, ideal, their ratio and the binding bound."""
    spread = leaf_uplink_spread(run)
    ideal = ideal_completion(run)
    done = completion_s(run)
    sent = senders_end_s(run)
    achievable = max(ideal[0], sent or 0.0) if ideal else None
    return {
        "leaf_uplink_max_over_mean": max((s["max_mean"] for s in spread.values()), default=None),
        "leaf_uplink_min_over_mean": min((s["min_mean"] for s in spread.values()), default=None),
        "completion_s": done,
        "ideal_completion_s": ideal[0] if ideal else None,
        "ideal_bound": ideal[1] if ideal else None,
        "completion_over_ideal": done / ideal[0] if done is not None and ideal and ideal[0] else None,
        "senders_end_s": sent,
        "achievable_s": achievable,
        "completion_over_achievable": done / achievable if done is not None and achievable else None,
    }
