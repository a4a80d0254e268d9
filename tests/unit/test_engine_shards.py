"""A run's send side split over engines (dataplane.nic.shards): ports into balanced
groups, the engines' reports into one, the feedback slots through the shards in turn."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from dataplane.nic import engine, shards, steering
from dataplane.traffic.workload import Flow, Message
from dataplane.wire import roce


def _report(packets, per_flow, p99, *, pfc=None, transport=None, stopped=False):
    rep = {"packets": packets, "bytes": packets * 1000, "errors": 0, "elapsed_s": packets / 1e5,
           "per_flow_packets": per_flow,
           "lateness_ns": {"count": packets, "p50": p99 // 10, "p90": p99 // 2, "p99": p99, "max": p99 * 3},
           "engine": {"ports": 2, "sockets": 2, "flows": len(per_flow), "batches": 10, "syscalls": 11,
                      "retries": 0, "sleeps": 5, "breathers": 1, "unsent_flows": 0, "stopped": stopped,
                      "cut_by_duration": False, "fifo": True, "last_errno": 0, "start_ns": 7}}
    if pfc is not None:
        rep["pfc"] = pfc
    if transport is not None:
        rep["transport"] = transport
    return rep


@given(st.dictionaries(st.text("abcdefgh:0123", min_size=1, max_size=6), st.integers(0, 10**6),
                       min_size=1, max_size=40), st.integers(1, 8))
def test_every_port_lands_in_exactly_one_group_and_groups_are_near_equal(load, n):
    groups = shards.partition(load, n)
    assert sorted(k for g in groups for k in g) == sorted(load)
    assert 1 <= len(groups) <= n and all(groups)
    order = list(load)
    assert all(g == sorted(g, key=order.index) for g in groups)
    totals = [sum(load[k] for k in g) for g in groups]
    # greedy by the heaviest first: no group exceeds another by more than its own heaviest port
    for g, total in zip(groups, totals):
        assert total - min(totals) <= max(load[k] for k in g)


def test_one_group_keeps_every_port_in_order():
    assert shards.partition({"b": 1, "a": 5, "c": 3}, 1) == [["b", "a", "c"]]


def test_the_shard_count_follows_the_cpus_and_the_ports(monkeypatch):
    monkeypatch.delenv(shards.SHARDS_ENV, raising=False)
    monkeypatch.setattr(shards.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert shards.shard_count(16) == 4 and shards.shard_count(3) == 3 and shards.shard_count(1) == 1
    # closed loop: one CPU is left to the agent and the rest
    assert shards.shard_count(16, closed_loop=True) == 3 and shards.shard_count(2, closed_loop=True) == 2
    monkeypatch.setattr(shards.os, "sched_getaffinity", lambda pid: {0, 1})
    assert shards.shard_count(16, closed_loop=True) == 1 and shards.shard_count(16) == 2
    monkeypatch.setenv(shards.SHARDS_ENV, "1")
    assert shards.shard_count(16) == 1
    for bad in ("0", "two"):
        monkeypatch.setenv(shards.SHARDS_ENV, bad)
        with pytest.raises(ValueError, match=shards.SHARDS_ENV):
            shards.shard_count(16)


def test_engines_follow_the_offered_rate(monkeypatch):
    monkeypatch.delenv(shards.SHARDS_ENV, raising=False)
    monkeypatch.setattr(shards.os, "sched_getaffinity", lambda pid: set(range(8)))
    assert shards.shard_count(16, pps=1_000) == 1
    assert shards.shard_count(16, pps=shards.ENGINE_PPS * 2.5) == 3
    assert shards.shard_count(16, pps=1e9) == 8 == shards.shard_count(16)
    # 1,000 frames a second each: 500 of them take 0.5 s
    flows = [_flow(i, rate_bps=8 * roce.frame_len(1024) * 1000, messages=500) for i in range(3)]
    assert shards.offered_pps(flows, None) == pytest.approx(3 * 1000)
    assert shards.offered_pps(flows, 0.25) == pytest.approx(3 * 500 / 0.25)
    assert shards.offered_pps([_flow(0, rate_bps=0)], None) == float("inf")
    assert shards.offered_pps([], 1.0) == 0.0


def test_merged_reports_add_counts_and_keep_the_worst_lateness():
    a = _report(300, {1: 100, 2: 200}, 40_000, transport={"1": {"acks": 3}})
    b = _report(50, {3: 50}, 90_000, transport={"3": {"acks": 1}}, stopped=True)
    rep = shards.merge_reports([a, b])
    assert (rep["packets"], rep["bytes"], rep["errors"]) == (350, 350_000, 0)
    assert rep["per_flow_packets"] == {1: 100, 2: 200, 3: 50}
    assert rep["lateness_ns"] == {"count": 350, "p50": 9_000, "p90": 45_000, "p99": 90_000, "max": 270_000}
    assert rep["elapsed_s"] == pytest.approx(3e-3)
    assert rep["transport"] == {"1": {"acks": 3}, "3": {"acks": 1}}
    e = rep["engine"]
    assert (e["shards"], e["ports"], e["batches"], e["stopped"], e["fifo"]) == (2, 4, 20, True, True)


def test_a_single_report_passes_through_and_per_shard_port_indexes_are_not_merged():
    one = _report(10, {1: 10}, 1_000, pfc={"0": {"pause_frames_received": 2}})
    assert shards.merge_reports([one])["engine"]["shards"] == 1
    assert shards.merge_reports([one])["pfc"] == one["pfc"]
    assert "pfc" not in shards.merge_reports([one, _report(5, {2: 5}, 1_000, pfc={"0": {}})])


def _flow(i, *, rate_bps=1e6, messages=1):
    """Flow i: `messages` one-frame messages of 1,024 bytes, all due at the start."""
    return Flow(flow_id=i, cls="mice", src_host="a", src_ifname="eth0", src_ip="10.0.0.1", dst_host="b",
                dst_ifname="eth0", dst_ip="10.0.1.1", src_port=49152 + i, dst_port=roce.ROCE_PORT,
                src_qp=32 + i, dst_qp=16 + i, opcode="send", dscp=26, rate_bps=rate_bps, mtu=1024,
                messages=tuple(Message(msg_id=m, size=1024, start_ns=0) for m in range(messages)))


def test_a_shards_schedule_numbers_its_feedback_slots_from_its_first(tmp_path):
    flows = [_flow(i) for i in range(3)]
    path = tmp_path / "schedule"
    engine.write_schedule(path, {"h1:eth0": ("", "eth0")},
                          {"h1:eth0": [(f, "02:00:00:00:00:01", "02:00:00:00:00:02") for f in flows]},
                          first_slot=5)
    assert [f["fb_slot"] for f in engine.read_schedule(path)["flows"]] == [5, 6, 7]


def test_the_forwarding_gets_the_cpus_the_engines_leave_and_none_when_every_cpu_has_one():
    assert steering.plan(1, [0, 1]) == ([0], [1])
    assert steering.plan(1, [3, 1, 2]) == ([1], [2, 3])
    assert steering.plan(2, [0, 1]) == ([], [])
    assert steering.plan(3, [0, 1]) == ([], [])


def test_cpu_masks_are_hex_words_of_32_cpus_as_sysfs_takes_them():
    assert steering.cpu_mask([1]) == "00000002"
    assert steering.cpu_mask([0, 2, 3]) == "0000000d"
    assert steering.cpu_mask([1, 33]) == "00000002,00000002"
    assert steering.cpu_mask([]) == "00000000"


def test_backlog_drops_add_up_the_second_column_of_every_cpu(tmp_path, monkeypatch):
    stat = tmp_path / "softnet_stat"
    stat.write_text("01597efb 00000000 00000005\n02a310f7 0004cc28 00002624\n")
    monkeypatch.setattr(steering, "SOFTNET_STAT", str(stat))
    assert steering.backlog_drops() == 0x4CC28
