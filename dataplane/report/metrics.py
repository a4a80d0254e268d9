"""Numbers that compare load-balancing modes, computed from the runner's RUN dicts.

Every definition lives here (the table, the plots and the sweep helpers only format
them). A RUN is the JSON-serialisable dict the experiment runner writes per mode and run:
``mode``, ``seed``, ``duration_s``, ``nodes``, ``links`` (byte/packet counters per
direction), ``flows`` (receiver statistics), ``switches`` (drops, ECN marks) and the
optional ``timeline`` and ``events``.

Definitions (``D`` = run["duration_s"]):

* **uplink**: a link going one tier up: leaf->spine or spine->core (``a_role``/``b_role``;
  a link written the other way round, spine/leaf, is read in its b->a direction). Its
  *load* is the bytes sent upwards x 8 / D (b/s). Downward directions and host links are
  not uplinks.
* ``goodput_bps`` = sum over flows of payload_bytes x 8 / D; ``elephant_goodput_bps``
  and ``mice_goodput_bps`` the same over flows of class "elephant" / "mice".
* ``offered_bps`` = sum of the flows' offered_bps.
* ``uplink_max_mean`` = max uplink load / mean uplink load; 1.0 when every uplink carried
  nothing (nothing to balance); None when the fabric has no uplinks (rail-only).
* ``jain`` = Jain's fairness index over uplink loads, (sum x)^2 / (n sum x^2): 1 = all
  equal, 1/n = everything on one uplink; 1.0 when all loads are 0; None without uplinks.
* ``uplink_cv`` = standard deviation / mean of uplink loads (population std; 0 when all 0).
* ``max_uplink_util`` = max over uplinks of load / emulated port speed (scaled_bps);
  None when no uplink has a scaled speed.
* ``idle_uplinks`` = uplinks that carried less than IDLE_FRACTION (1%) of the data of
  the busiest uplink of the same run (all uplinks are idle when none carried anything).
  Data = the bytes beyond PROTOCOL_FRAME_BYTES per frame: an uplink that carried only
  acknowledgements and CNPs (62 and 74 bytes) carried no data, however many (colliding
  flows get their packets CE-marked and send back a CNP for each).
  ``idle_leaf_uplinks`` counts only leaf->spine uplinks; ``idle_elephant_uplinks`` only
  those of leaves that send elephants upwards, each against its own busiest uplink (the
  measured side of ``expected_idle_uplinks``).
* ``expected_idle_uplinks`` = sum over leaves with n_leaf > 0 of expected_idle(n_leaf, m_leaf): m_leaf =
  the leaf's uplinks, n_leaf = elephant flows whose source NIC is on that leaf and whose
  destination NIC is on another leaf (they must go up). None when a flow endpoint
  cannot be placed on exactly one leaf, or the fabric has no leaf uplinks.
* ``loss_packets`` = sum of flows' lost; ``loss_pct`` = loss_packets / sum sent_packets
  x 100 (falls back to lost + received when sent_packets is missing).
* ``reorder_pct`` = sum out_of_order / sum packets (received) x 100; 0 when nothing
  was received.
* ``fct_p50_us`` / ``fct_p99_us`` = 50th / 99th percentile of the message completion
  times (completions_us) of all flows, linear interpolation between closest ranks
  (numpy's default); None when no message completed. ``mice_fct_p99_us`` over flows of
  class "mice" only.
* ``latency_mean_us`` = mean one-way latency (sender timestamp to receiver) over every
  received packet: the flows' means weighted by their packet counts; ``latency_max_us``
  the largest of any packet. With real queues they include the queueing delay; None
  when nothing was received.
* ``receiver_drops`` = frames the receivers' sockets dropped (full buffer: the Python
  receiver fell behind); they are in loss_packets but were not lost by the fabric.
* ``drops`` / ``ecn_marked`` = run["switches"]["drops"] / ["ecn_marked"] (switch
  counters); ``ce_packets`` = sum of the flows' ce (CE-marked packets received).
* ``messages_completed`` / ``messages_incomplete`` = sums over flows.
* closed-loop transport (dataplane.traffic.transport), None for open-loop runs:
  ``retx_packets`` / ``retx_bytes`` resent by the requesters; ``naks`` NAKs the
  requesters received; ``timeouts`` retransmission timeouts; ``cnps_sent`` by the
  receivers (notification points), ``cnps_received`` by the senders; ``messages_done_pct``
  = messages every byte of which arrived / messages the workload posted x 100.
* **FCT slowdown** of a message = its completion time (from the message's arrival at
  the sender to the receiver having every byte in order) / its ideal time: the Ethernet
  bits of all its frames (headers and ICRC of every packet) at the sending NIC's line
  rate (the emulated speed, nominal x scale). Alone on an empty railab fabric a message
  takes that long whatever its path: an idle emulated port forwards a frame at once
  (token bucket, no store-and-forward delay) and veths have no propagation delay, so
  the path length adds nothing to the ideal. ``slowdown_avg`` / ``slowdown_p99`` over
  all messages; slowdown_buckets() per message size bucket (SLOWDOWN_EDGES).
  ``qp_rate_min_max``: see qp_rate_min_max() (1 = equal shares). ``host_queue_max_bytes``:
  the deepest queue any host-facing switch port had at the run's samples (every
  sample_interval); ``host_queue_mean_bytes`` the largest of those ports' mean queues
  (the steady state: a QP starting at line rate makes a transient the max catches).
  Steady state by phase: ``steady_queue_max_bytes`` / ``steady_queue_mean_bytes`` (the
  deepest queue at the samples of any host-facing port or leaf uplink, and the largest
  port mean) and
  ``steady_pause_frames`` (PFC frames the switches sent) over the window
  qp_rate_min_max() uses: every QP sending, from 1 s after the last one started (the
  first CNPs are back by then); None without such a window.
* fault runs: network-side ``outage_ms`` / ``recovery_ms`` (from send times), host-side
  delivery gaps and the data plane's reaction times: see fault_metrics.

`mode_summary(runs)` gives, per metric, mean, std (sample std, n-1; 0 for one run),
min, p50, max and the per-run values; None values (not applicable) are left out.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from dataplane.report import collective
from dataplane.report.rundata import (SENDING_LEAF_SHARE, completions, duration, host_port_leaf, leaf_of,
                                      run_label, sum_of, uplinks)
from dataplane.report.stats import distribution, jain_index, max_mean, percentile
from dataplane.topology.model import Endpoint
from dataplane.wire import roce

IDLE_FRACTION = 0.01
PROTOCOL_FRAME_BYTES = 80      # an ACK (62 B) or a CNP (74 B) is no bigger

# Scalar metrics of run_metrics, in display order (mode_summary summarises these).
METRIC_KEYS = (
    "goodput_bps", "elephant_goodput_bps", "mice_goodput_bps", "offered_bps", "uplink_max_mean", "leaf_uplink_max_mean",
    "leaf_uplink_max_mean_settled", "nav_leaf_uplink_max_mean", "jain", "uplink_cv",
    "max_uplink_util", "idle_uplinks", "idle_leaf_uplinks", "idle_elephant_uplinks",
    "expected_idle_uplinks", "uplinks",
    "loss_packets", "loss_pct", "reorder_pct", "out_of_order", "duplicates", "fct_p50_us",
    "fct_p99_us", "mice_fct_p99_us", "latency_mean_us", "latency_max_us", "receiver_drops", "drops", "ecn_marked", "ce_packets", "messages_completed",
    "messages_incomplete", "lossless_loss_pct", "lossy_loss_pct", "lossless_lost", "lossy_lost",
    "pause_frames", "pause_fraction", "held_fraction", "headroom_drops", "host_pause_frames",
    "host_paused_waits",
    "leaf_uplink_max_over_mean", "leaf_uplink_min_over_mean", "completion_s", "ideal_completion_s",
    "completion_over_ideal", "senders_end_s", "achievable_s", "completion_over_achievable",
)
TRANSPORT_KEYS = ("retx_packets", "retx_bytes", "naks", "timeouts", "cnps_sent", "cnps_received",
                  "messages_done_pct", "slowdown_avg", "slowdown_p99", "qp_rate_min_max",
                  "host_queue_max_bytes", "host_queue_mean_bytes", "steady_queue_max_bytes",
                  "steady_queue_mean_bytes", "steady_pause_frames")
METRIC_KEYS = METRIC_KEYS + TRANSPORT_KEYS
SLOWDOWN_EDGES = (1024, 4096, 16384, 65536, 262144)   # message size bucket edges, bytes


def data_bytes(up: dict) -> int:
    """What an uplink carried beyond protocol-sized frames (module doc, idle_uplinks)."""
    return max(int(up["bytes"]) - PROTOCOL_FRAME_BYTES * int(up["packets"]), 0)


def idle_count(values, fraction: float = IDLE_FRACTION) -> int:
    """How many values are below `fraction` of the largest (all of them if the largest is 0)."""
    xs = [float(v) for v in values]
    if not xs:
        return 0
    top = max(xs)
    if top <= 0:
        return len(xs)
    return sum(1 for x in xs if x < fraction * top)


def expected_idle(n: int, m: int) -> float:
    """Expected number of empty uplinks when n equal elephants are hashed uniformly and
    independently onto m uplinks: m (1 - 1/m)^n (each uplink is missed by all n)."""
    if m <= 0:
        return 0.0
    return m * (1 - 1 / m) ** n


def leaf_elephants(run: dict) -> dict[str, tuple[int, int]] | None:
    """leaf -> (n, m): n = elephant flows that must leave the leaf upwards (source NIC on it,
    destination NIC on another leaf), m = its leaf->spine uplinks. None when the fabric has
    no leaf uplinks or an elephant's endpoint cannot be placed on exactly one leaf."""
    per_leaf: dict[str, int] = defaultdict(int)
    for up in uplinks(run):
        if up["tier"] == "leaf-spine":
            per_leaf[up["node"]] += 1
    if not per_leaf:
        return None
    port_leaf = host_port_leaf(run)
    crossing: dict[str, int] = defaultdict(int)
    for flow in run.get("flows", []):
        if flow.get("cls") != "elephant":
            continue
        src, dst = leaf_of(str(flow.get("src")), port_leaf), leaf_of(str(flow.get("dst")), port_leaf)
        if src is None or dst is None:
            return None
        if src != dst:
            crossing[src] += 1
    return {leaf: (crossing.get(leaf, 0), m) for leaf, m in sorted(per_leaf.items())}


def expected_idle_for_run(run: dict) -> float | None:
    """Expected idle uplinks of the leaves that send elephants upwards, if each hashed its
    crossing elephants uniformly at random: sum over those leaves of
    expected_idle(n_leaf, m_leaf); None when leaf_elephants cannot tell."""
    per_leaf = leaf_elephants(run)
    if per_leaf is None or not any(n for n, _m in per_leaf.values()):
        return None
    return sum(expected_idle(n, m) for n, m in per_leaf.values() if n > 0)


def idle_elephant_uplinks(run: dict) -> int | None:
    """Measured counterpart of expected_idle_for_run: idle uplinks (IDLE_FRACTION of the
    leaf's own busiest uplink) of the leaves that send elephants upwards. Leaves without
    elephants are left out: acknowledgements make their uplinks look busy."""
    per_leaf = leaf_elephants(run)
    if per_leaf is None or not any(n for n, _m in per_leaf.values()):
        return None
    by_leaf: dict[str, list[float]] = defaultdict(list)
    for up in uplinks(run):
        if up["tier"] == "leaf-spine":
            by_leaf[up["node"]].append(data_bytes(up))
    return sum(idle_count(by_leaf[leaf]) for leaf, (n, _m) in per_leaf.items() if n > 0)


def idle_pmf(n: int, m: int) -> list[float]:
    """P(exactly k of m uplinks get none of n uniformly hashed elephants), k = 0..m
    (occupancy distribution, by dynamic programming over the elephants)."""
    if m <= 0:
        return [1.0]
    occupied = [0.0] * (m + 1)
    occupied[0] = 1.0
    for _ in range(n):
        nxt = [0.0] * (m + 1)
        for k, p in enumerate(occupied):
            if p:
                nxt[k] += p * k / m
                if k < m:
                    nxt[k + 1] += p * (m - k) / m
        occupied = nxt
    return [occupied[m - k] for k in range(m + 1)]


def expected_idle_pmf_for_run(run: dict) -> list[float] | None:
    """Distribution of the number of idle leaf uplinks of the whole fabric under uniform
    random hashing (per-leaf occupancy distributions convolved); None when unknown."""
    per_leaf = leaf_elephants(run)
    if per_leaf is None:
        return None
    total = [1.0]
    for n, m in per_leaf.values():
        total = [float(x) for x in np.convolve(total, idle_pmf(n, m))]
    return total


def leaf_uplink_balance(run: dict, after_s: float = 0.0) -> float | None:
    """max/mean load of the uplinks of each sending leaf, from the first uplink sample at
    or after after_s to the end of the run; the worst leaf. A sending leaf sent at least
    SENDING_LEAF_SHARE of what the busiest leaf sent upwards (receivers' ACKs alone do
    not make one). None without samples (runs recorded before they were taken)."""
    samples = run.get("uplink_samples") or []
    if len(samples) < 2:
        return None
    start = next((x for x in samples if x["t"] >= after_s), samples[-2])
    if start is samples[-1]:
        start = samples[-2]
    end = samples[-1]
    return _worst_sending_leaf({port: n - start["tx_bytes"].get(port, 0) for port, n in end["tx_bytes"].items()})


def _worst_sending_leaf(uplink_bytes: dict[str, float]) -> float | None:
    """Uplink "leaf:port" -> bytes it sent: the worst max/mean over the uplinks of a
    sending leaf (one that sent SENDING_LEAF_SHARE of the busiest leaf's bytes at least)."""
    per_leaf: dict[str, list[float]] = defaultdict(list)
    for port, n in uplink_bytes.items():
        per_leaf[Endpoint.parse(port).node].append(n)
    busiest = max((sum(v) for v in per_leaf.values()), default=0)
    worst = [max_mean(v) for v in per_leaf.values() if busiest and sum(v) >= SENDING_LEAF_SHARE * busiest]
    return max(worst) if worst else None


def nav_balance(run: dict) -> float | None:
    """For a run under the nav controller: max/mean of the sending leaves' uplink bytes
    over the controller's rounds from the second round with traffic on (the first round
    with traffic holds the flows' start; the controller's plan at its end is the one
    being judged) to the end; the worst leaf. None when the run was not under nav or the
    flows lasted less than three rounds."""
    rounds = (run.get("nav") or {}).get("rounds") or []
    most = max((sum(r["uplink_bytes"].values()) for r in rounds), default=0)
    # rounds with traffic: a tenth of the busiest round at least (not a stray ARP or ACK)
    rounds = [r for r in rounds if most and sum(r["uplink_bytes"].values()) >= most / 10]
    if len(rounds) < 3:
        return None
    per_port: dict[str, int] = defaultdict(int)
    for r in rounds[1:]:
        for port, n in r["uplink_bytes"].items():
            per_port[port] += n
    return _worst_sending_leaf(per_port)


def pfc_metrics(run: dict, d: float) -> dict:
    """PFC: loss of the lossless priority (flows with the lossless DSCP) and of the others,
    pause frames the switches sent, the largest pause fraction of any port (time it kept
    its neighbour paused / the run's duration), the ports that paused, how long switch
    ports held their lossless priority for a pausing neighbour (largest fraction); the
    hosts' side: pause frames their NICs received and how often a flow found its
    priority paused."""
    pm = run.get("port_model") or {}
    dscp = pm.get("pfc_dscp", 26)
    flows = run.get("flows", [])
    lossless = [f for f in flows if f.get("dscp", dscp) == dscp]
    lossy = [f for f in flows if f.get("dscp", dscp) != dscp]

    def loss(fs):
        sent = sum_of(fs, "sent_packets") or (sum_of(fs, "packets") + sum_of(fs, "lost"))
        return sum_of(fs, "lost") / sent * 100 if sent else 0.0

    ports = run.get("pfc_ports") or {}
    hosts = run.get("host_pfc") or {}
    fractions = {p: c.get("paused_ns", 0) / 1e9 / d for p, c in ports.items() if d}
    return {"lossless_loss_pct": loss(lossless), "lossy_loss_pct": loss(lossy) if lossy else None,
            "lossless_lost": sum_of(lossless, "lost"), "lossy_lost": sum_of(lossy, "lost"),
            "pause_frames": sum(int(c.get("pause_frames_sent", 0)) for c in ports.values()),
            "pause_fraction": max(fractions.values()) if fractions else 0.0,
            "paused_ports": sorted(p for p, f in fractions.items() if f > 0),
            "held_fraction": max((c.get("held_ns", 0) / 1e9 / d for c in ports.values()), default=0.0) if d else 0.0,
            "held_ports": sorted(p for p, c in ports.items() if c.get("holds")),
            "headroom_drops": sum(int(c.get("headroom_drops", 0)) for c in ports.values()),
            "host_pause_frames": sum(int(h.get("pause_frames_received", 0)) for h in hosts.values()),
            "host_paused_waits": sum(int(h.get("paused_waits", 0)) for h in hosts.values())}


def run_metrics(run: dict) -> dict:
    """All scalar metrics of one run (definitions in the module docstring; a collective's
    completion and uplink spread in dataplane.report.collective)."""
    d = duration(run)
    flows = run.get("flows", [])
    ups = uplinks(run)
    loads = [u["load_bps"] for u in ups]
    utils = [u["util"] for u in ups if u["util"] is not None]
    leaf_loads = [u["load_bps"] for u in ups if u["tier"] == "leaf-spine"]
    received = sum_of(flows, "packets")
    sent = sum_of(flows, "sent_packets")
    lost = sum_of(flows, "lost")
    sent_total = sent if sent else received + lost
    out_of_order = sum_of(flows, "out_of_order")
    fct = completions(run)
    mice = completions(run, "mice")
    switches = run.get("switches") or {}
    mean = sum(loads) / len(loads) if loads else 0.0
    return {
        "mode": run.get("mode"),
        "label": run_label(run),
        "seed": run.get("seed"),
        "duration_s": d,
        "goodput_bps": sum(int(f.get("payload_bytes") or 0) for f in flows) * 8 / d,
        "elephant_goodput_bps": sum(int(f.get("payload_bytes") or 0) for f in flows
                                    if f.get("cls") == "elephant") * 8 / d,
        "mice_goodput_bps": sum(int(f.get("payload_bytes") or 0) for f in flows
                                if f.get("cls") == "mice") * 8 / d,
        "offered_bps": float(sum(float(f.get("offered_bps") or 0) for f in flows)),
        "uplink_max_mean": max_mean(loads),
        # per sending leaf, worst leaf: whole run, and once the nav controller has had one
        # interval (from t = 0 for other modes)
        "leaf_uplink_max_mean": leaf_uplink_balance(run),
        "leaf_uplink_max_mean_settled": leaf_uplink_balance(
            run, float((run.get("nav") or {}).get("interval_wall_s") or 0.0)),
        "nav_leaf_uplink_max_mean": nav_balance(run),
        "jain": jain_index(loads),
        "uplink_cv": (float(np.std(loads)) / mean if mean else 0.0) if loads else None,
        "max_uplink_util": max(utils) if utils else None,
        "idle_uplinks": idle_count([data_bytes(u) for u in ups]) if ups else 0,
        "idle_leaf_uplinks": idle_count([data_bytes(u) for u in ups if u["tier"] == "leaf-spine"])
        if leaf_loads else 0,
        "idle_elephant_uplinks": idle_elephant_uplinks(run),
        "expected_idle_uplinks": expected_idle_for_run(run),
        "uplinks": len(loads),
        "loss_packets": lost,
        "loss_pct": lost / sent_total * 100 if sent_total else 0.0,
        "reorder_pct": out_of_order / received * 100 if received else 0.0,
        "out_of_order": out_of_order,
        "duplicates": sum_of(flows, "duplicates"),
        "fct_p50_us": percentile(fct, 50),
        "fct_p99_us": percentile(fct, 99),
        "mice_fct_p99_us": percentile(mice, 99),
        **latency_metrics(flows),
        "receiver_drops": int(run.get("receiver_drops") or 0),
        "drops": int(switches.get("drops") or 0),
        "ecn_marked": int(switches.get("ecn_marked") or 0),
        **pfc_metrics(run, d),
        "ce_packets": sum_of(flows, "ce"),
        "messages_completed": sum_of(flows, "messages_completed"),
        "messages_incomplete": sum_of(flows, "messages_incomplete"),
        **fault_metrics(run),
        **transport_metrics(run),
        **collective.collective_metrics(run),
    }


def ideal_fct_ns(size: int, mtu: int, line_bps: float) -> float:
    """A message alone on an empty fabric: its frames' bits at the line rate (module doc)."""
    bits = sum(roce.frame_len(p) for p in roce.segment_message(size, mtu)) * 8
    return bits * 1e9 / line_bps


def slowdowns(run: dict) -> list[tuple[int, float]]:
    """(message bytes, FCT slowdown) of every completed message of a closed-loop run."""
    out = []
    for f in run.get("flows", []):
        line, mtu = f.get("line_bps"), f.get("mtu")
        if not line or not mtu:
            continue
        for size, fct_ns in (f.get("transport_rx") or {}).get("messages", []):
            out.append((size, fct_ns / ideal_fct_ns(size, mtu, line)))
    return out


def slowdown_buckets(run: dict, edges=SLOWDOWN_EDGES) -> list[dict]:
    """Per size bucket [lo, hi): count, average and p99 slowdown (None when empty)."""
    bounds = [0, *edges, None]
    values = slowdowns(run)
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        vs = [v for size, v in values if size >= lo and (hi is None or size < hi)]
        out.append({"lo": lo, "hi": hi, "count": len(vs),
                    "avg": float(np.mean(vs)) if vs else None, "p99": percentile(vs, 99)})
    return out


def transport_metrics(run: dict) -> dict:
    flows = [f for f in run.get("flows", []) if "transport" in f]
    if not flows:
        return {k: None for k in TRANSPORT_KEYS}
    tx = [f.get("transport") or {} for f in flows]
    rx = [f.get("transport_rx") or {} for f in flows]
    posted = sum(int(f.get("messages_sent") or 0) for f in flows)
    done = sum(len(r.get("messages", [])) for r in rx)
    values = [v for _, v in slowdowns(run)]
    return {
        "retx_packets": sum(int(t.get("retx_packets", 0)) for t in tx),
        "retx_bytes": sum(int(t.get("retx_bytes", 0)) for t in tx),
        "naks": sum(int(t.get("naks", 0)) for t in tx),
        "timeouts": sum(int(t.get("timeouts", 0)) for t in tx),
        "cnps_sent": sum(int(r.get("cnps", 0)) for r in rx),
        "cnps_received": sum(int(t.get("cnps", 0)) for t in tx),
        "messages_done_pct": done / posted * 100 if posted else None,
        "slowdown_avg": float(np.mean(values)) if values else None,
        "slowdown_p99": percentile(values, 99),
        "qp_rate_min_max": qp_rate_min_max(tx),
        "host_queue_max_bytes": max((q["max"] for q in (run.get("host_port_queues") or {}).values()),
                                    default=0),
        "host_queue_mean_bytes": max((q["mean"] for q in (run.get("host_port_queues") or {}).values()),
                                     default=0),
        **steady_state(run, steady_window(tx)),
    }


def steady_window(transports: list[dict], settle_s: float = 1.0) -> tuple[float, float] | None:
    """(from, to) in seconds of the run while every QP was sending, from `settle_s` after
    the last one started; None when there is no such window or fewer than 2 QPs."""
    lines = [t.get("rate_timeline") or [] for t in transports]
    if len(lines) < 2 or not all(lines):
        return None
    starts = [next((p[0] for p in line if p[2] > 0), None) for line in lines]
    if None in starts:
        return None
    lo, hi = max(starts) + settle_s, min(line[-1][0] for line in lines)
    return (lo, hi) if lo <= hi else None


def steady_state(run: dict, window: tuple[float, float] | None) -> dict:
    """The host-facing queues and the switches' pause frames inside `window` (module doc)."""
    times = run.get("sample_t") or []
    inside = [i for i, t in enumerate(times) if window and window[0] <= t <= window[1]]
    if not inside:
        return {"steady_queue_max_bytes": None, "steady_queue_mean_bytes": None, "steady_pause_frames": None}
    ports = [*(run.get("host_port_queues") or {}).values(), *(run.get("uplink_queues") or {}).values()]
    series = [q["bytes"] for q in ports if len(q.get("bytes", [])) == len(times)]
    pauses = run.get("pause_frames_at") or []
    return {
        "steady_queue_max_bytes": max((q[i] for q in series for i in inside), default=0),
        "steady_queue_mean_bytes": max((sum(q[i] for i in inside) / len(inside) for q in series), default=0),
        "steady_pause_frames": pauses[inside[-1]] - pauses[max(inside[0] - 1, 0)] if pauses else None,
    }


def qp_rate_min_max(transports: list[dict], settle_s: float = 1.0) -> float | None:
    """Fairness of the QPs' sending rates: min / max of each QP's mean rate of new data
    (rate_timeline) over the samples while all of them were sending, from `settle_s`
    after the last one started; None when there is no such window or fewer than 2 QPs."""
    window = steady_window(transports, settle_s)
    if window is None:
        return None
    lo, hi = window
    lines = [t.get("rate_timeline") or [] for t in transports]
    means = []
    for line in lines:
        rates = [p[2] for p in line if lo <= p[0] <= hi]
        if not rates:
            return None
        means.append(sum(rates) / len(rates))
    return min(means) / max(means) if max(means) > 0 else None


def latency_metrics(flows: list[dict]) -> dict:
    stats = [f["latency_ns"] for f in flows if (f.get("latency_ns") or {}).get("count")]
    count = sum(s["count"] for s in stats)
    if not count:
        return {"latency_mean_us": None, "latency_max_us": None}
    return {"latency_mean_us": sum(s["mean"] * s["count"] for s in stats) / count / 1000,
            "latency_max_us": max(s["max"] for s in stats) / 1000}


def fault_starts(run: dict) -> list[int]:
    """CLOCK_MONOTONIC ns at which the run's faults began: events scheduled for the same
    time (several links cut at once) are one fault, starting with the first of them."""
    first: dict = {}
    for e in run.get("events") or []:
        if e.get("t_ns"):
            key = e.get("at", e["t_ns"])
            first[key] = min(first.get(key, e["t_ns"]), int(e["t_ns"]))
    return sorted(first.values())


def flow_outage(flow: dict, starts: list[int] | None = None) -> dict:
    """A flow's network-side figures (ms; None = unknown) and its host-side gap:
    {outage_ms, recovery_ms, host_gap_ms, note}. With fault event times (`starts`) its
    loss windows are split into episodes, one per fault (a window belongs to the last
    fault that began before it ended; fault_starts), and outage / recovery are the largest episode's
    (a link-down and its repair a second later are two outages, not one of a second).
    0 for a flow that lost nothing; None when lost packets have no usable timing."""
    gap = flow.get("max_gap_us")
    out = {"outage_ms": None, "recovery_ms": None,
           "host_gap_ms": float(gap) / 1000 if gap is not None else None, "note": flow.get("timing_note")}
    lost = int(flow.get("lost") or 0)
    if out["note"] is None and flow.get("outage_us") is None:
        if lost == 0 and int(flow.get("packets") or 0) > 0:
            out.update(outage_ms=0.0, recovery_ms=0.0)
        else:
            out["note"] = "no packet received" if not flow.get("packets") else "no send-time record"
        return out
    if out["note"] is not None:
        return out
    windows = flow.get("loss_windows_ns") or []
    if not starts or not windows or flow.get("loss_windows_truncated"):
        out.update(outage_ms=float(flow["outage_us"]) / 1000, recovery_ms=float(flow["recovery_us"]) / 1000)
        return out
    episodes: dict[int, list] = {}
    for start, end, _n in windows:
        k = sum(1 for t in starts if t <= end)      # 0: before the first event
        episodes.setdefault(k, []).append((start, end))
    out["outage_ms"] = max(ws[-1][1] - ws[0][0] for ws in episodes.values()) / 1e6
    out["recovery_ms"] = max(ws[0][1] - ws[0][0] for ws in episodes.values()) / 1e6
    return out


def _max_known(values: list) -> float | None:
    """The largest value; None (unknown) when any is unknown or there are none."""
    if not values or any(v is None for v in values):
        return None
    return max(values)


def dataplane_reaction(fired: list[dict], log: list[dict], until_ns: int | None = None) -> list[dict]:
    """Each fired fault event with the data plane's reaction, from the agent's event log
    (faults.events). An entry belongs to the last event fired before it that names its
    port ("switch:port" in the event's text: link faults name both ends), else to the
    last event fired before it (switch and plane faults; notices); entries after
    until_ns are left out.
      local:  per port_down/port_up: fault_to_mask_us = mask written (t_map_ns) - fault
              issued (t_ns, just before the carrier change); netlink_to_mask_us = mask
              written - netlink told the agent (None for a repair's port_up: the agent
              applies it at the repair's release, not on netlink).
      remote: per notice received (withdraw/restore): send_to_map_us = the upstream
              switch's map write - the reporter's send (matched on reporter and seq;
              t_tx_ns if the agent logged it, else t_ns).
    failover_us / notice_us = the largest of each (None when there was none)."""
    def when(e: dict) -> int:
        return max(int(e.get(k) or 0) for k in ("t_ns", "t_map_ns", "t_rx_ns"))

    def owner(e: dict) -> int | None:
        before = [i for i, ev in enumerate(fired) if ev.get("t_ns") and int(ev["t_ns"]) <= when(e)]
        port = f"{e.get('switch')}:{e.get('port')}"
        named = [i for i in before if port in str(fired[i].get("what", "")).split()]
        return (named or before or [None])[-1]

    sent = {(e.get("switch"), e.get("seq")): e for e in log if str(e.get("event", "")).endswith("_sent")}
    local: dict[int, list] = {}
    remote: dict[int, list] = {}
    for e in log:
        kind, i = e.get("event"), owner(e)
        if i is None or (until_ns is not None and when(e) >= until_ns):
            continue
        if kind in ("port_down", "port_up"):
            t_map, t_rx = int(e["t_map_ns"]), int(e.get("t_rx_ns") or 0)
            local.setdefault(i, []).append({
                "event": kind, "switch": e.get("switch"), "port": e.get("port"), "t_map_ns": t_map,
                "fault_to_mask_us": (t_map - int(fired[i]["t_ns"])) / 1000,
                "netlink_to_mask_us": (t_map - t_rx) / 1000 if 0 < t_rx < t_map else None})
        elif kind in ("withdraw_received", "restore_received"):
            tx = sent.get((e.get("from"), e.get("seq")))
            t_tx = int(tx.get("t_tx_ns") or tx.get("t_ns") or 0) if tx else 0
            remote.setdefault(i, []).append({
                "event": kind, "switch": e.get("switch"), "from": e.get("from"), "prefix": e.get("prefix"),
                "t_map_ns": int(e["t_map_ns"]),
                "send_to_map_us": (int(e["t_map_ns"]) - t_tx) / 1000 if t_tx else None,
                "rx_to_map_us": (int(e["t_map_ns"]) - int(e["t_rx_ns"])) / 1000})
    out = []
    for i, ev in enumerate(fired):
        if not ev.get("t_ns"):
            out.append(dict(ev))
            continue
        mine, notes = local.get(i, []), remote.get(i, [])
        fail = [x["fault_to_mask_us"] for x in mine if x["event"] == "port_down"] or \
            [x["fault_to_mask_us"] for x in mine]
        notice = [x["send_to_map_us"] for x in notes if x["send_to_map_us"] is not None]
        out.append({**ev, "local": mine, "remote": notes,
                    "failover_us": max(fail) if fail else None, "notice_us": max(notice) if notice else None})
    return out


def fault_lateness_s(run: dict) -> tuple[float | None, bool]:
    """How late the run's faults were made, at worst: issue time (t_ns - t0_ns) minus the
    scheduled `at`, in seconds (a starved runner fires late; None when not recorded),
    and whether any was made after the senders had stopped (duration_s)."""
    t0 = run.get("t0_ns")
    made = [((int(e["t_ns"]) - int(t0)) / 1e9, float(e["at"])) for e in run.get("events") or []
            if t0 and e.get("t_ns") and e.get("at") is not None]
    if not made:
        return None, False
    return max(t - at for t, at in made), any(t >= duration(run) for t, _ in made)


def fault_metrics(run: dict) -> dict:
    """For runs with fault events (empty otherwise). Affected flows = those whose path
    crossed a failed element (on_failed_element; every flow for per-packet modes).

    Network side, from send times (flow_outage; None = unknown for some flow):
      ``outage_ms`` / ``recovery_ms`` = the largest of the affected flows;
      ``outage_elsewhere_ms`` = the largest outage of the other flows (0 expected).
    Host side (receive times, includes the hosts' scheduling):
      ``host_gap_on_failed_ms`` / ``host_gap_elsewhere_ms`` = the longest delivery gap
      of affected / other flows (the second is the run's baseline jitter).
    Data plane (the agent's log, dataplane_reaction over run["events"]):
      ``failover_ms`` = the largest fault -> mask write; ``notice_ms`` = the largest
      notice send -> upstream map write (None: no notices).
    Plus ``flows_on_failed``, ``loss_on_failed``, ``loss_elsewhere`` and
    ``timing_unknown`` (flows whose network-side figures are unknown)."""
    flows = run.get("flows", [])
    if not run.get("events") or not any("on_failed_element" in f for f in flows):
        return {}
    starts = fault_starts(run)
    hit = [f for f in flows if f.get("on_failed_element")]
    rest = [f for f in flows if not f.get("on_failed_element")]
    hit_t = [flow_outage(f, starts) for f in hit]
    rest_t = [flow_outage(f, starts) for f in rest]
    events = run.get("events") or []
    fail = [e["failover_us"] for e in events if e.get("failover_us") is not None]
    notice = [e["notice_us"] for e in events if e.get("notice_us") is not None]
    gaps = lambda ts: max((t["host_gap_ms"] for t in ts if t["host_gap_ms"] is not None), default=None)  # noqa: E731
    return {
        "flows_on_failed": len(hit),
        "loss_on_failed": sum_of(hit, "lost"),
        "loss_elsewhere": sum_of(rest, "lost"),
        "outage_ms": _max_known([t["outage_ms"] for t in hit_t]),
        "recovery_ms": _max_known([t["recovery_ms"] for t in hit_t]),
        "outage_elsewhere_ms": _max_known([t["outage_ms"] for t in rest_t]),
        "host_gap_on_failed_ms": gaps(hit_t),
        "host_gap_elsewhere_ms": gaps(rest_t),
        "failover_ms": max(fail) / 1000 if fail else None,
        "notice_ms": max(notice) / 1000 if notice else None,
        "timing_unknown": sum(1 for t in hit_t + rest_t if t["outage_ms"] is None),
    }


def mode_summary(runs: list[dict], percentiles=(50,)) -> dict:
    """Per metric of METRIC_KEYS: {mean, std, min, p50, max, n, values} over the runs
    (runs where the metric is None are left out; a metric None everywhere maps to None).
    Plus "runs": the per-run metric dicts, "seeds" and "label"."""
    per_run = [run_metrics(r) for r in runs]
    out: dict = {key: distribution([m[key] for m in per_run], percentiles) for key in METRIC_KEYS}
    out["runs"] = per_run
    out["seeds"] = [m["seed"] for m in per_run]
    out["label"] = per_run[0]["label"] if per_run else None
    return out


def idle_summary(runs: list[dict]) -> dict:
    """Measured idle leaf->spine uplinks over runs (mean, std, per-run values) against the
    expected mean under uniform random hashing (mean of the per-run expectations)."""
    per_run = [run_metrics(r) for r in runs]
    measured = [m["idle_elephant_uplinks"] if m["idle_elephant_uplinks"] is not None
                else m["idle_leaf_uplinks"] for m in per_run]
    expected = [m["expected_idle_uplinks"] for m in per_run if m["expected_idle_uplinks"] is not None]
    dist = distribution(measured)
    return {
        "runs": len(runs),
        "measured": measured,
        "measured_mean": dist["mean"] if dist else None,
        "measured_std": dist["std"] if dist else None,
        "expected_mean": float(np.mean(expected)) if expected else None,
        "leaf_uplinks": sum(1 for u in uplinks(runs[0]) if u["tier"] == "leaf-spine") if runs else 0,
    }


