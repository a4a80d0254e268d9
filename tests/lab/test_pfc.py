"""PFC (802.1Qbb) through a deployed lab: the 4:1 incast of experiments/pfc-incast.yml,
PFC off vs on, with tcpdump on a sender's link to see the pause frames on the wire."""
from __future__ import annotations

import collections
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from dataplane.kernel.netns import in_netns
from dataplane.lab.fabric import Fabric
from dataplane.wire import pfc

from .conftest import ROOT, run_experiment, shipped
from .lbtraffic import HostPort


@pytest.mark.flaky(reruns=1)   # a starved agent pauses late (its PFC thread is Python)
def test_incast_pfc_pauses_senders_and_loses_nothing_lossless(lab_factory, tmp_path):
    spec = lab_factory(shipped("rail-optimized"), prefix="pfc")
    report = run_experiment(ROOT / "experiments" / "pfc-incast.yml", tmp_path, name=spec.name)
    off, on = report["modes"]["pfc-off"], report["modes"]["pfc-on"]
    print({k: (off[k], on[k]) for k in ("lossless_lost", "lossy_lost", "pause_frames", "pause_fraction",
                                        "headroom_drops")}, on["paused_ports"])
    # without PFC the incast overflows the leaf's port: lossless frames are dropped
    assert off["lossless_lost"] > 0 and off["pause_frames"] == 0
    # with PFC the leaf pauses the four senders' ports and the lossless priority waits
    assert on["lossless_lost"] == 0 and on["headroom_drops"] == 0
    assert on["pause_frames"] > 0
    assert set(on["paused_ports"]) == {f"leaf1-r0:down{i}" for i in range(2, 6)}
    # the lossy priority (DSCP 0) is not paused: it is still dropped at the full port
    assert on["lossy_lost"] > 0
    # the pause frames arrived: the senders' kernel NICs booked every one of them (their
    # XDP program consumes them, so no capture on a host port sees them), XOFF for the
    # lossless priority (3) and XON, and held that priority while paused
    # (the switches count to after the drain, the engine until its last frame)
    assert 0.9 * on["pause_frames"] <= on["host_pause_frames"] <= on["pause_frames"] and on["host_paused_waits"] > 0
    run = json.loads((Path(report["folder"]) / "results.json").read_text())["modes"]["pfc-on"]["runs"][0]
    srv2 = run["host_pfc"]["srv2:nic0"]
    assert srv2["pause_frames_received"] > 0 and srv2["xon_received"] > 0
    assert int(srv2["paused_ns"].get("3", 0)) > 0 and not any(int(v) for p, v in srv2["paused_ns"].items() if p != "3")
    assert Path(report["folder"]).is_dir()


class _Sniffer:
    """Counts the UDP frames arriving on a host NIC, per destination port."""

    def __init__(self, spec, host: str, ifname: str):
        with in_netns(spec.node(host).netns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
            self.sock.bind((ifname, 0))
        self.sock.settimeout(0.1)
        self.counts: collections.Counter = collections.Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                data, addr = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            if addr[2] != socket.PACKET_OUTGOING and len(data) >= 38 and data[23] == 17:
                self.counts[int.from_bytes(data[36:38], "big")] += 1

    def close(self):
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


def _poll(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_a_paused_switch_port_holds_its_frames_and_the_pause_spreads_upstream(lab_factory):
    """A host pauses its leaf port: the leaf holds the lossless frames for that host in its
    queue (lossy ones still pass), its ingress account fills and it pauses the spine, the
    spine pauses the sender's leaf, that leaf pauses the sender; XON drains every hop and
    every lossless frame arrives."""
    spec = lab_factory(shipped("rail-optimized"), prefix="pfch")
    fab = Fabric(spec.name)
    fab.set_port_model(scale=5e-6, queue="real", buffer_bytes=16384, ecn_bytes=-1, pfc="on",
                       xoff_bytes=4096, xon_bytes=2048, headroom_bytes=16384)
    src, dst = HostPort(spec, "srv1", 0), HostPort(spec, "srv2", 1)     # rail 0 -> rail 1
    pauser = HostPort(spec, "srv2", 1)
    sniffer = _Sniffer(spec, "srv2", dst.ifname)
    lossless = src.frame(dst.ip, 7000, 7001, size=1000, tos=26 << 2)
    lossy = src.frame(dst.ip, 7000, 7002, size=1000, tos=0)
    try:
        src.send([lossless] * 3, rate_bps=1e6)                       # the path works
        assert _poll(lambda: sniffer.counts[7001] == 3, 10), sniffer.counts
        pauser.sock.send(pfc.build_frame(pauser.mac, {3: pfc.MAX_QUANTA}))   # XOFF
        leaf, leaf_port = dst.switch, dst.switch_port

        def port_pfc(switch, port):
            return fab.counters(switch)["switches"][switch]["ports"][port]["pfc"]

        assert _poll(lambda: port_pfc(leaf, leaf_port)["holding"], 10)
        src.send([lossless] * 20, rate_bps=1e6)
        src.send([lossy] * 10, rate_bps=1e6)
        assert _poll(lambda: sniffer.counts[7002] == 10, 10), sniffer.counts   # lossy passes
        # held: at most the one frame a hold lets go as it starts (the frame on the wire)
        assert sniffer.counts[7001] <= 3 + 1, sniffer.counts
        snap = fab.counters()["switches"]
        sent = {(sw, port): c["pfc"]["pause_frames_sent"] for sw, s in snap.items()
                for port, c in s["ports"].items() if c.get("pfc", {}).get("pause_frames_sent")}
        spines = {n.name for n in spec.switches if n.role == "spine"}
        # hop by hop: the leaf paused a spine, a spine paused the sender's leaf, that leaf
        # paused the sender (its port towards srv1)
        print("pause frames sent", sent, "received", dict(sniffer.counts))
        assert any(sw == leaf for sw, _ in sent), sent
        assert any(sw in spines for sw, _ in sent), sent
        assert (src.switch, src.switch_port) in sent, sent
        assert all(c["pfc"].get("headroom_drops", 0) == 0 for s in snap.values() for c in s["ports"].values())
        pauser.sock.send(pfc.build_frame(pauser.mac, {3: 0}))              # XON
        assert _poll(lambda: sniffer.counts[7001] == 23, 20), sniffer.counts   # nothing lost
        assert not port_pfc(leaf, leaf_port)["holding"]
        assert port_pfc(leaf, leaf_port)["holds"] == 1
    finally:
        sniffer.close()
        for port in (src, dst, pauser):
            port.close()


def test_hol_blocking_under_ecmp_stalls_the_victims_and_spraying_frees_them(lab_factory, tmp_path):
    spec = lab_factory(shipped("rail-optimized"), prefix="pfchol")
    report = run_experiment(ROOT / "experiments" / "pfc-hol.yml", tmp_path, name=spec.name)
    ecmp, spray = report["modes"]["ecmp"], report["modes"]["spray-rr"]
    print({k: (ecmp[k], spray[k]) for k in ("mice_goodput_bps", "pause_frames", "pause_fraction",
                                           "lossless_lost", "headroom_drops")}, ecmp["paused_ports"])
    # the victims never cross an uplink, yet under ECMP their hosts are paused for the
    # elephants that collide on one: they lose a large share of their goodput (the issue
    # asks a third; measured 35-52 %, asserted with a margin for a loaded CI machine)
    assert ecmp["mice_goodput_bps"] < 0.8 * spray["mice_goodput_bps"]
    assert ecmp["pause_frames"] > 2 * spray["pause_frames"]
    assert any(p.startswith("leaf1-r0:down") for p in ecmp["paused_ports"])
    assert spray["lossless_lost"] == 0 and ecmp["lossless_lost"] == 0
