"""Runs an experiment: the same workload once per load-balancing mode (and, for a sweep,
once per hash seed) on one deployed lab, measured at the receivers and at the switches.

A run: set the mode -> snapshot counters -> receivers up in every destination host ->
senders in every source host -> senders done -> receivers finish -> snapshot counters.
The run's record (see dataplane.report) holds per-link bytes from the data plane's
counters and per-flow statistics from the receivers.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network

from dataplane import timescale
from dataplane.lab import faults
from dataplane.agent import client
from dataplane.experiment.spec import NAV_MODES, Experiment, ModeSpec
from dataplane.experiment import deltas, timeline
from dataplane.agent.pathtrace import FlowKey, path_links, touches
from dataplane.lab.fabric import Fabric
from dataplane.nic.hosts import KernelReceivers, KernelSenders, kernel_nic, receive_side, send_side
from dataplane.report import faultruns
from dataplane.runtime.labspec import LabSpec
from dataplane.traffic import workload as wl
from dataplane.traffic.hostrun import flow_to_json
from dataplane.traffic.transport import DcqcnParams

CLOSED_LOOP_LIMIT_S = 20.0  # a reliable sender gets this long after the run to finish its messages,
CLOSED_LOOP_LIMIT_RTOS = 8  # and at least this many retransmission timeouts (at slow scales an
                            # RTO alone stretches past 20 s of wall time)
RECEIVER_GRACE_S = 0.4     # for Python receivers to read what the last hop delivered
GO_LEAD_S = 0.05          # senders are told to start this far ahead: all hosts are awake by then


def closed_loop_limit_s(rto_us: float, scale: float | None) -> float:
    """Wall seconds a reliable sender may run past the experiment to finish its messages."""
    return max(CLOSED_LOOP_LIMIT_S, CLOSED_LOOP_LIMIT_RTOS * timescale.wall_seconds(rto_us * 1e-6, scale))


def workload_hosts(spec: LabSpec) -> list[dict]:
    """The lab's hosts as the workload generator wants them: one NIC per GPU, in rail
    order. A dual-plane NIC is named by its first port; the sender spreads its flows
    over all of the NIC's ports."""
    hosts = []
    for host in spec.hosts:
        nics = []
        for index, nic in enumerate(spec.host_nics.get(host.name, [])):
            port = host.interface(nic.ports[0])
            rail = port.rail if port.rail is not None else index
            nics.append({"ifname": nic.ports[0], "ip": str(IPv4Interface(nic.address).ip), "rail": rail})
        hosts.append({"name": host.name, "nics": nics})
    return hosts


def _ports_of_nic(spec: LabSpec, host: str, first_port: str) -> list[str]:
    return next((nic.ports for nic in spec.host_nics.get(host, []) if nic.ports[0] == first_port), [first_port])


@dataclass
class _HostProcs:
    host: str
    netns: str
    receiver: subprocess.Popen | None = None
    sender: subprocess.Popen | None = None


def _spawn(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dataplane.traffic.hostrun", *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def apply_mode(fabric: Fabric, mode: ModeSpec, seed: int | None = None) -> None:
    """The mode's load balancing; for nav modes, the base mode and the controller."""
    options = dict(mode.options)
    if seed is not None:
        options["seed"] = seed
    interval = options.pop("interval_us", None)
    base = options.pop("base", "ecmp")
    if mode.mode in NAV_MODES:
        fabric.set_mode(base, **options)
        fabric.nav_start(interval)
        return
    fabric.set_mode(mode.mode, **options)


def end_mode(fabric: Fabric, mode: ModeSpec) -> None:
    """Undo what apply_mode started beyond the groups' settings (the nav controller)."""
    if mode.mode in NAV_MODES:
        fabric.nav_stop()


def announcements(flows: list[wl.Flow]) -> list[dict]:
    """The flows as senders announce them to the nav controller (nav-host)."""
    return [{"src": f.src_ip, "dst": f.dst_ip, "sport": f.src_port, "dport": f.dst_port, "proto": 17,
             "bytes": f.wire_bytes, "start": 0.0, "rate_bps": f.rate_bps} for f in flows if f.dst_ip]


_UNDO = {"link-down": "link-up", "switch-down": "switch-up", "plane-down": "plane-up",
         "degrade": "restore"}
FAILURES = ("link-down", "switch-down", "plane-down")   # what the reaction stamps measure


class _RunClock(threading.Thread):
    """While the senders run: samples delivered bytes from the switches' counters and
    fires the experiment's scheduled faults (and their `for:` repairs) on time. Times
    count from the common start (mark_start(), just before the senders are told "go").
    The throughput timeline is not made from these samples but from the traffic
    (dataplane.experiment.timeline)."""

    def __init__(self, spec: LabSpec, fabric: Fabric, events: list[dict], sample_s: float):
        super().__init__(daemon=True)
        self.spec, self.fabric, self.sample_s = spec, fabric, sample_s
        hosts = {h.name for h in spec.hosts}
        self.host_ports = {(n.name, i.name) for n in spec.switches for i in n.interfaces
                           if i.peer_node in hosts}
        roles = {n.name: n.role for n in spec.nodes}
        self.leaf_uplinks = sorted((n.name, i.name) for n in spec.switches for i in n.interfaces
                                   if n.role == "leaf" and roles.get(i.peer_node) == "spine")
        self.uplink_samples: list[dict] = []
        self.pending = []
        for event in events:
            self.pending.append((event["at"], event))
            if "for" in event and event["fault"] in _UNDO:
                undo = {k: v for k, v in event.items() if k not in ("at", "for", "speed")}
                undo["fault"] = _UNDO[event["fault"]]
                self.pending.append((event["at"] + event["for"], undo))
        self.pending.sort(key=lambda p: p[0])
        self.queues: dict[str, list[int]] = {}     # host-facing port -> bytes waiting at each sample
        self.uplink_queues: dict[str, list[int]] = {}   # the same for the leaves' uplinks
        self.sample_t: list[float] = []             # the samples' times
        self.pause_frames_at: list[int] = []        # PFC frames all switch ports had sent by then
        self.sampled = False
        self.fired: list[dict] = []
        self.stamped: int | None = None      # the fired event the reaction stamps belong to
        self.error: str | None = None
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def _sample(self) -> None:
        """The leaf uplinks' bytes and the queues at the time the counters were read."""
        asked = time.monotonic()
        snap = self.fabric.snapshot()
        # the agent's own time of reading, else the middle of the request
        t = (snap.t_ns / 1e9 if snap.t_ns is not None else (asked + time.monotonic()) / 2) - self.t0
        ports = [snap.port(s, p) for s, p in self.host_ports]
        self.sampled = True
        # what each leaf uplink has sent so far: balance over time (metrics.leaf_uplink_balance)
        self.uplink_samples.append({"t": max(t, 0.0), "tx_bytes": {
            f"{s}:{p}": c.tx_bytes for s, p in self.leaf_uplinks if (c := snap.port(s, p)) is not None}})
        self.sample_t.append(round(max(t, 0.0), 4))
        self.pause_frames_at.append(sum(int((c.pfc or {}).get("pause_frames_sent", 0))
                                        for _, _, c in snap.ports()))
        for (switch, port), c in zip(self.host_ports, ports):
            if c is not None:
                self.queues.setdefault(f"{switch}:{port}", []).append(c.waiting_bytes)
        for switch, port in self.leaf_uplinks:
            if (c := snap.port(switch, port)) is not None:
                self.uplink_queues.setdefault(f"{switch}:{port}", []).append(c.waiting_bytes)

    def mark_start(self, lead: float = 0.0) -> float:
        """The common start, `lead` seconds after the counters were read as its t = 0:
        the read comes first because it takes seconds in a large lab (98,304 ports at
        16,384 GPUs), and a start fixed before it had passed when the senders were told.
        Returns its time (time.monotonic())."""
        self._sample()
        self.t0 = time.monotonic() + lead
        self.uplink_samples[-1]["t"] = 0.0
        self.sample_t[-1] = 0.0
        return self.t0

    def _stamps(self, clear: bool) -> None:
        """The data plane's reaction stamps for the last failure fired (read before they
        are cleared for the next: faultruns.reaction_from_stamps); clear: start them over."""
        try:
            got = client.request(self.spec.name, "reaction_stamps", clear=clear)
        except Exception as err:  # reported with the run, not fatal to it
            self.error = f"reaction stamps: {err}"
            return
        if self.stamped is not None and self.stamped < len(self.fired):
            self.fired[self.stamped]["stamps"] = got

    def run(self) -> None:
        if not self.sampled:
            self.mark_start()
        next_sample = self.sample_s
        while not self.stop.is_set():
            now = time.monotonic() - self.t0
            due = [event for at, event in self.pending if at <= now]
            if any(event["fault"] in FAILURES for event in due):
                self._stamps(clear=True)        # the stamps then measure this failure only
                self.stamped = len(self.fired)
            while self.pending and self.pending[0][0] <= now:
                at, event = self.pending.pop(0)
                try:
                    done = faults.apply(self.spec.name, event)
                    what = " ".join(str(v) for k, v in event.items() if k not in ("at", "for"))
                    self.fired.append({"t": time.monotonic() - self.t0, "at": at, "what": what,
                                       "t_ns": done.get("t_ns")})
                except Exception as err:  # reported with the run, not fatal to it
                    self.error = f"event {event}: {err}"
            if now >= next_sample:
                self._sample()
                next_sample = (int(now / self.sample_s) + 1) * self.sample_s
            self.stop.wait(min(self.sample_s / 4, 0.02))
        self._sample()
        if self.stamped is not None and self.stamped < len(self.fired):
            self._stamps(clear=False)


PER_PACKET_MODES = ("spray-rr", "spray-random", "spraylink")


def trace_flows(spec: LabSpec, flows: list[wl.Flow], ports: dict[int, str]) -> dict[int, dict]:
    """The path the data plane picks for each flow, asked of the program itself."""
    keys = [{"src": f"{f.src_host}:{ports[f.flow_id]}", "src_ip": f.src_ip, "dst_ip": f.dst_ip,
             "sport": f.src_port, "dport": f.dst_port, "dqpn": f.dst_qp} for f in flows]
    traced = client.request(spec.name, "trace", flows=keys, timeout_s=120)
    return {f.flow_id: {"key": k, **t} for f, k, t in zip(flows, keys, traced)}


def _on_failed(spec: LabSpec, path: dict, events: list[dict]) -> bool:
    links = path_links(spec, FlowKey(**path["key"]), path)
    return any(touches(spec, links, e) for e in events
               if e["fault"] in ("link-down", "switch-down", "plane-down", "degrade"))


def _with_reaction(spec: LabSpec, fired: list[dict], scheduled: list[dict], since_ns: int) -> list[dict]:
    """The fired events, each with the data plane's reaction from the agent's log
    (faultruns.dataplane_reaction); as fired when the log cannot be read."""
    if not scheduled:
        return fired
    try:
        until = time.monotonic_ns()
        return faultruns.dataplane_reaction(fired, faults.events(spec.name, since_ns), until)
    except Exception as err:  # the run's traffic figures stand without it
        return [{**e, "reaction_error": str(err)} for e in fired]


def pxn_relay(spec: LabSpec, flows: list[wl.Flow]) -> list[wl.Flow]:
    """Flows whose destination the source NIC's own fabric cannot reach (rail-only:
    another rail) leave from the source server's NIC that can, as PXN does: the data
    crosses to that GPU over NVLink (in-host) and its NIC sends it. The senders use raw
    sockets on a fixed port, so the host's relay routes (which do this for the kernel's
    own traffic) are applied here."""
    out = []
    for flow in flows:
        nics = spec.host_nics.get(flow.src_host, [])
        mine = next((n for n in nics if flow.src_ifname in n.ports), None)
        relay = None
        if mine is not None and flow.dst_ip:
            dst = IPv4Address(flow.dst_ip)
            relay = next((nics[i] for seg, i in mine.relay.items() if dst in IPv4Network(seg)), None)
        if relay is None or relay is mine:
            out.append(flow)
            continue
        out.append(dataclasses.replace(flow, src_ifname=relay.ports[0],
                                       src_ip=str(IPv4Interface(relay.address).ip)))
    return out


def host_pause_plan(port_model: dict) -> dict | None:
    """What the hosts' senders need to honour PFC: DSCP -> priority and the lab's scale."""
    if port_model.get("pfc") != "on":
        return None
    return {"priorities": {str(port_model["pfc_dscp"]): port_model["pfc_priority"]},
            "scale": port_model["scale"], "watchdog_s": port_model.get("pfc_watchdog_us", 0) / 1e6,
            "restore_s": port_model.get("pfc_restore_us", 0) / 1e6}


def run_once(spec: LabSpec, experiment: Experiment, flows: list[wl.Flow], label: str,
             seed: int | None, mode: str | None = None, transport: str | None = None,
             dcqcn: bool | None = None) -> dict:
    fabric = Fabric(spec.name)
    by_name = {n.name: n for n in spec.nodes}
    flows = pxn_relay(spec, flows)
    senders: dict[str, list[dict]] = {}
    for i, flow in enumerate(flows):
        ports = _ports_of_nic(spec, flow.src_host, flow.src_ifname)
        senders.setdefault(flow.src_host, []).append(
            {"port": ports[flow.flow_id % len(ports)], "flow": flow_to_json(flow)})
    receivers = sorted({f.dst_host for f in flows if f.dst_host})
    flow_port = {item["flow"]["flow_id"]: item["port"] for items in senders.values() for item in items}
    if mode == "nav-host":   # the senders announce their flows before they send
        fabric.nav_announce(announcements(flows))
    paths = trace_flows(spec, flows, flow_port)

    procs: dict[str, _HostProcs] = {h: _HostProcs(h, by_name[h].netns) for h in set(senders) | set(receivers)}
    pause_plan = host_pause_plan(fabric.show().get("port_model") or {})
    cfg = experiment.workload.transport
    if transport:
        cfg = dataclasses.replace(cfg, kind=transport)
    if dcqcn is not None:      # the mode's DCQCN on/off; on keeps the workload's parameters
        cfg = dataclasses.replace(cfg, dcqcn=(cfg.dcqcn or DcqcnParams()) if dcqcn else None)
    scale = experiment.port_model.get("scale")
    recv_args: list[str] = []
    if cfg.closed_loop:
        cnp_us = (cfg.dcqcn or DcqcnParams()).cnp_interval_us
        recv_args = ["--transport", json.dumps(cfg.to_dict()), "--scale", str(scale),
                     "--cnp-interval-ns", str(timescale.wall_ns(cnp_us * 1000, scale))]
    receive, receive_why = receive_side(spec, experiment.hosts, closed_loop=cfg.closed_loop,
                                        has_events=bool(experiment.events))
    send, send_why = send_side(experiment.hosts, closed_loop=cfg.closed_loop, pfc=bool(pause_plan),
                               receive=receive)
    kernel_rx: KernelReceivers | None = None
    kernel_tx: KernelSenders | None = None
    python_receivers = receivers if receive == "python" else []
    python_senders = senders if send == "python" else {}
    before = fabric.snapshot()
    try:
        kernel_rx, kernel_tx = kernel_nic(
            spec, receive, send, receivers, [(f.src_host, flow_port[f.flow_id], f) for f in flows], cfg,
            scale=scale, duration_s=experiment.duration_s, limit_s=closed_loop_limit_s(cfg.rto_us, scale),
            sample_s=experiment.sample_s, pause_plan=pause_plan)
        for host in python_receivers:
            ports = [i.name for i in by_name[host].interfaces]
            line = [i.speed_bps * scale for i in by_name[host].interfaces] if scale else []
            procs[host].receiver = _spawn(["recv", "--netns", procs[host].netns, "--ports", ",".join(ports),
                                           *recv_args, *(["--line-bps", str(min(line))] if line else [])])
        for host in python_receivers:
            line = procs[host].receiver.stdout.readline().strip()
            if line != "ready":
                err = procs[host].receiver.stderr.read().strip().splitlines()
                raise RuntimeError(f"receiver in {host} failed: {err[-1] if err else line}")
        for host, items in python_senders.items():
            gateway = {i.name: i.peer_mac for i in by_name[host].interfaces}
            proc = _spawn(["send", "--netns", procs[host].netns, "--duration", str(experiment.duration_s)])
            plan = {"flows": items, "gateway_mac": gateway}
            if pause_plan:      # PFC: the host's NICs hold a priority their switch paused
                plan["pfc"] = {**pause_plan, "nominal_bps": {i.name: i.speed_bps for i in by_name[host].interfaces}}
            if cfg.closed_loop:
                plan.update(transport=cfg.to_dict(), scale=scale, limit_s=closed_loop_limit_s(cfg.rto_us, scale),
                            sample_s=experiment.sample_s,
                            line_bps={i.name: i.speed_bps * scale for i in by_name[host].interfaces})
            proc.stdin.write(json.dumps(plan) + "\n")
            proc.stdin.flush()
            procs[host].sender = proc
        for host in python_senders:
            line = procs[host].sender.stdout.readline().strip()
            if line != "ready":
                err = procs[host].sender.stderr.read().strip().splitlines()
                raise RuntimeError(f"sender in {host} failed: {err[-1] if err else line}")
        clock = _RunClock(spec, fabric, experiment.events, experiment.sample_s)
        # one start time for every host, a little ahead, so that all are awake by then:
        # the flows' relative phases are the experiment's, not the order hosts woke up in
        started = clock.mark_start(lead=GO_LEAD_S)
        if kernel_rx is not None:
            kernel_rx.start(int(started * 1e9))
        if kernel_tx is not None:
            kernel_tx.go(int(started * 1e9))
        for host in python_senders:
            procs[host].sender.stdin.write(f"go {int(started * 1e9)}\n")
            procs[host].sender.stdin.close()
        clock.start()
        sent: dict[str, int] = {}
        transport_tx: dict[str, dict] = {}
        host_pfc: dict[str, dict] = {}
        engine: dict = {}
        if kernel_tx is not None:
            limit_s = closed_loop_limit_s(cfg.rto_us, scale) if cfg.closed_loop else 0.0
            engine = kernel_tx.finish(timeout_s=experiment.duration_s + limit_s + GO_LEAD_S + 60)
            sent.update(engine["per_flow_packets"])
            transport_tx.update(engine.get("transport", {}))
            host_pfc.update(engine["host_pfc"])
        for host in python_senders:
            proc = procs[host].sender
            out, err = proc.stdout.read(), proc.stderr.read()
            proc.wait(timeout=experiment.duration_s + closed_loop_limit_s(cfg.rto_us, scale) + 60)
            if proc.returncode != 0:
                raise RuntimeError(f"sender in {host} failed: {err.strip().splitlines()[-1] if err.strip() else '?'}")
            answer = json.loads(out)
            sent.update(answer["per_flow_packets"])
            transport_tx.update(answer.get("transport", {}))
            for port, rep in answer.get("ports", {}).items():
                if "pfc" in rep:      # what the host's NIC port heard and held (PFC)
                    host_pfc[f"{host}:{port}"] = {**rep["pfc"], "paused_waits": rep.get("paused_waits", 0)}
        elapsed = time.monotonic() - started
        undrained_bytes = fabric.drain()
        if python_receivers:
            time.sleep(RECEIVER_GRACE_S)
        elif kernel_rx is not None:
            kernel_rx.wait_delivered()
        time_end_s = time.monotonic() - started
        clock.stop.set()
        clock.join()
        events = _with_reaction(spec, clock.fired, experiment.events, int(started * 1e9))
        flow_stats: dict[str, dict] = {}
        receiver_drops = 0
        received: list[dict] = []
        if kernel_rx is not None:
            answer = kernel_rx.finish({f.flow_id: int(sent.get(str(f.flow_id), 0)) for f in flows},
                                      time.monotonic_ns())
            flow_stats.update(answer["flows"])
            received.append(answer)
        for host in python_receivers:
            # Only this host's flows: the receiver books every flow it is told of.
            mine = {str(f.flow_id): sent.get(str(f.flow_id), 0) for f in flows if f.dst_host == host}
            out, err = procs[host].receiver.communicate(json.dumps({"per_flow_packets": mine}) + "\n", timeout=60)
            if procs[host].receiver.returncode != 0:
                raise RuntimeError(f"receiver in {host} failed: {err.strip().splitlines()[-1] if err.strip() else '?'}")
            answer = json.loads(out)
            flow_stats.update(answer["flows"])
            receiver_drops += int(answer.get("socket_drops", 0))
            received.append(answer)
    finally:
        if "clock" in locals() and clock.is_alive():
            clock.stop.set()
            clock.join()
        if experiment.events:
            faults.clear(spec.name)
        if kernel_rx is not None:
            kernel_rx.close()
        if kernel_tx is not None:
            kernel_tx.close()
        for p in procs.values():
            for proc in (p.sender, p.receiver):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
    after = fabric.snapshot()
    nav_status = fabric.nav_status() if mode in NAV_MODES else None
    links = deltas.link_bytes(spec, before, after)
    bins, bin_ns = timeline.merge_bins(received)

    flow_records = []
    for flow in flows:
        stats = flow_stats.get(str(flow.flow_id), {"packets": 0, "bytes": 0, "payload_bytes": 0,
                                                  "lost": sent.get(str(flow.flow_id), 0),
                                                  "out_of_order": 0, "completions_us": []})
        flow_records.append({
            **stats, "flow_id": flow.flow_id, "cls": flow.cls, "dscp": flow.dscp,
            "src": f"{flow.src_host}:{flow.src_ifname}", "dst": f"{flow.dst_host}:{flow.dst_ifname}",
            "offered_bps": flow.rate_bps, "sent_packets": sent.get(str(flow.flow_id), 0),
            "wire_bytes": flow.wire_bytes, "schedule_end_s": flow.schedule_end_s,
            "path": [f"{h['switch']}:{h['in']}>{h['out']}" for h in paths[flow.flow_id]["hops"]],
        })
        if cfg.closed_loop:
            src_port = flow_port[flow.flow_id]
            line = next(i.speed_bps for i in by_name[flow.src_host].interfaces if i.name == src_port) * scale
            flow_records[-1].update(transport=transport_tx.get(str(flow.flow_id), {}),
                                    line_bps=line, mtu=flow.mtu, messages_sent=len(flow.messages))
        if experiment.events:
            per_packet = (mode or label) in PER_PACKET_MODES
            # Sprayed flows use every path; the traced one is only one packet's.
            flow_records[-1]["on_failed_element"] = True if per_packet else \
                _on_failed(spec, paths[flow.flow_id], experiment.events)
    return {
        # Loads are bytes over the sending time; wall time adds process start-up.
        "mode": label, "seed": seed, "duration_s": experiment.duration_s, "wall_s": elapsed,
        "undrained_bytes": undrained_bytes,
        "transport": cfg.kind, "dcqcn": cfg.dcqcn is not None,
        # who played the NICs: the kernel NIC (dataplane.nic) or Python processes, and why
        "hosts": {"receive": receive, "send": send, "why": {"receive": receive_why, "send": send_why},
                  **({"nic": received[0]["nic"]} if kernel_rx is not None else {}),
                  **({"engine": {"lateness_ns": engine.get("lateness_ns"), "errors": engine.get("errors"),
                                 "steering": engine.get("steering"), **engine.get("engine", {})}}
                     if kernel_tx is not None else {})},
        "nodes": [{"name": n.name, "role": n.role, "rail": n.rail, "plane": n.plane} for n in spec.nodes],
        "links": links,
        "flows": flow_records,
        "switches": deltas.switch_totals(before, after, spec.name),
        "pfc_ports": deltas.pfc_ports(before, after),
        "host_pfc": host_pfc,
        # frames the receivers' sockets overflowed on: in `lost`, but not the fabric's doing
        "receiver_drops": receiver_drops,
        # data frames an earlier run sent (held in a paused queue): not booked to any flow
        "stale_frames": sum(int(a.get("stale_frames", 0)) for a in received),
        # delivered throughput from the frames' receive stamps (dataplane.experiment.timeline)
        "timeline": timeline.delivered_timeline(bins, bin_ns, int(started * 1e9), experiment.sample_s,
                                                end_s=time_end_s),
        "timeline_capacity_bps": timeline.host_capacity_bps(links),
        "uplink_samples": clock.uplink_samples,
        **({"nav": nav_status} if nav_status else {}),
        # host-facing (last-hop) ports' queues at the samples: where incast and DCQCN show
        "host_port_queues": {port: {"max": max(q), "mean": sum(q) / len(q), "samples": len(q), "bytes": q}
                             for port, q in clock.queues.items() if q and max(q) > 0},
        "uplink_queues": {port: {"max": max(q), "mean": sum(q) / len(q), "samples": len(q), "bytes": q}
                          for port, q in clock.uplink_queues.items() if q and max(q) > 0},
        # when those samples were taken (s from t = 0), and the pause frames every switch
        # port had sent by then: queues and pauses by phase (closedloop.steady_state)
        "sample_t": clock.sample_t,
        "pause_frames_at": clock.pause_frames_at,
        "t0_ns": int(started * 1e9),         # CLOCK_MONOTONIC of t = 0 (send times are on it)
        "events": events,
        **({"event_error": clock.error} if clock.error else {}),
    }
