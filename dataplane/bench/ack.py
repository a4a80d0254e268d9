"""ACK turnaround of the kernel NIC against today's Python responder, in one run.

One requester in namespace A sends a go-back-N data frame with the ack-request bit over a
veth to namespace B and waits for the ACK; the next frame goes when it came (or after a
timeout). B's NIC is, in turn:
  * `kernel`: the XDP responder (dataplane.nic.responder) on B's end, answering by XDP_TX;
  * `python`: `hostrun recv` with the go-back-N transport, the process experiments run.
Turnaround = the ACK's kernel receive stamp on A (SO_TIMESTAMPNS, mapped to
CLOCK_MONOTONIC) minus the time just before A's send(): the same requester and the same
clock for both, so the difference is the responder's. Times are wall time (a responder's
reaction does not stretch with a lab's scale).

Needs root; the namespaces, programs and process are gone when it returns.
"""
from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import time

from dataplane.kernel.netns import in_netns
from dataplane.nic.responder import NicResponder
from dataplane.wire import roce
from dataplane.bench.traffic import veth_pair
from dataplane.traffic.receiver import SO_TIMESTAMPNS, _TS, ETH_P_ALL, _ClockMap
from dataplane.traffic.transport import TransportConfig

REQ_MAC, NIC_MAC = "02:00:00:00:0a:01", "02:00:00:00:0b:01"
REQ_IP, NIC_IP = "10.26.0.1", "10.26.0.2"
SRC_QP, DST_QP, FLOW_ID = 0x31, 0x42, 1
TIMEOUT_S = 0.2


def _percentiles(values_ns: list[int]) -> dict:
    v = sorted(values_ns)
    if not v:
        return {"count": 0}
    pick = lambda q: v[min(len(v) - 1, int(round(q * (len(v) - 1))))] / 1000   # noqa: E731
    return {"count": len(v), "p50_us": pick(0.5), "p99_us": pick(0.99), "max_us": v[-1] / 1000}


class _Requester:
    """A's side: one QP sending single-packet messages, each asking for an ACK."""

    def __init__(self, netns: str, ifname: str):
        with in_netns(netns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            self.sock.bind((ifname, ETH_P_ALL))
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.tpl = roce.FrameTemplate(src_mac=REQ_MAC, dst_mac=NIC_MAC, src_ip=REQ_IP, dst_ip=NIC_IP,
                                      sport=49152, dqpn=DST_QP, opcode=roce.Opcode.SEND_ONLY,
                                      payload_len=256)
        self.clock = _ClockMap()
        self.seq = 0
        self.cmsg = socket.CMSG_SPACE(_TS.size)

    def round_trip(self) -> int | None:
        """Send the next packet; its turnaround in ns, None if no ACK came in time."""
        seq = self.seq
        self.seq += 1
        now = time.monotonic_ns()
        frame = self.tpl.fill(seq, True, FLOW_ID, SRC_QP, seq, seq, 0, 1, 256, now, now)
        t0 = time.monotonic_ns()
        self.sock.send(frame)
        deadline = time.monotonic() + TIMEOUT_S
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([self.sock], [], [], left)[0]:
                break
            data, anc, _flags, addr = self.sock.recvmsg(2048, self.cmsg)
            if addr[2] == 4:          # PACKET_OUTGOING: our own frame
                continue
            pkt = roce.parse(data)
            if pkt is None or pkt.opcode != roce.Opcode.ACK or pkt.psn != seq & roce.PSN_MASK:
                continue
            for level, kind, raw in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = _TS.unpack_from(raw)
                    return self.clock.mono(sec * 1_000_000_000 + nsec) - t0
            return time.monotonic_ns() - t0
        return None

    def close(self) -> None:
        self.sock.close()


def _run(req: _Requester, count: int) -> dict:
    samples, missed = [], 0
    for _ in range(count):
        t = req.round_trip()
        if t is None:
            missed += 1
        else:
            samples.append(t)
    out = _percentiles(samples)
    out["missed"] = missed
    return out


def _set_macs(pair) -> None:
    for ns, ifname, mac in ((pair.tx_ns, pair.tx_if, REQ_MAC), (pair.rx_ns, pair.rx_if, NIC_MAC)):
        subprocess.run(["ip", "-n", ns, "link", "set", ifname, "address", mac], check=True)


def ack_turnaround(round_trips: int = 2000) -> dict:
    """{"kernel": {...}, "python": {...}}: turnaround p50/p99/max (us) of each responder."""
    out = {}
    with veth_pair("rln") as pair:
        _set_macs(pair)
        req = _Requester(pair.tx_ns, pair.tx_if)
        try:
            with NicResponder(max_qps=16) as nic:
                nic.configure(mode="respond", consume=True)
                nic.attach(pair.rx_ns, pair.rx_if)
                nic.attach(pair.tx_ns, pair.tx_if, peer_pass=True)   # XDP_TX needs it on the peer
                out["kernel"] = _run(req, round_trips)
                out["kernel"]["responder_acks"] = nic.counters()["acks"]
            req.seq = 0
            out["python"] = _python(pair, req, round_trips)
        finally:
            req.close()
    out["round_trips"] = round_trips
    return out


def _python(pair, req: _Requester, round_trips: int) -> dict:
    cfg = TransportConfig(kind="go-back-n", ack_every=1)
    proc = subprocess.Popen([sys.executable, "-m", "dataplane.traffic.hostrun", "recv", "--netns", pair.rx_ns,
                             "--ports", pair.rx_if, "--transport", json.dumps(cfg.to_dict())],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the Python responder did not start: {proc.stderr.read().strip()[-300:]}")
        result = _run(req, round_trips)
        proc.communicate("{}\n", timeout=30)
        return result
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
