"""A collective's ideal completion, completion and uplink spread (dataplane/report/collective.py)
on hand-made runs: two leaves with 2 uplinks each, hosts at 2 Mb/s, uplinks at 0.5 Mb/s."""
from __future__ import annotations

import pytest

from dataplane.experiment import runner, spec
from dataplane.report import collective, metrics
from dataplane.runtime import labspec
from dataplane.topology import clab
from dataplane.traffic import workload as wl

HOST_BPS, UP_BPS = 2e6, 0.5e6
T0 = 1_000_000_000


def _links(up_bytes: dict[str, int] | None = None) -> list[dict]:
    up_bytes = up_bytes or {}
    links = []
    for host, leaf, port in (("h1", "leaf1", "d1"), ("h2", "leaf1", "d2"),
                             ("h3", "leaf2", "d1"), ("h4", "leaf2", "d2")):
        links.append({"a": f"{host}:nic0", "b": f"{leaf}:{port}", "a_role": "host", "b_role": "leaf",
                      "bytes_ab": 0, "bytes_ba": 0, "scaled_bps": HOST_BPS})
    for leaf in ("leaf1", "leaf2"):
        for i, spine in ((1, "spine1"), (2, "spine2")):
            port = f"{leaf}:up{i}"
            links.append({"a": port, "b": f"{spine}:{leaf}", "a_role": "leaf", "b_role": "spine",
                          "bytes_ab": up_bytes.get(port, 0), "bytes_ba": 0, "scaled_bps": UP_BPS})
    return links


def _flow(src, dst, size, end_s=0.5, last_rx_s=None, **extra):
    f = {"src": f"{src}:nic0", "dst": f"{dst}:nic0", "wire_bytes": size, "schedule_end_s": end_s,
         "lost": 0, "messages_incomplete": 0, "messages_completed": 3,
         "last_rx_ns": T0 + int((last_rx_s or 0) * 1e9), "last_send_ns": T0 + int(end_s * 1e9)}
    f.update(extra)
    return f


def test_the_uplinks_bind_when_a_leaf_sends_more_up_than_they_carry():
    # leaf1 sends 2 x 125,000 bytes to leaf2: 2 Mbit over 2 x 0.5 Mb/s = 2 s; each NIC
    # sends 1 Mbit at 2 Mb/s (0.5 s); the pacing ends at 0.5 s
    run = {"links": _links(), "t0_ns": T0,
           "flows": [_flow("h1", "h3", 125_000), _flow("h2", "h4", 125_000)]}
    bounds = collective.ideal_bounds(run)
    assert bounds["uplinks leaf1"] == pytest.approx(2.0)
    assert bounds["downlinks leaf2"] == pytest.approx(2.0)
    assert bounds["nic tx h1:nic0"] == pytest.approx(0.5)
    assert bounds["pacing"] == 0.5
    assert "uplinks leaf2" not in bounds        # leaf2 sends nothing up
    ideal, name = collective.ideal_completion(run)
    assert ideal == pytest.approx(2.0) and name in ("uplinks leaf1", "downlinks leaf2")


def test_what_the_uplinks_carried_beyond_the_flows_counts_when_more():
    # the flows need 2 s of leaf1's uplinks; they carried 10 % more (ACKs, probes): 2.2 s
    up = {"leaf1:up1": 137_500, "leaf1:up2": 137_500}
    run = {"links": _links(up), "t0_ns": T0,
           "flows": [_flow("h1", "h3", 125_000), _flow("h2", "h4", 125_000)]}
    assert collective.ideal_completion(run) == (pytest.approx(2.2), "uplinks leaf1")
    # ... and never less than the flows' own bytes (counters of a lab that lost frames)
    run["links"] = _links({"leaf1:up1": 1_000})
    assert collective.ideal_completion(run)[0] == pytest.approx(2.0)


def test_flows_inside_a_leaf_use_no_uplink_and_the_senders_can_bind():
    # a leaf-local flow only loads NICs; a slow pacing is the largest bound
    run = {"links": _links(), "t0_ns": T0,
           "flows": [_flow("h1", "h2", 250_000, end_s=3.0), _flow("h1", "h3", 25_000)]}
    bounds = collective.ideal_bounds(run)
    assert bounds["uplinks leaf1"] == pytest.approx(25_000 * 8 / 1e6)
    assert bounds["nic tx h1:nic0"] == pytest.approx(275_000 * 8 / HOST_BPS)
    assert collective.ideal_completion(run) == (3.0, "pacing")


def test_a_nic_receiving_from_many_binds_an_incast():
    run = {"links": _links(), "t0_ns": T0,
           "flows": [_flow("h1", "h2", 500_000), _flow("h3", "h2", 50_000), _flow("h4", "h2", 50_000)]}
    ideal, name = collective.ideal_completion(run)
    assert name == "nic rx h2:nic0" and ideal == pytest.approx(600_000 * 8 / HOST_BPS)


def test_completion_is_the_last_delivery_and_none_when_anything_is_missing():
    flows = [_flow("h1", "h3", 125_000, last_rx_s=2.1), _flow("h2", "h4", 125_000, last_rx_s=1.9)]
    run = {"links": _links(), "t0_ns": T0, "flows": flows}
    assert collective.completion_s(run) == pytest.approx(2.1)
    m = collective.collective_metrics(run)
    assert m["completion_over_ideal"] == pytest.approx(2.1 / 2.0)
    for broken in ({"lost": 1}, {"messages_incomplete": 1}, {"messages_completed": 0}):
        run["flows"] = [flows[0], {**flows[1], **broken}]
        assert collective.completion_s(run) is None
        assert collective.collective_metrics(run)["completion_over_ideal"] is None


def test_a_late_sender_raises_the_achievable_bound_not_the_ideal():
    # the senders ran 1 s late: the last frame left at 2.5 s, after the fabric's ideal of 2 s
    flows = [_flow("h1", "h3", 125_000, last_rx_s=2.6), _flow("h2", "h4", 125_000, last_rx_s=2.2)]
    flows[0]["last_send_ns"] = T0 + int(2.5e9)
    m = collective.collective_metrics({"links": _links(), "t0_ns": T0, "flows": flows})
    assert m["ideal_completion_s"] == pytest.approx(2.0)
    assert m["senders_end_s"] == pytest.approx(2.5) and m["achievable_s"] == pytest.approx(2.5)
    assert m["completion_over_ideal"] == pytest.approx(1.3)
    assert m["completion_over_achievable"] == pytest.approx(2.6 / 2.5)


def test_uplink_spread_per_sending_leaf_over_the_whole_run():
    # leaf1 split 3:1 over its uplinks; leaf2 only sent ACKs (below a tenth): left out
    up = {"leaf1:up1": 300_000, "leaf1:up2": 100_000, "leaf2:up1": 2_000, "leaf2:up2": 1_000}
    run = {"links": _links(up), "t0_ns": T0, "flows": []}
    spread = collective.leaf_uplink_spread(run)
    assert list(spread) == ["leaf1"]
    assert spread["leaf1"]["max_mean"] == pytest.approx(1.5)
    assert spread["leaf1"]["min_mean"] == pytest.approx(0.5)
    m = collective.collective_metrics(run)
    assert m["leaf_uplink_max_over_mean"] == pytest.approx(1.5)
    assert m["leaf_uplink_min_over_mean"] == pytest.approx(0.5)
    assert m["completion_s"] is None and m["ideal_completion_s"] is None


def test_run_metrics_carries_the_collective_numbers():
    flows = [_flow("h1", "h3", 125_000, last_rx_s=2.0)]
    m = metrics.run_metrics({"links": _links({"leaf1:up1": 62_500, "leaf1:up2": 62_500}),
                             "t0_ns": T0, "flows": flows, "duration_s": 1.0})
    assert m["completion_over_ideal"] == pytest.approx(2.0 / 1.0)
    assert m["leaf_uplink_max_over_mean"] == 1.0
    assert {"completion_s", "ideal_completion_s", "completion_over_ideal"} <= set(metrics.METRIC_KEYS)


@pytest.mark.parametrize("name", ["nav-collectives.yml", "nav-all-to-all.yml"])
def test_the_shipped_collectives_are_limited_by_the_uplinks(name):
    """The experiments' own sizing: every flow's messages end before the senders' deadline,
    and on the experiment's lab the uplinks bind at twice the senders' pacing."""
    exp = spec.load(runner.__file__.rsplit("/dataplane/", 1)[0] + f"/experiments/{name}")
    lab = labspec.build(clab.read(exp.lab_file), str(exp.lab_file))
    flows = wl.generate(exp.workload, runner.workload_hosts(lab))
    assert max(f.schedule_end_s for f in flows) < exp.duration_s / 2
    scale = exp.port_model["scale"]
    links = []
    for node in lab.nodes:
        for iface in node.interfaces:
            peer = next(n for n in lab.nodes if n.name == iface.peer_node)
            if (node.role, peer.role) in (("host", "leaf"), ("leaf", "spine")):
                links.append({"a": f"{node.name}:{iface.name}", "b": iface.peer, "a_role": node.role,
                              "b_role": peer.role, "scaled_bps": iface.speed_bps * scale})
    run = {"links": links, "flows": [{"src": f"{f.src_host}:{f.src_ifname}", "dst": f"{f.dst_host}:{f.dst_ifname}",
                                      "wire_bytes": f.wire_bytes, "schedule_end_s": f.schedule_end_s}
                                     for f in flows]}
    bounds = collective.ideal_bounds(run)
    ideal, name = collective.ideal_completion(run)
    assert name.startswith(("uplinks", "downlinks"))
    assert ideal >= 1.9 * bounds["pacing"]
