"""Traffic processes inside one host namespace, started by the experiment runner.

`send`: sends the host's flows, one thread per NIC port (each an AF_PACKET socket), and
prints a JSON report with per-flow packet counts.
`recv`: captures on the host's ports, accounts per flow, answers with ACKs and CNPs,
prints "ready", and on a line of JSON on stdin (the senders' per-flow counts) finishes
and prints the per-flow statistics as JSON.

Senders and receivers are separate processes: in one Python process they would compete
for the interpreter lock and the receiver's timing would suffer.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import asdict

from dataplane.wire import pfc
from dataplane.kernel.netns import in_netns
from dataplane.traffic import receiver as rx
from dataplane.traffic import reliable
from dataplane.traffic import sender as tx
from dataplane.traffic.transport import TransportConfig
from dataplane.traffic.workload import Flow, Message


def flow_to_json(flow: Flow) -> dict:
    return asdict(flow)


def flow_from_json(data: dict) -> Flow:
    return Flow(**{**data, "messages": tuple(Message(**m) for m in data["messages"])})


class _LockedReceiver:
    """One Receiver fed by several capture threads (a flow may arrive on either port of
    a dual-plane NIC)."""

    def __init__(self, inner: rx.Receiver):
        self.inner = inner
        self.lock = threading.Lock()

    def add(self, pkt, rx_ns):
        with self.lock:
            return self.inner.add(pkt, rx_ns)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _LockedResponder(_LockedReceiver):
    """One Responder answering for several capture threads."""

    def respond(self, pkt, rx_ns=0):
        with self.lock:
            return self.inner.respond(pkt, rx_ns)


def pause_listeners(plan: dict, ports, netns: str) -> dict[str, pfc.PauseListener]:
    """PFC: per NIC port, a listener for its switch's pause frames (none without PFC)."""
    cfg = plan.get("pfc")
    if not cfg:
        return {}
    return {port: pfc.PauseListener(port, netns, cfg["nominal_bps"][port], cfg["scale"],
                                    cfg.get("watchdog_s", 0.0), cfg.get("restore_s", 0.0))
            for port in ports}


def pause_gate(plan: dict, listener: pfc.PauseListener):
    """The senders' pause(dscp, now) for one port: 0 send, -1 watchdog drop, else until when."""
    priorities = {int(d): p for d, p in plan["pfc"]["priorities"].items()}
    return lambda dscp, now: listener.paused_until(pfc.dscp_priority(dscp, priorities), now)


def read_go() -> int | None:
    """The runner's "go [start_ns]": when to start (CLOCK_MONOTONIC ns, shared by every
    namespace; 0 = now), or None if it said something else."""
    words = sys.stdin.readline().split()
    if not words or words[0] != "go" or len(words) > 2 or (len(words) == 2 and not words[1].isdigit()):
        return None
    return int(words[1]) if len(words) == 2 else 0


def _run_closed_loop(args, plan: dict, sockets: dict, prepared: dict, cfg: TransportConfig) -> int:
    """The reliable sender (every QP of every port in one loop), honouring PFC like the
    open-loop sender: the same listeners and gates, no burst after a pause."""
    with in_netns(args.netns):
        feedback = [reliable.open_feedback_socket(port) for port in sockets]
    queued = reliable.packets_of(prepared)
    print("ready", flush=True)
    start_ns = read_go()
    if start_ns is None:
        return 1
    listeners = pause_listeners(plan, sockets, args.netns)
    try:
        rep = reliable.run(sockets, feedback, queued, cfg, plan["line_bps"], plan.get("scale"),
                           args.duration, plan.get("limit_s", 30.0), plan.get("sample_s", 0.1),
                           pause={port: pause_gate(plan, lst) for port, lst in listeners.items()},
                           listeners=list(listeners.values()), start_ns=start_ns,
                           **({"burst_packets": 1} if listeners else {}))
        for port, listener in listeners.items():
            rep["ports"][port]["pfc"] = listener.report()
    finally:
        for sock in [*sockets.values(), *feedback]:
            sock.close()
        for listener in listeners.values():
            listener.close()
    json.dump(rep, sys.stdout)
    print(flush=True)
    return 0


def run_send(args) -> int:
    # Line 1: the plan. Then "ready" out, and the sending starts at the time "go" names,
    # so that all hosts start together whatever their start-up and wake-up times.
    plan = json.loads(sys.stdin.readline())
    by_port: dict[str, list[Flow]] = {}
    for item in plan["flows"]:
        by_port.setdefault(item["port"], []).append(flow_from_json(item["flow"]))
    reports: dict[str, dict] = {}
    threads = []

    sockets = {port: tx.open_tx_socket(port, args.netns) for port in by_port}
    # Frames are built before "ready": building thousands of flows' templates takes a
    # while, and must not eat into the run after "go".
    prepared = {port: tx.prepare_flows(flows, tx.socket_mac(sockets[port]), plan["gateway_mac"][port])
                for port, flows in by_port.items()}
    cfg = TransportConfig.from_dict(plan["transport"]) if plan.get("transport") else None
    if cfg is not None and cfg.closed_loop:
        return _run_closed_loop(args, plan, sockets, prepared, cfg)
    print("ready", flush=True)
    start_ns = read_go()
    if start_ns is None:
        return 1

    listeners = pause_listeners(plan, by_port, args.netns)

    def send(port: str, flows: list[Flow]) -> None:
        sock = sockets[port]
        listener = listeners.get(port)
        pause = pause_gate(plan, listener) if listener else None
        try:
            # under PFC a flow must not make up for a pause with a burst above its rate: a
            # NIC cannot send faster than its link, and the burst would overrun the headroom
            pacing = {"burst": 1, "burst_ns": 0} if listener else {}
            rep = tx.send_flows(sock, prepared[port], duration_s=args.duration, pause=pause,
                                start_ns=start_ns, **pacing)
            reports[port] = rep.to_dict()
            if listener:
                reports[port]["pfc"] = listener.report()
        finally:
            sock.close()
            if listener:
                listener.close()

    for port, flows in by_port.items():
        t = threading.Thread(target=send, args=(port, flows))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    per_flow: dict[str, int] = {}
    for rep in reports.values():
        for fid, n in rep.get("per_flow_packets", {}).items():
            per_flow[str(fid)] = per_flow.get(str(fid), 0) + n
    json.dump({"per_flow_packets": per_flow, "ports": reports}, sys.stdout)
    print(flush=True)
    return 0


def run_recv(args) -> int:
    # this run's frames are sent after the "ready" below
    receiver = _LockedReceiver(rx.Receiver(line_bps=args.line_bps, not_before_ns=time.monotonic_ns()))
    cfg = TransportConfig.from_dict(json.loads(args.transport)) if args.transport else None
    responder = _LockedResponder(rx.Responder(cnp_interval_ns=args.cnp_interval_ns,
                                              transport=cfg, scale=args.scale))
    stop = threading.Event()
    sockets = []
    with in_netns(args.netns):
        for port in args.ports.split(","):
            sockets.append(rx.open_socket(port))
    for s in sockets:
        rx.socket_drops(s)            # start counting now
    threads = [threading.Thread(target=rx.capture, args=(s, 3600.0, receiver),
                                kwargs={"responder": responder, "stop": stop.is_set}, daemon=True)
               for s in sockets]
    for t in threads:
        t.start()
    print("ready", flush=True)
    line = sys.stdin.readline()
    stop.set()
    for t in threads:
        t.join(timeout=10)
    sent = {int(k): v for k, v in (json.loads(line).get("per_flow_packets", {}) if line.strip() else {}).items()}
    flows = receiver.inner.finish(sent or None)
    out = {}
    for fid, stats in flows.items():
        entry = stats.to_dict()
        entry["completions_us"] = [ns / 1000 for ns in stats.completions_ns.values()]
        if responder.inner.transport is not None:
            entry["transport_rx"] = responder.inner.flow_report(fid)
        out[str(fid)] = entry
    drops = sum(rx.socket_drops(s) for s in sockets)
    json.dump({"flows": out, "totals": receiver.inner.totals(), "socket_drops": drops,
               "stale_frames": receiver.inner.stale,
               "rx_bin_ns": rx.RX_BIN_NS,
               "rx_bins": {str(b): round(n) for b, n in sorted(receiver.inner.rx_bins.items())}}, sys.stdout)
    print(flush=True)
    for s in sockets:
        s.close()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dataplane.traffic.hostrun")
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("send")
    s.add_argument("--netns", required=True)
    s.add_argument("--duration", type=float, required=True)
    s.set_defaults(func=run_send)
    r = sub.add_parser("recv")
    r.add_argument("--netns", required=True)
    r.add_argument("--ports", required=True)
    r.add_argument("--transport", help="closed loop: the TransportConfig as JSON")
    r.add_argument("--scale", type=float, help="the lab's time scale (for the transport's timers)")
    r.add_argument("--line-bps", type=float,
                   help="the NIC's emulated line rate: frames count over the time they took to arrive")
    r.add_argument("--cnp-interval-ns", type=int, default=0,
                   help="at most one CNP per QP per this many wall ns (DCQCN's N)")
    r.set_defaults(func=run_recv)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
