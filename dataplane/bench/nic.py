"""`railab bench nic`: the kernel NIC against today's Python hosts, in one run.

* ack_turnaround: dataplane.bench.ack (the XDP responder against the Python go-back-N one).
* pacing: the native send engine (dataplane.nic.engine) and the Python sender
  (dataplane.traffic.sender.send_flows) pace the same schedule over one veth pair, one after
  the other: `FLOWS` flows of 1,024-byte messages (one packet each), together `pps` packets per
  second, phases staggered. Packet k of a flow is due at start + phase + k * interval (its
  GCRA schedule with no stall). A tcpdump in the receiving namespace stamps every arrival
  (kernel receive stamp, mapped to CLOCK_MONOTONIC): lateness = arrival - due, and
  send-stamp lateness = the railab header's send stamp - due, measured the same way for
  both senders. Rows at `pps` and at `slow_pps` (a rate the Python sender holds).
* unpaced: the same senders with no rate (every packet due at the start) for a moment,
  and the Python sender's fastest path (send_stream: one stream, sendmmsg batches of 32):
  packets per second counted by the receiving interface.

Needs root; the namespaces and processes are gone when it returns.
"""
from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from pathlib import Path

from dataplane.bench import ack
from dataplane.bench.traffic import VethPair, rx_packets, veth_pair
from dataplane.errors import UsageError
from dataplane.nic import engine
from dataplane.traffic import sender
from dataplane.traffic.workload import Flow, Message
from dataplane.wire import roce

FLOWS = 4
MSG_BYTES = 1024
SRC_MAC, DST_MAC = "02:00:00:00:1a:01", "02:00:00:00:1b:01"
SNAPLEN = 160
LEAD_NS = 20_000_000           # the common start is this far after `go`


def _flows(pps: float, count: int, *, paced: bool = True) -> list[Flow]:
    frame = roce.frame_len(MSG_BYTES)
    per = pps / FLOWS
    interval = int(1e9 / per)
    out = []
    for j in range(FLOWS):
        phase = j * interval // FLOWS
        out.append(Flow(flow_id=j + 1, cls="elephant", src_host="a", src_ifname="tx", src_ip="10.27.0.1",
                        dst_host="b", dst_ifname="rx", dst_ip="10.27.0.2", src_port=49152 + j,
                        dst_port=roce.ROCE_PORT, src_qp=0x40 + j, dst_qp=0x50 + j, opcode="send",
                        dscp=roce.DSCP_DATA, rate_bps=frame * 8 * per if paced else 0.0, mtu=1024,
                        messages=tuple(Message(k, MSG_BYTES, phase if paced else 0)
                                       for k in range(count // FLOWS))))
    return out


def _due(flows: list[Flow], start: int) -> dict[int, tuple[int, int]]:
    """flow id -> (first due, interval): the send_flows rule's schedule with no stall."""
    frame = roce.frame_len(MSG_BYTES)
    return {f.flow_id: (start + f.messages[0].start_ns, int(frame * 8e9 / f.rate_bps)) for f in flows}


class _Tcpdump:
    """tcpdump in the receiving namespace writing a nanosecond pcap (kernel stamps)."""

    def __init__(self, ns: str, ifname: str, path: Path):
        exe = shutil.which("tcpdump") or "/usr/bin/tcpdump"
        if not os.path.exists(exe):
            raise UsageError("railab bench nic needs tcpdump (Debian: tcpdump; scripts/setup.sh installs it)")
        self.path = path
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, exe, "-i", ifname, "-n", "-s", str(SNAPLEN),
                                      "-B", "262144", "--immediate-mode", "--time-stamp-precision", "nano", "-w", str(path),
                                      "udp", "port", str(roce.ROCE_PORT)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        if "listening" not in line:
            self.close()
            raise RuntimeError(f"tcpdump did not start: {line.strip()}")
        self.dropped = 0

    def stop(self) -> list[tuple[int, bytes]]:
        """(receive time CLOCK_MONOTONIC ns, first bytes) of every captured frame."""
        time.sleep(0.1)
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=30)
        for line in err.splitlines():
            if "dropped by kernel" in line:
                self.dropped = int(line.split()[0])
        off = time.time_ns() - time.monotonic_ns()
        data = self.path.read_bytes()
        if struct.unpack_from("<I", data)[0] != 0xA1B23C4D:
            raise RuntimeError("tcpdump wrote no nanosecond pcap")
        out, pos = [], 24
        while pos + 16 <= len(data):
            sec, nsec, caplen, _len = struct.unpack_from("<IIII", data, pos)
            pos += 16
            out.append((sec * 1_000_000_000 + nsec - off, data[pos:pos + caplen]))
            pos += caplen
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _percentiles(values: list[int]) -> dict:
    v = sorted(values)
    if not v:
        return {"count": 0, "p50_us": None, "p99_us": None, "max_us": None}
    pick = lambda q: v[min(len(v) - 1, int(round(q * (len(v) - 1))))] / 1000   # noqa: E731
    return {"count": len(v), "p50_us": pick(0.5), "p99_us": pick(0.99), "max_us": v[-1] / 1000}


def _lateness(frames: list[tuple[int, bytes]], due: dict[int, tuple[int, int]]) -> dict:
    arrival, stamp = [], []
    for rx_ns, head in frames:
        p = roce.parse(head + b"\0" * 4) if len(head) < SNAPLEN else roce.parse(head)
        if p is None or p.hdr is None or p.hdr.flow_id not in due:
            continue
        first, interval = due[p.hdr.flow_id]
        d = first + p.hdr.seq * interval
        arrival.append(max(0, rx_ns - d))
        stamp.append(max(0, p.hdr.ts_ns - d))
    return {"arrival": _percentiles(arrival), "send_stamp": _percentiles(stamp)}


def _run_engine(pair: VethPair, flows: list[Flow], path: Path, duration_s: float) -> tuple[int, dict]:
    engine.write_schedule(path, {"tx": (pair.tx_ns, pair.tx_if)},
                          {"tx": [(f, SRC_MAC, DST_MAC) for f in flows]}, duration_s=duration_s)
    with engine.SendEngine(path) as eng:
        start = eng.go(time.monotonic_ns() + LEAD_NS)
        rep = eng.result(timeout=duration_s + 30)
    return start, rep


def _run_python(pair: VethPair, flows: list[Flow], duration_s: float) -> tuple[int, dict]:
    sock = sender.open_tx_socket(pair.tx_if, pair.tx_ns)
    try:
        prepared = sender.prepare_flows(flows, SRC_MAC, DST_MAC)
        start = time.monotonic_ns() + LEAD_NS
        rep = sender.send_flows(sock, prepared, duration_s=duration_s, start_ns=start)
    finally:
        sock.close()
    return start, rep.to_dict()


def _pacing_row(pair: VethPair, who: str, pps: float, duration_s: float, tmp: Path) -> dict:
    count = int(pps * duration_s)
    flows = _flows(pps, count)
    cap = _Tcpdump(pair.rx_ns, pair.rx_if, tmp / f"{who}-{int(pps)}.pcap")
    try:
        if who == "engine":
            start, rep = _run_engine(pair, flows, tmp / "pacing.sched", duration_s + 0.1)
        else:
            start, rep = _run_python(pair, flows, duration_s + 0.1)
        frames = cap.stop()
    finally:
        cap.close()
    row = {"sender": who, "target_pps": pps, "scheduled": count, "sent": rep["packets"],
           "received": len(frames), "capture_dropped": cap.dropped, "errors": rep["errors"],
           "elapsed_s": rep["elapsed_s"],
           "achieved_pps": rep["packets"] / rep["elapsed_s"] if rep["elapsed_s"] > 0 else 0.0,
           "lateness": _lateness(frames, _due(flows, start))}
    if who == "engine":
        row["engine_lateness_ns"] = rep["lateness_ns"]
        row["engine"] = {k: rep["engine"][k] for k in ("fifo", "spin_ns", "batches", "sleeps", "breathers")}
    return row


def _unpaced_row(pair: VethPair, who: str, duration_s: float, tmp: Path) -> dict:
    flows = _flows(1e6, 2_000_000, paced=False)[:1]
    r0 = rx_packets(pair.rx_ns, pair.rx_if)
    if who == "engine":
        _, rep = _run_engine(pair, flows, tmp / "unpaced.sched", duration_s)
    elif who == "python":
        _, rep = _run_python(pair, flows, duration_s)
    else:                       # the Python sender's fastest path: one stream, sendmmsg x32
        sock = sender.open_tx_socket(pair.tx_if, pair.tx_ns)
        try:
            st = sender.StreamTemplate(src_mac=SRC_MAC, dst_mac=DST_MAC, frame_bytes=roce.frame_len(MSG_BYTES))
            rep = sender.send_stream(sock, st, pps=None, duration_s=duration_s, batch=32).to_dict()
        finally:
            sock.close()
    time.sleep(0.05)
    received = rx_packets(pair.rx_ns, pair.rx_if) - r0
    return {"sender": who, "sent": rep["packets"], "received": received, "elapsed_s": rep["elapsed_s"],
            "sent_pps": rep["packets"] / rep["elapsed_s"] if rep["elapsed_s"] > 0 else 0.0,
            "received_pps": received / rep["elapsed_s"] if rep["elapsed_s"] > 0 else 0.0}


def bench_nic(*, pps: float = 100_000, slow_pps: float = 10_000, duration_s: float = 1.0,
              unpaced_s: float = 0.5, round_trips: int = 2000, log=None) -> dict:
    """Every part of the bench (module doc) as one dict."""
    say = log or (lambda text: None)
    load_before = os.getloadavg()
    engine.engine_binary()          # compiled before anything is timed
    say("ack turnaround ...")
    out = {"bench": "nic", "ack_turnaround": ack.ack_turnaround(round_trips)}
    rows, unpaced = [], []
    frame = roce.frame_len(MSG_BYTES)
    with tempfile.TemporaryDirectory(prefix="railab-bench-nic-") as tmp, veth_pair("rlp") as pair:
        for rate in dict.fromkeys((pps, slow_pps)):
            for who in ("engine", "python"):
                say(f"pacing: {who} at {rate:,.0f} packets/s ...")
                rows.append(_pacing_row(pair, who, rate, duration_s, Path(tmp)))
        for who in ("engine", "python", "python-sendmmsg"):
            say(f"unpaced: {who} ...")
            unpaced.append(_unpaced_row(pair, who, unpaced_s, Path(tmp)))
    out["pacing"] = {"flows": FLOWS, "frame_bytes": frame, "duration_s": duration_s, "rows": rows,
                     "target_p99_us": 60.0}
    out["unpaced"] = {"frame_bytes": frame, "duration_s": unpaced_s, "rows": unpaced}
    out["machine"] = {"cpus": os.cpu_count(), "kernel": os.uname().release,
                      "loadavg_before": load_before, "loadavg_after": os.getloadavg()}
    return out
