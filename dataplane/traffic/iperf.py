"""iperf3 between two host namespaces of a lab: the kernel's own TCP as a yardstick for
what the fabric's queues do to a transport that reacts to delay and loss."""
from __future__ import annotations

import json
import subprocess
import time

SERVER_START_S = 5.0


def _listening(netns: str, port: int) -> bool:
    out = subprocess.run(["ip", "netns", "exec", netns, "ss", "-ltnH", f"sport = :{port}"],
                         capture_output=True, text=True).stdout
    return bool(out.strip())


def tcp_bps(src_netns: str, dst_netns: str, dst_ip: str, seconds: float = 3.0,
            port: int = 5201, src_ip: str | None = None) -> float:
    """Received TCP goodput (b/s) of one iperf3 stream from src_netns (from src_ip, if
    given: a host has an address per NIC) to dst_ip in dst_netns. The server is ours and
    ends with the measurement, also on errors."""
    server = subprocess.Popen(["ip", "netns", "exec", dst_netns, "iperf3", "-s", "-1", "-B", dst_ip,
                               "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + SERVER_START_S
        while not _listening(dst_netns, port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"iperf3 server in {dst_netns} did not start")
            time.sleep(0.02)
        client = subprocess.run(["ip", "netns", "exec", src_netns, "iperf3", "-c", dst_ip, "-p", str(port),
                                 "-t", str(seconds), "-J", *(["-B", src_ip] if src_ip else [])],
                                capture_output=True, text=True, timeout=seconds + 30)
        report = json.loads(client.stdout or "{}")
        if client.returncode != 0 or "end" not in report:
            raise RuntimeError(f"iperf3 {src_netns} -> {dst_ip}: {report.get('error') or client.stderr.strip()}")
        return float(report["end"]["sum_received"]["bits_per_second"])
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()
