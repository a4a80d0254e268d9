"""Numbers that compare load-balancing modes, computed from the runner's RUN dicts.

Every definition lives here; the computations are split by area: run-data accessors
(rundata), statistics (stats), the idle-uplink model (idlemodel), closed-loop transport
(closedloop), fault runs (faultruns) and collectives (collective); this module gathers them
into run_metrics and mode_summary. The table, the plots and the sweep helpers only
format them. A RUN is the JSON-serialisable dict the experiment runner writes per mode and run:
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
from dataplane.report.faultruns import fault_metrics
from dataplane.report.idlemodel import data_bytes, expected_idle_for_run, idle_count, idle_elephant_uplinks
from dataplane.report.rundata import SENDING_LEAF_SHARE, completions, duration, run_label, sum_of, uplinks
from dataplane.report.stats import distribution, jain_index, max_mean, percentile
from dataplane.report.closedloop import TRANSPORT_KEYS, transport_metrics
from dataplane.topology.model import Endpoint


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
METRIC_KEYS = METRIC_KEYS + TRANSPORT_KEYS


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


def latency_metrics(flows: list[dict]) -> dict:
    stats = [f["latency_ns"] for f in flows if (f.get("latency_ns") or {}).get("count")]
    count = sum(s["count"] for s in stats)
    if not count:
        return {"latency_mean_us": None, "latency_max_us": None}
    return {"latency_mean_us": sum(s["mean"] * s["count"] for s in stats) / count / 1000,
            "latency_max_us": max(s["max"] for s in stats) / 1000}


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


