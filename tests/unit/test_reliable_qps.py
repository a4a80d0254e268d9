"""The closed-loop sender's NIC arbitration: ready QPs are served in turn (a short message
does not wait behind a long one on another QP), and a QP whose message arrives later
joins when it arrives. Real sender loop and frames; the wire is a recorder and no ACK
comes back (a window of 1,024 and a long RTO let every first transmission go)."""
from __future__ import annotations

import socket
import time

from dataplane.traffic import reliable, sender, transport as tp
from dataplane.traffic.workload import Flow, Message
from dataplane.wire import roce
from recordingwire import RecordingWire

LINE_BPS = 20e6




def _flow(flow_id: int, size: int, start_ns: int = 0) -> Flow:
    return Flow(flow_id=flow_id, cls="elephant", src_host="a", src_ifname="nic0", src_ip="10.0.0.1",
                dst_host="b", dst_ifname="nic0", dst_ip="10.0.0.2", src_port=49152 + flow_id,
                dst_port=4791, src_qp=0x100 + flow_id, dst_qp=0x200 + flow_id, opcode="write",
                dscp=26, rate_bps=LINE_BPS, mtu=1024, messages=(Message(0, size, start_ns),))


def _send_all(flows) -> tuple[int, list[tuple[int, int]]]:
    """(start ns, [(send ns, destination QP)]) of every frame the sender put on the wire."""
    wire = RecordingWire()
    quiet_a, quiet_b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    quiet_a.setblocking(False)
    try:
        prepared = {"nic0": sender.prepare_flows(flows, "02:00:00:00:00:01", "02:00:00:00:00:02")}
        cfg = tp.TransportConfig(kind="go-back-n", window=1024, rto_us=1e9)
        start = time.monotonic_ns() + 20_000_000
        reliable.run({"nic0": wire}, [quiet_a], reliable.packets_of(prepared), cfg,
                     {"nic0": LINE_BPS}, None, duration_s=0.0, limit_s=0.6, burst_packets=1,
                     start_ns=start)
    finally:
        quiet_a.close()
        quiet_b.close()
    return start, [(t, roce.parse(f).dqpn) for t, f in wire.sent]


def test_ready_qps_are_served_in_turn():
    long_qp, short_qp = _flow(1, 40 * 1024), _flow(2, 4 * 1024)
    _, sent = _send_all([long_qp, short_qp])
    order = [q for _, q in sent]
    assert order.count(long_qp.dst_qp) == 40 and order.count(short_qp.dst_qp) == 4
    # The short message is done within its first 8 frames on the wire, not after all 44.
    last_short = max(i for i, q in enumerate(order) if q == short_qp.dst_qp)
    assert last_short < 8, order[:12]


def test_a_qp_joins_when_its_message_arrives():
    late_ns = 40_000_000       # the first QP needs ~90 ms for its 200 frames
    start, sent = _send_all([_flow(1, 200 * 1024), _flow(2, 2 * 1024, start_ns=late_ns)])
    late = [t for t, q in sent if q == 0x202]
    assert len(late) == 2
    assert min(late) >= start + late_ns
    first_late = next(i for i, (_, q) in enumerate(sent) if q == 0x202)
    assert first_late >= 10          # the first QP did not wait for it
    # ... and from then on the two share the wire in turn
    assert [q for _, q in sent[first_late:first_late + 3]] == [0x202, 0x201, 0x202]
