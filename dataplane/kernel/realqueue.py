"""Real queues: the tc side of the port model's real-queue mode.

The emulated port in the XDP program is a virtual queue: it decides tail drops, ECN
marks and the load that flowlet/ARN see, but XDP cannot hold a frame, so nothing waits
and every path of a fabric is equally fast (spraying never reorders, TCP cannot adapt).
In real-queue mode a switch port also gets

  - a clsact qdisc with `tc_handoff` on ingress: the XDP program hands each decided,
    rewritten frame up with XDP_PASS and the egress ifindex in a handoff written into
    the frame, and tc_handoff removes it and redirects the frame to that egress
    device's transmit path;
  - a token-bucket (tbf) root qdisc at the port's emulated speed, where the frame waits.

Both queues drain at the same speed, so the real backlog follows the virtual one; the
virtual queue keeps deciding drops and marks (counted in the data plane's counters) and
the tbf limit leaves room above the virtual buffer so it never drops first.

With PFC on, the root is an HTB at the port's speed with a class for the lossless
priority (1:10, which tc_handoff picks through skb->priority), one for CNPs (1:30, sent
first) and one for everything else (1:20), each able to take the whole port. The lossless class sends through a tbf of its
own: a pause from the neighbour sets that tbf to a trickle (HOLD_BPS) and its end sets it
back, which also refills its bucket, so the held frames leave at once at the port's speed.
The trickle is the slowest rate at which tbf still takes a full frame: its bucket is a
time of at most 2**32 ns, so a held class lets one frame through when the hold starts
(the frame already on the wire, in a real switch) and then at most one per ~4 s.

A release also kicks the qdisc. Changing the tbf does not make the kernel dequeue: the
held frames waited for the tbf's next wake-up, set at the trickle (up to seconds), or for
the next frame queued on the port; a port whose traffic had stopped then drained at a
few per cent of its speed, paused again after each burst (seen: a 2 MB backlog took 28 s
to leave a 20 Mb/s port, and its frames arrived in the next run). Sending a frame makes the
kernel run the qdisc; the kick is a frame for class 1:40, whose pfifo holds nothing and
drops it there, so it never reaches the wire (stats() leaves its drops out).
"""
from __future__ import annotations

import contextlib
import math
import socket
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from dataplane.closing import Closing
from dataplane.kernel.netns import in_netns

TC_INGRESS = "ffff:fff2"
TC_H_ROOT = 0xFFFFFFFF
SHAPER_HANDLE = 0x10000                # "1:"
PORT_CLASS = 0x10001                   # HTB "1:1", the port's speed (PFC on)
LOSSLESS_CLASS = 0x10010               # "1:10" = abi.PFC_TC_LOSSLESS
OTHER_CLASS = 0x10020                  # "1:20" = abi.PFC_TC_OTHER, HTB's default
CNP_CLASS = 0x10030                    # "1:30" = abi.PFC_TC_CNP, CNPs
KICK_CLASS = 0x10040                   # "1:40", drops what it gets: a release's kick
KICK_LEAF = 0x400000                   # "40:", its pfifo of limit 0
KICK_FRAME = bytes(12) + b"\x88\xb5" + bytes(46)     # local experimental EtherType
LOSSLESS_TBF = 0x100000                # "10:", the lossless class's tbf (held for pauses)
TBF_MAX_BUCKET_NS = 2**32 - 1          # the kernel keeps a tbf bucket as at most this many ns
MAX_SHAPER_BPS = (2**32 - 1) * 8       # tbf's 32-bit bytes/s rate (pyroute2 sends no rate64)
ETH_OVERHEAD = 18                      # Ethernet header + one VLAN tag above the L3 MTU
SHAPER_MARGIN = 1.05                   # the real queue drains this much faster than the port
                                       # (shaper_params)
BUCKET_ROUNDING_NS = 1000 + 2 * 64     # tbf keeps its bucket as a time: pyroute2 rounds it
                                       # down to whole microseconds (then 64 ns ticks), and
                                       # the kernel turns that time back into the largest
                                       # frame tbf takes


class RealQueueError(RuntimeError):
    pass


@dataclass(frozen=True)
class ShaperParams:
    rate_bps: int          # tbf rate; min(port speed x SHAPER_MARGIN, MAX_SHAPER_BPS)
    burst_bytes: int       # token bucket depth: one maximum-size frame
    limit_bytes: int       # tbf backlog limit: above the virtual buffer, never the first to drop


def shaper_params(speed_bps: int, buffer_bytes: int, mtu: int) -> ShaperParams:
    """tbf settings for a port of speed_bps with a virtual buffer of buffer_bytes.

    The bucket holds one full frame: tbf refuses frames larger than its bucket, and with
    no more than that each frame waits for the previous one's transmission time, like a
    store-and-forward port (a deeper bucket would let bursts through undelayed). The
    limit is twice the virtual buffer plus the bucket: the two queues see a frame at
    slightly different moments and the virtual one must be the one that drops.

    The rate has a margin over the port's speed because the virtual queue must stay the
    bottleneck. tbf wakes by a timer and loses whatever it wakes late; a starved softirq
    made a 10 Mb/s tbf deliver 9.6 Mb/s with another process keeping a core busy (9.9
    quiet). A real queue slower than the virtual one, however slightly, clocks a
    window-limited sender's ACKs: the sender then offers no more than the real queue
    drains, the virtual queue (which decides ECN, PFC and drops) never fills, and a
    congested port neither marks nor pauses while its real backlog sits full. With the
    margin frames leave a few per cent early when backlogged; the virtual queue still
    decides everything (5 %: 10.1-10.3 Mb/s delivered for 10, busy or quiet)."""
    if speed_bps <= 0:
        raise RealQueueError("a real queue needs a port speed (port model scale > 0)")
    rate = min(int(speed_bps * SHAPER_MARGIN), MAX_SHAPER_BPS)
    # The rounding's worth of bytes on top, or at 10 Gb/s (1,250 bytes per microsecond)
    # the rounded bucket no longer holds a full frame and tbf drops every one.
    burst = mtu + ETH_OVERHEAD + math.ceil(rate * BUCKET_ROUNDING_NS / 8e9)
    return ShaperParams(rate_bps=rate, burst_bytes=burst, limit_bytes=2 * buffer_bytes + burst)


def hold_bps(burst_bytes: int) -> int:
    """The slowest tbf rate that still takes a frame of burst_bytes: a held class's trickle."""
    return math.ceil(1.25 * burst_bytes * 8 * 1e9 / TBF_MAX_BUCKET_NS)   # 1.25: tick rounding


class NamespaceQueues(Closing):
    """Real queues on the ports of one switch namespace, over one netlink socket. Use it
    on one thread: pyroute2 (0.9) answers dumps only on the thread that opened the socket."""

    def __init__(self, netns: str):
        self.netns = netns
        with in_netns(netns):   # the socket stays bound to the namespace it was opened in
            self._ipr = IPRoute()
        self._mtu: dict[int, int] | None = None     # dumped once, when a shaper is set
        self._kick_socks: dict[int, socket.socket] = {}

    def _mtu_of(self, ifindex: int) -> int:
        if self._mtu is None:
            self._mtu = {link["index"]: link.get_attr("IFLA_MTU") for link in self._ipr.get_links()}
        return self._mtu.get(ifindex) or 1500

    def close(self) -> None:
        for sock in self._kick_socks.values():
            sock.close()
        self._ipr.close()

    def attach(self, ifindex: int, handoff_fd: int) -> None:
        """clsact + tc_handoff on ingress of ifindex (replacing an earlier one)."""
        self.detach(ifindex)
        try:
            self._ipr.tc("add", "clsact", ifindex)
            self._ipr.tc("add-filter", "bpf", ifindex, ":1", fd=handoff_fd, name="tc_handoff",
                         parent=TC_INGRESS, classid=1, direct_action=True)
        except NetlinkError as e:
            raise RealQueueError(f"tc handoff on ifindex {ifindex} in {self.netns}: {e}") from None

    def detach(self, ifindex: int) -> None:
        """Remove clsact (and with it tc_handoff) and the shaper from ifindex; no-op if absent."""
        with contextlib.suppress(NetlinkError):
            self._ipr.tc("del", "clsact", ifindex)
        with contextlib.suppress(NetlinkError):   # the root qdisc, whatever its kind
            self._ipr.tc("del", index=ifindex, parent=TC_H_ROOT)

    def shape(self, ifindex: int, speed_bps: int, buffer_bytes: int, classes: bool = False) -> ShaperParams:
        """(Re)set the root qdisc of ifindex for a port of speed_bps: one tbf, or with
        `classes` (PFC) the HTB of the lossless and the other priority."""
        params = shaper_params(speed_bps, buffer_bytes, self._mtu_of(ifindex))
        try:
            if classes:
                self._shape_classes(ifindex, params)
            else:
                self._ipr.tc("replace", "tbf", ifindex, handle=SHAPER_HANDLE,
                             rate=f"{params.rate_bps}bit", burst=params.burst_bytes,
                             limit=params.limit_bytes)
        except NetlinkError as e:
            raise RealQueueError(f"shaper on ifindex {ifindex} in {self.netns}: {e}") from None
        return params

    def _shape_classes(self, ifindex: int, params: ShaperParams) -> None:
        try:      # the classes are there (a new speed, say): change them, queued frames stay
            self._set_classes(ifindex, params, "change")
            return
        except NetlinkError:
            pass
        with contextlib.suppress(NetlinkError):       # a tbf root cannot become an HTB in place
            self._ipr.tc("del", index=ifindex, parent=TC_H_ROOT)
        self._ipr.tc("add", "htb", ifindex, SHAPER_HANDLE, default=OTHER_CLASS & 0xFFFF)
        self._set_classes(ifindex, params, "add")

    def _set_classes(self, ifindex: int, params: ShaperParams, verb: str) -> None:
        rate, burst = f"{params.rate_bps}bit", params.burst_bytes
        self._ipr.tc(f"{verb}-class", "htb", ifindex, PORT_CLASS, parent=SHAPER_HANDLE,
                     rate=rate, ceil=rate, burst=burst, cburst=burst)
        # CNPs get a tenth guaranteed and the first turn at what is left over (HTB prio 0):
        # a CNP is not stuck behind data, as in a switch's strict-priority CNP queue
        shares = {CNP_CLASS: (params.rate_bps // 10, 0), LOSSLESS_CLASS: (params.rate_bps * 9 // 20, 1),
                  OTHER_CLASS: (params.rate_bps * 9 // 20, 1)}
        for cls, (share, prio) in shares.items():
            self._ipr.tc(f"{verb}-class", "htb", ifindex, cls, parent=PORT_CLASS, rate=f"{max(share, 8)}bit",
                         ceil=rate, burst=burst, cburst=burst, prio=prio)
        for cls, leaf in ((OTHER_CLASS, 0x200000), (CNP_CLASS, 0x300000)):     # "20:", "30:"
            self._ipr.tc(verb, "bfifo", ifindex, leaf, parent=cls, limit=params.limit_bytes)
        self._ipr.tc(f"{verb}-class", "htb", ifindex, KICK_CLASS, parent=PORT_CLASS, rate=f"{params.rate_bps // 100}bit",
                     ceil=rate, burst=burst, cburst=burst, prio=1)
        self._ipr.tc(verb, "pfifo", ifindex, KICK_LEAF, parent=KICK_CLASS, limit=0)
        # A new speed (a degrade) while the neighbour's pause holds the class leaves it held
        # and untouched: released here, the paused frames left until the PFC sender's next
        # poll held it again; even set anew to the trickle, a tbf refills its bucket and lets
        # a frame go. The release sets the new speed.
        if verb == "change" and self.lossless_held(ifindex, params):
            return
        self._set_lossless(ifindex, params, held=False, verb=verb)

    def lossless_held(self, ifindex: int, params: ShaperParams) -> bool:
        """Whether the lossless class's tbf runs at a hold's trickle now (its rate is the
        kernel's record of the hold: no other state outlives the process that set it)."""
        for msg in self._ipr.get_qdiscs(index=ifindex):
            if msg["handle"] == LOSSLESS_TBF and msg.get_attr("TCA_KIND") == "tbf":
                rate_bps = msg.get_attr("TCA_OPTIONS").get_attr("TCA_TBF_PARMS")["rate"] * 8
                return rate_bps <= 4 * hold_bps(params.burst_bytes)
        return False

    def _set_lossless(self, ifindex: int, params: ShaperParams, held: bool, verb: str = "change") -> None:
        rate = hold_bps(params.burst_bytes) if held else params.rate_bps
        self._ipr.tc(verb, "tbf", ifindex, LOSSLESS_TBF, parent=LOSSLESS_CLASS, rate=f"{rate}bit",
                     burst=params.burst_bytes, limit=params.limit_bytes)

    def hold(self, ifindex: int, params: ShaperParams, held: bool) -> None:
        """Hold (a pause from the neighbour) or release the lossless class of a port
        shaped with classes and `params`."""
        try:
            self._set_lossless(ifindex, params, held)
        except NetlinkError as e:
            raise RealQueueError(f"PFC hold on ifindex {ifindex} in {self.netns}: {e}") from None
        if not held:
            self._kick(ifindex)

    def _kick(self, ifindex: int) -> None:
        """Make the kernel run the port's qdisc now (see the module's docstring)."""
        sock = self._kick_socks.get(ifindex)
        if sock is None:
            with in_netns(self.netns):
                sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
                ifname = socket.if_indextoname(ifindex)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, KICK_CLASS)
            sock.bind((ifname, 0))
            self._kick_socks[ifindex] = sock
        with contextlib.suppress(OSError):     # ENOBUFS: the kick class dropped it, as meant
            sock.send(KICK_FRAME)

    def stats(self) -> dict[int, dict]:
        """{ifindex: shaper backlog and counters} for every port with a shaper, from one
        dump: backlog_bytes, backlog_packets, sent_packets, drops, overlimits."""
        out, kicks = {}, {}
        for msg in self._ipr.get_qdiscs():
            basic = msg.get_attr("TCA_STATS") or {}
            if msg["parent"] == KICK_CLASS:
                kicks[msg["index"]] = basic.get("drop", 0)
            if msg["parent"] != TC_H_ROOT or msg.get_attr("TCA_KIND") not in ("tbf", "htb"):
                continue
            out[msg["index"]] = {
                "backlog_bytes": basic.get("backlog", 0), "backlog_packets": basic.get("qlen", 0),
                "sent_packets": basic.get("packets", 0), "drops": basic.get("drop", 0),
                "overlimits": basic.get("overlimits", 0)}
        for index, kicked in kicks.items():
            if index in out:
                out[index]["drops"] -= kicked
        return out
