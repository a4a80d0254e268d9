"""Sender benchmark: the highest rate one railab sender reaches on one core, next to
Debian's trafgen (netsniff-ng) on the same veth, both counted by the receiving
interface's kernel counters (rx_packets of the veth peer in its own netns).

Needs root (creates two network namespaces joined by a veth, removed in `finally`).
`railab bench traffic` calls bench_traffic().
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from dataplane.traffic import sender

TRAFGEN = "/usr/sbin/trafgen"


@dataclass(frozen=True)
class VethPair:
    tx_ns: str
    tx_if: str
    rx_ns: str
    rx_if: str


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@contextmanager
def veth_pair(prefix: str = "rlb") -> Iterator[VethPair]:
    """Two fresh netns (`<prefix>a<rand>`, `<prefix>b<rand>`) joined by one veth, both
    ends up. Removed on exit, whatever happens."""
    tag = secrets.token_hex(3)
    p = VethPair(f"{prefix}a{tag}", f"{prefix}ta{tag}", f"{prefix}b{tag}", f"{prefix}rb{tag}")
    try:
        _ip("netns", "add", p.tx_ns)
        _ip("netns", "add", p.rx_ns)
        _ip("link", "add", p.tx_if, "netns", p.tx_ns, "type", "veth",
            "peer", "name", p.rx_if, "netns", p.rx_ns)
        for ns, ifn in ((p.tx_ns, p.tx_if), (p.rx_ns, p.rx_if)):
            # no IPv6 autoconf chatter (RS/MLD) in the counters
            _ip("-n", ns, "link", "set", ifn, "addrgenmode", "none")
            _ip("-n", ns, "link", "set", ifn, "up")
        yield p
    finally:
        for ns in (p.tx_ns, p.rx_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def link_stats(ns: str, ifname: str) -> dict:
    """Kernel interface counters (ip -s -j link) of `ifname` in netns `ns`."""
    out = subprocess.run(["ip", "-n", ns, "-s", "-j", "link", "show", "dev", ifname],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)[0]["stats64"]


def rx_packets(ns: str, ifname: str) -> int:
    return int(link_stats(ns, ifname)["rx"]["packets"])


@contextmanager
def _pinned(cpu: int | None):
    if cpu is None:
        yield
        return
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)


def measure_railab(p: VethPair, *, pps: float | None, duration_s: float = 2.0,
                   frame_bytes: int = 1002, cpu: int | None = 0, batch: int = 1) -> dict:
    """Run the railab sender (paced at `pps`, None = unpaced; batch > 1: sendmmsg) on
    p.tx_if; returns the sender's own rate and the rate counted at p.rx_if."""
    sock = sender.open_tx_socket(p.tx_if, p.tx_ns)
    try:
        st = sender.StreamTemplate(src_mac=sender.socket_mac(sock),
                                   dst_mac="02:00:00:00:00:02", frame_bytes=frame_bytes)
        with _pinned(cpu):
            r0 = rx_packets(p.rx_ns, p.rx_if)
            rep = sender.send_stream(sock, st, pps=pps, duration_s=duration_s, batch=batch)
            time.sleep(0.05)
            r1 = rx_packets(p.rx_ns, p.rx_if)
    finally:
        sock.close()
    return {"target_pps": pps, "batch": batch, "sent_pps": rep.pps,
            "rx_pps": (r1 - r0) / rep.elapsed_s, "sent": rep.packets, "received": r1 - r0,
            "errors": rep.errors, "runq_wait_s": rep.runq_wait_s}


def stop_group(proc: subprocess.Popen) -> None:
    """Stop a process started with start_new_session=True and everything in its group:
    trafgen's -P worker outlives a signal to its parent alone."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; its worker may not be
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    proc.wait()


def trafgen_config(frame: bytes) -> str:
    return "{ " + ", ".join(f"0x{b:02x}" for b in frame) + " }\n"


def measure_trafgen(p: VethPair, *, duration_s: float = 2.0, frame_bytes: int = 1002,
                    trafgen: str = TRAFGEN, warmup_s: float = 0.5) -> dict:
    """Run trafgen (one process, -P 1) with the same RoCEv2 frame on p.tx_if; the rate is
    the receiver's counter delta over `duration_s` after a warm-up."""
    if not shutil.which(trafgen):
        return {"error": f"{trafgen} not found"}
    st = sender.StreamTemplate(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
                               frame_bytes=frame_bytes)
    frame = bytes(st.frame(0, 0))
    with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as f:
        f.write(trafgen_config(frame))
        cfg = f.name
    proc = None
    try:
        # --no-sock-mem / -Q: leave global socket-memory sysctls and IRQ affinity alone
        proc = subprocess.Popen(["ip", "netns", "exec", p.tx_ns, trafgen, "--dev", p.tx_if,
                                 "--conf", cfg, "-P", "1", "--no-sock-mem", "-Q"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        time.sleep(warmup_s)
        if proc.poll() is not None:
            return {"error": f"trafgen exited: {proc.stderr.read().decode()[-200:]}"}
        r0, t0 = rx_packets(p.rx_ns, p.rx_if), time.monotonic()
        time.sleep(duration_s)
        r1, t1 = rx_packets(p.rx_ns, p.rx_if), time.monotonic()
        return {"rx_pps": (r1 - r0) / (t1 - t0), "received": r1 - r0}
    finally:
        if proc is not None:
            stop_group(proc)
        os.unlink(cfg)


def max_paced_pps(p: VethPair, ceiling_pps: float, *, duration_s: float = 1.0,
                  frame_bytes: int = 1002, tolerance: float = 0.05, cpu: int | None = 0,
                  tries: int = 5, batch: int = 1) -> tuple[float, list[dict]]:
    """Highest paced target (from 0.95 * ceiling down in 10 % steps) whose
    receiver-counted rate is within `tolerance` of the target."""
    runs = []
    target = 0.95 * ceiling_pps
    for _ in range(tries):
        r = measure_railab(p, pps=target, duration_s=duration_s, frame_bytes=frame_bytes,
                           cpu=cpu, batch=batch)
        runs.append(r)
        if abs(r["rx_pps"] - target) <= tolerance * target:
            return target, runs
        target *= 0.9
    return 0.0, runs


def bench_traffic(duration_s: float = 3.0, frame_bytes: int = 1002,
                  trafgen: str = TRAFGEN, cpu: int | None = 0, batch: int = 32) -> dict:
    """One railab sender on one core vs trafgen (one process), same veth, same
    1002-byte RoCEv2 frame (the RoCEv2 SEND size nearest 1000 B: frames are 58 + 4k
    bytes), all rates counted at the receiving veth. Returns::

        {"frame_bytes", "railab_send_pps" (unpaced, one send() per frame),
         "railab_sendmmsg_pps" (unpaced, sendmmsg batches of `batch`),
         "railab_max_paced_pps" (highest paced target met within 5 %, sendmmsg),
         "trafgen_pps", "railab_over_trafgen" (best railab / trafgen), "runs": {...}}
    """
    with veth_pair() as p:
        single = measure_railab(p, pps=None, duration_s=duration_s,
                                frame_bytes=frame_bytes, cpu=cpu)
        batched = measure_railab(p, pps=None, duration_s=duration_s,
                                 frame_bytes=frame_bytes, cpu=cpu, batch=batch)
        best = max(single["rx_pps"], batched["rx_pps"])
        paced, runs = max_paced_pps(p, best, duration_s=max(1.0, duration_s / 2),
                                    frame_bytes=frame_bytes, cpu=cpu, batch=batch)
        tg = measure_trafgen(p, duration_s=duration_s, frame_bytes=frame_bytes,
                             trafgen=trafgen)
    tg_pps = tg.get("rx_pps")
    return {
        "frame_bytes": frame_bytes,
        "railab_send_pps": single["rx_pps"],
        "railab_sendmmsg_pps": batched["rx_pps"],
        "railab_max_paced_pps": paced,
        "trafgen_pps": tg_pps,
        "railab_over_trafgen": (best / tg_pps) if tg_pps else None,
        "runs": {"send": single, "sendmmsg": batched, "paced": runs, "trafgen": tg},
    }


if __name__ == "__main__":
    print(json.dumps(bench_traffic(), indent=2))
