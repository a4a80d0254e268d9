"""The kernel NIC's closed loop end to end: the native engine sends reliable QPs from one
namespace, through a two-port XDP wire in a second one that drops (or CE-marks) a share
of the data frames on their way (this kernel has neither netem nor gact; a Linux bridge
in the middle dropped frames for a while after its setup), to the XDP responder in a
third namespace. The ACKs,
NAKs and CNPs come back to the XDP NIC on the sender's port, which books them in the
map the engine reads. Every message must arrive; what the loss costs is checked against
what the bridge dropped. No tight timing is asserted: the machine is shared."""
from __future__ import annotations

import os
import time

import pytest
from bcc import BPF

from dataplane.kernel.netns import in_netns
from dataplane.nic import engine
from dataplane.nic.responder import NicResponder

from .conftest import link_index, sh
from .test_engine import MAC_A, MAC_B, flow

LINE_BPS = 200e6                 # wall-clock line rate of the sender's port
SIZES = [16384] * 24             # 24 messages of 16 packets (mtu 1024)
PACKETS = 24 * 16

# Joins IN and OUT by XDP redirects, as a railab switch would; drops (or CE-marks) PERMILLE
# of the RoCE data frames from IN, counted in hits[0].
WIRE_C = r"""
#include <uapi/linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
BPF_ARRAY(hits, u64, 1);
int xdp_wire(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    struct iphdr *ip = data + sizeof(*eth);
    u8 *bth = (u8 *)(ip + 1) + 8;
    u32 k = 0, sum = 0;
    u16 *w = (u16 *)ip;
    u64 *c;

    if (ctx->ingress_ifindex != IN)
        return bpf_redirect(IN, 0);
    if ((void *)(bth + 1) > end || eth->h_proto != htons(ETH_P_IP) || ip->ihl != 5 ||
        ip->protocol != 17 || *bth > 0x0a)
        return bpf_redirect(OUT, 0);
    if (bpf_get_prandom_u32() % 1000 >= PERMILLE)
        return bpf_redirect(OUT, 0);
    c = hits.lookup(&k);
    if (c)
        __sync_fetch_and_add(c, 1);
    if (!MARK)
        return XDP_DROP;
    ip->tos |= 3;
    ip->check = 0;
#pragma unroll
    for (int i = 0; i < 10; i++)
        sum += w[i];
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    ip->check = ~sum;
    return bpf_redirect(OUT, 0);
}
"""


class Wire:
    """WIRE_C on both ports of the middle namespace, detached on close."""

    def __init__(self, ns: str, permille: int = 0, mark: bool = False):
        self.ns = ns
        index = {name: link_index(ns, name) for name in ("ra", "rb")}
        self.bpf = BPF(text=WIRE_C.encode(), cflags=[f"-DPERMILLE={permille}", f"-DMARK={int(mark)}",
                                                     f"-DIN={index['ra']}", f"-DOUT={index['rb']}"])
        fn = self.bpf.load_func(b"xdp_wire", BPF.XDP)
        self.attached: list[str] = []
        with in_netns(ns):
            for name in index:
                self.bpf.attach_xdp(name.encode(), fn, 0)
                self.attached.append(name)

    @property
    def hits(self) -> int:
        return int(self.bpf[b"hits"][0].value)

    def close(self) -> None:
        with in_netns(self.ns):
            for name in self.attached:
                self.bpf.remove_xdp(name.encode(), 0)
        self.bpf.cleanup()


@pytest.fixture
def wired(netns):
    """a:e0 -- ra [the XDP wire in r] rb -- b:e1; returns (a, r, b)."""
    a, r, b = netns("cla"), netns("clr"), netns("clb")
    sh(["ip", "link", "add", "e0", "netns", a, "type", "veth", "peer", "name", "ra", "netns", r])
    sh(["ip", "link", "add", "e1", "netns", b, "type", "veth", "peer", "name", "rb", "netns", r])
    for ns, ifname, mac in ((a, "e0", MAC_A), (b, "e1", MAC_B)):
        sh(["ip", "-n", ns, "link", "set", ifname, "address", mac])
    for ns, ifname in ((a, "e0"), (b, "e1"), (r, "ra"), (r, "rb")):
        sh(["ip", "-n", ns, "link", "set", ifname, "addrgenmode", "none"])
        sh(["ip", "-n", ns, "link", "set", ifname, "up"])
    return a, r, b


def closed_run(wired, tmp_path, kind: str, *, dcqcn: dict | None = None, nflows: int = 2,
               lossy: tuple[int, bool] = (0, False)) -> tuple[dict, list, dict, int]:
    """The engine's report, the responder's QPs, its counters and the frames the wire
    dropped or marked, after one closed-loop run. lossy: (per mille, CE-mark instead)."""
    a, r, b = wired
    flows = [flow(i, SIZES, rate_bps=0) for i in range(nflows)]
    path = tmp_path / "closed.sched"
    wire = Wire(r, *lossy)
    try:
        with NicResponder(max_qps=16, max_reqs=16) as nic:
            nic.configure(mode="respond", consume=True, ack_every=4, ack_delay_us=100,
                          selective=kind == "selective-repeat", nak_delay_us=200, cnp_interval_us=50)
            nic.attach(a, "e0")
            nic.attach(b, "e1")
            for slot, f in enumerate(flows):
                nic.add_requester(f.src_ip, f.src_qp, slot)
            rel = engine.Reliable(kind, window=32, rto_ns=3_000_000, line_bps={"a:e0": LINE_BPS},
                                  dcqcn=dcqcn, limit_ns=20_000_000_000,
                                  sample_ns=5_000_000 if dcqcn else 0)
            engine.write_schedule(path, {"a:e0": (a, "e0")},
                                  {"a:e0": [(f, MAC_A, MAC_B) for f in flows]}, reliable=rel)
            with engine.SendEngine(path, feedback=(nic.requesters_fd, nic.max_reqs)) as eng:
                eng.go(time.monotonic_ns() + 2_000_000)
                rep = eng.result(timeout=60)
            rep["engine"]["pid"] = eng.pid
            return rep, nic.qps(), nic.counters(), wire.hits
    finally:
        wire.close()


def test_a_clean_link_delivers_everything_without_a_resend(wired, tmp_path):
    rep, qps, counters, _ = closed_run(wired, tmp_path, "go-back-n")
    assert rep["errors"] == 0 and not rep["engine"]["stopped"]
    t = rep["transport"]
    assert [t[str(i)]["unacked_packets"] for i in range(2)] == [0, 0]
    assert all(t[str(i)]["retx_packets"] == 0 and t[str(i)]["timeouts"] == 0 for i in range(2))
    assert rep["per_flow_packets"] == {0: PACKETS, 1: PACKETS}
    assert sorted(q["messages"] for q in qps) == [len(SIZES)] * 2
    acks = sum(t[str(i)]["acks"] for i in range(2))
    assert acks >= 2 * PACKETS // 4 and counters["feedback"] == acks


@pytest.mark.parametrize("kind", ["go-back-n", "selective-repeat"])
def test_a_lossy_link_still_delivers_every_message(wired, tmp_path, kind):
    rep, qps, counters, dropped = closed_run(wired, tmp_path, kind, lossy=(30, False))
    assert dropped > 0
    t = [rep["transport"][str(i)] for i in range(2)]
    assert [x["unacked_packets"] for x in t] == [0, 0]
    assert sorted(q["messages"] for q in qps) == [len(SIZES)] * 2
    retx = sum(x["retx_packets"] for x in t)
    assert sum(x["naks"] + x["timeouts"] for x in t) > 0
    if kind == "selective-repeat":
        # each lost data packet is resent about once (a lost ACK or NAK may add one)
        assert dropped <= retx + sum(x["timeouts"] for x in t) and retx <= 3 * dropped
        assert sum(q["discarded"] for q in qps) == 0
    else:
        assert retx >= dropped // 2 and sum(q["discarded"] for q in qps) > 0


def test_ce_marks_bring_cnps_and_dcqcn_cuts_the_rate(wired, tmp_path):
    dcqcn = {"g": 1 / 16, "alpha_period_ns": 2_000_000, "rate_period_ns": 2_000_000,
             "byte_counter": 10 << 20, "fast_recovery": 5, "rai_fraction": 1e-3,
             "rhai_fraction": 1e-2, "min_rate_fraction": 1e-3}
    rep, qps, counters, marked = closed_run(wired, tmp_path, "go-back-n", dcqcn=dcqcn, nflows=1, lossy=(50, True))
    t = rep["transport"]["0"]
    assert t["unacked_packets"] == 0 and qps[0]["messages"] == len(SIZES)
    assert t["cnps"] > 0 and sum(q["ce"] for q in qps) == marked > 0
    assert t["alpha"] is not None and 0 < t["alpha"] < 1
    rates = [s[1] for s in t["rate_timeline"]]
    assert rates and min(rates) < LINE_BPS


def test_nothing_is_left_behind(wired, tmp_path):
    rep, *_ = closed_run(wired, tmp_path, "go-back-n", nflows=1)
    pid = rep["engine"]["pid"]
    assert not os.path.exists(f"/proc/{pid}")            # ended and reaped
    for ns, ifname in ((wired[0], "e0"), (wired[2], "e1"), (wired[1], "ra"), (wired[1], "rb")):
        assert "xdp" not in sh(["ip", "-n", ns, "link", "show", "dev", ifname]).stdout
