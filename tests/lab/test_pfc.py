"""PFC (802.1Qbb) through a deployed lab: the 4:1 incast of experiments/pfc-incast.yml,
PFC off vs on, with tcpdump on a sender's link to see the pause frames on the wire."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from dataplane import pfc

from .conftest import ROOT, railab, shipped


@pytest.mark.flaky(reruns=1)   # Python senders on a shared machine: a starved agent pauses late
def test_incast_pfc_pauses_senders_and_loses_nothing_lossless(lab_factory, tmp_path):
    spec = lab_factory(shipped("rail-optimized"), prefix="pfc")
    srv2 = next(n for n in spec.nodes if n.name == "srv2")
    pcap = tmp_path / "pfc.pcap"
    cap = subprocess.Popen(["ip", "netns", "exec", srv2.netns, "tcpdump", "-i", "nic0", "-U", "-w",
                            str(pcap), "ether", "proto", "0x8808"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)                                    # tcpdump ready
        proc = railab("run", str(ROOT / "experiments" / "pfc-incast.yml"), "--json", "--output",
                      str(tmp_path), "--name", spec.name, timeout=600)
    finally:
        time.sleep(0.3)
        cap.terminate()
        cap.wait(timeout=10)
    report = json.loads(proc.stdout)
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
    # the pause frames are on the wire: 802.1Qbb, pausing the lossless priority (3)
    from scapy.utils import rdpcap
    frames = [bytes(p) for p in rdpcap(str(pcap))]
    parsed = [pfc.parse_frame(f) for f in frames]
    assert frames and all(f[:6] == pfc.PFC_DST_MAC for f in frames)
    assert any(q == {3: pfc.MAX_QUANTA} for q in parsed)       # XOFF
    assert any(q == {3: 0} for q in parsed)                    # XON
    assert Path(report["folder"]).is_dir()
