"""A run's hosts as the kernel NIC.

Send side: native engines (dataplane.nic.engine), one per CPU, send every flow of every
sending host from schedules Python writes, paced in real-fabric time through the lab's
scale; each engine has its own share of the host ports (dataplane.nic.shards).

Receive side: one responder object (one
program, one set of maps) attached to every port of every receiving host.

The program books each data frame to its QP, answers as the open-loop receiver does
(an ACK per ack-request, a CNP per CE mark and interval), or in a closed-loop run as the
go-back-N or selective-repeat responder, and drops the frame: no Python process reads
it. At the end the maps become the answer hostrun's `recv` gives
(dataplane.nic.report), so the runner and the reports see no difference.

Closed loop: the same program also runs on the sending hosts' ports, where it books the
ACKs, NAKs and CNPs for the engine's QPs in a map the engine reads (one slot per flow, in
the schedule's order), and the engine resends and runs DCQCN from them.

`send_side()` and `receive_side()` say whether an experiment's run can use each, and if
not, why: the Python hosts still do what the kernel NIC does not (module doc of
dataplane.nic.report and docs/design/nic.md).
"""
from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

from dataplane.closing import Closing
from dataplane.nic import report, shards, steering
from dataplane import timescale
from dataplane.nic.engine import (EngineError, PausePlan, Reliable, SendEngine, engine_binary, port_reports,
                                  write_schedule)
from dataplane.nic.responder import NicResponder
from dataplane.runtime.labspec import LabSpec
from dataplane.traffic.receiver import RX_BIN_NS
from dataplane.traffic.transport import DcqcnParams, TransportConfig
from dataplane.wire.pfc import quanta_wall_seconds

EVENT_POLL_S = 0.05        # the ring buffer holds 32 k completions: read well before it fills
DELIVERY_POLL_S = 0.01     # after the switches' queues drained, what is left is on the wire:
DELIVERY_QUIET_POLLS = 3   # veths deliver in microseconds, so 30 ms without a frame is the end
DELIVERY_LIMIT_S = 0.4     # never longer than the fixed grace it replaced (runner.RECEIVER_GRACE_S)
XDP_DATAPLANES = ("xdp", "xdp-generic")


def receive_side(spec: LabSpec, wanted: str, *, closed_loop: bool, has_events: bool) -> tuple[str, str]:
    """("kernel" | "python", why) for a run whose experiment asked for `wanted` hosts."""
    if wanted == "python":
        return "python", "the experiment asks for Python hosts"
    if spec.dataplane not in XDP_DATAPLANES:
        return "python", (f"the lab's switches forward in the {spec.dataplane} dataplane: a host "
                          "port's XDP_TX answers need an XDP program on the switch's end")
    if closed_loop:
        return "kernel", "closed loop, XDP switches: the XDP responder acknowledges"
    if has_events:
        return "kernel", "open loop, XDP switches; faults: loss windows from the responder's send stamps"
    return "kernel", "open loop, XDP switches"


def send_side(wanted: str, *, closed_loop: bool, pfc: bool, receive: str = "kernel") -> tuple[str, str]:
    """("kernel" | "python", why) for the senders of a run whose experiment asked for
    `wanted` hosts and whose receive side is `receive`."""
    if wanted == "python":
        return "python", "the experiment asks for Python hosts"
    if (closed_loop or pfc) and receive != "kernel":
        return "python", "the engine's feedback and pauses come from the kernel NIC on its ports"
    try:
        engine_binary()
    except (EngineError, OSError) as err:
        return "python", f"the send engine could not be built: {err}"
    why = "closed loop: the engine resends and runs DCQCN from the NIC's feedback" if closed_loop \
        else "open loop"
    return "kernel", why + ("; PFC: the NIC books its switch's pauses, the engine holds them" if pfc else "")


def reliable_plan(cfg: TransportConfig, line_bps: dict[str, float], scale: float | None, *,
                  limit_s: float, sample_s: float, pfc: bool) -> Reliable:
    """The engine's closed-loop transport for a run: the workload's times (real-fabric us)
    on the lab's wall clock, as transport.Requester and Dcqcn apply them."""
    def wall(us: float) -> int:
        return max(1, timescale.wall_ns(us * 1000, scale))
    dcqcn = None
    if cfg.dcqcn is not None:
        d: DcqcnParams = cfg.dcqcn
        dcqcn = {"g": d.g, "alpha_period_ns": wall(d.alpha_timer_us), "rate_period_ns": wall(d.rate_timer_us),
                 "byte_counter": d.byte_counter, "fast_recovery": d.fast_recovery,
                 "rai_fraction": d.rai_fraction, "rhai_fraction": d.rhai_fraction,
                 "min_rate_fraction": d.min_rate_fraction}
    # under PFC a NIC cannot make up for a pause above its line rate (reliable.run's rule)
    return Reliable(cfg.kind, window=cfg.window, rto_ns=wall(cfg.rto_us), line_bps=line_bps,
                    burst_packets=1 if pfc else 4, dcqcn=dcqcn, limit_ns=int(limit_s * 1e9),
                    sample_ns=int(sample_s * 1e9))


class KernelSenders(Closing):
    """Every sending host's flows in engine processes, one per CPU, each for its own
    ports (module doc; dataplane.nic.shards says why). `sends`: (host, its port, Flow)
    per flow. Use as a context manager: leaving it ends the engines."""

    def __init__(self, spec: LabSpec, sends: list, duration_s: float | None, *,
                 closed: tuple[TransportConfig, float | None, float, float] | None = None,
                 pause_plan: dict | None = None, nic: NicResponder | None = None):
        """closed: (transport, scale, limit_s, sample_s) of a closed-loop run; pause_plan:
        the runner's host_pause_plan under PFC. `nic` (the receive side's responder, also on
        these ports) books the ACKs, NAKs and CNPs and the switches' pauses for them."""
        by_name = {n.name: n for n in spec.nodes}
        ports: dict[str, tuple[str, str]] = {}
        flows: dict[str, list] = {}
        for host, port, flow in sends:
            iface = next(i for i in by_name[host].interfaces if i.name == port)
            key = f"{host}:{port}"
            ports[key] = (by_name[host].netns, port)
            flows.setdefault(key, []).append((flow, iface.mac, iface.peer_mac))
        groups = shards.partition({k: sum(f.total_packets for f, *_ in flows[k]) for k in ports},
                                  shards.shard_count(len(ports), closed_loop=closed is not None,
                                                     pps=shards.offered_pps([f for _, _, f in sends], duration_s)))
        # the feedback slots run through the shards in turn: group by group
        ports = {k: ports[k] for g in groups for k in g}
        self.engines: list[tuple[SendEngine, list[str]]] = []
        self._folder = tempfile.TemporaryDirectory(prefix="railab-schedule-")
        self._steering: steering.ForwardingSteering | None = None
        try:
            engine_cpus = self._steer(spec, len(groups), pfc=pause_plan is not None)
            reliable = None
            if closed is not None:
                cfg, scale, limit_s, sample_s = closed
                line = {f"{h}:{p}": next(i.speed_bps for i in by_name[h].interfaces if i.name == p) * (scale or 1)
                        for h, p, _ in sends}
                reliable = reliable_plan(cfg, line, scale, limit_s=limit_s, sample_s=sample_s,
                                         pfc=pause_plan is not None)
                # the engine's slot for a flow is its place in the schedules: ports in order
                for slot, (flow, _, _) in enumerate(item for key in ports for item in flows[key]):
                    nic.add_requester(flow.src_ip, flow.src_qp, slot)
            pfc = None
            if pause_plan is not None:
                slots = {}
                for slot, key in enumerate(ports):
                    host, port = key.split(":", 1)
                    iface = next(i for i in by_name[host].interfaces if i.name == port)
                    # the switch port's MAC is the pause frames' source
                    nic.add_pause_port(iface.peer_mac, slot, quanta_wall_seconds(
                        1, iface.speed_bps, pause_plan.get("scale")) * 1e9)
                    slots[key] = slot
                pfc = PausePlan.from_host_plan(pause_plan, slots)
            first_slot = 0
            for n, group in enumerate(groups):
                path = Path(self._folder.name) / f"schedule{n}"
                write_schedule(path, {k: ports[k] for k in group}, {k: flows[k] for k in group},
                               duration_s=duration_s, reliable=reliable, pfc=pfc, first_slot=first_slot)
                first_slot += sum(len(flows[k]) for k in group)
                self.engines.append((SendEngine(
                    path, feedback=(nic.requesters_fd, nic.max_reqs) if closed is not None else None,
                    pauses=(nic.pauses_fd, nic.max_pauses) if pfc is not None else None,
                    cpu=engine_cpus[n] if engine_cpus else None), group))
        except BaseException:
            self.close()
            raise

    def _steer(self, spec: LabSpec, engines: int, *, pfc: bool) -> list[int]:
        """Steers the lab's forwarding off the engines' CPUs (dataplane.nic.steering says
        why) and returns the engines' CPUs; none, and the reason in `steering`, when every
        CPU has an engine, under PFC, or when the ports refuse."""
        self.steering: dict = {"forwarding_cpus": [], "why": "PFC: the agent's poll keeps the CPU left"
                               if pfc else "an engine on every CPU"}
        engine_cpus, forwarding_cpus = ([], []) if pfc else steering.plan(engines)
        if not forwarding_cpus:
            return []
        try:
            self._steering = steering.ForwardingSteering(spec, forwarding_cpus)
        except OSError as e:
            self.steering["why"] = str(e)
            return []
        self.steering = {"engine_cpus": engine_cpus, "forwarding_cpus": forwarding_cpus, "why": None}
        return engine_cpus

    def go(self, start_ns: int) -> None:
        for engine, _ in self.engines:
            engine.go(start_ns)

    def finish(self, timeout_s: float) -> dict:
        """The engines' report as one, shaped as hostrun send's (per_flow_packets keyed by
        the flow id as a string), with its lateness and the engines' own figures."""
        deadline = time.monotonic() + timeout_s
        reps, host_pfc = [], {}
        for engine, keys in self.engines:
            rep = engine.result(timeout=max(1.0, deadline - time.monotonic()))
            host_pfc.update(port_reports(rep, keys))
            reps.append(rep)
        rep = shards.merge_reports(reps)
        if self._steering is not None:
            self.steering["backlog_drops"] = self._steering.drops()
        return {**rep, "per_flow_packets": {str(k): v for k, v in rep["per_flow_packets"].items()},
                "host_pfc": host_pfc, "steering": self.steering}

    def close(self) -> None:
        try:
            for engine, _ in self.engines:
                engine.close()
        finally:
            self._folder.cleanup()
            if self._steering is not None:
                self._steering.close()
                self._steering = None


class KernelReceivers(Closing):
    """Every receiving host's ports under one NicResponder (module doc). Use as a
    context manager: leaving it detaches everything, also on an error."""

    def __init__(self, spec: LabSpec, hosts: list[str], *, max_qps: int,
                 cnp_interval_us: float = 0.0, scale: float | None = None,
                 transport: TransportConfig | None = None, senders: list[str] = ()):
        """transport: a closed-loop run's (its ACK coalescing and NAK delay); senders: the
        sending hosts, whose ports then also get the program, for the engine's feedback."""
        by_name = {n.name: n for n in spec.nodes}
        self.ports = [(by_name[h].netns, i.name) for h in hosts for i in by_name[h].interfaces]
        self.line_bps = sum(i.speed_bps * scale for h in hosts for i in by_name[h].interfaces) if scale else 0.0
        self.cnp_interval_us, self.scale = cnp_interval_us, scale
        closed = transport is not None and transport.closed_loop
        self._answer = dict(
            ack_every=transport.ack_every, ack_delay_us=transport.ack_delay_us,
            selective=transport.kind == "selective-repeat", nak_delay_us=transport.nak_delay_us,
        ) if closed else dict(open_loop=True)
        attach = self.ports + [(by_name[h].netns, i.name) for h in senders if h not in hosts
                               for i in by_name[h].interfaces]
        self.nic = NicResponder(max_qps=max(64, max_qps), max_reqs=max(64, max_qps),
                                max_pauses=max(64, len(attach)))
        self._events: list = []
        self._stop = threading.Event()
        self._reader: threading.Thread | None = None
        self.origin_ns = 0
        # every frame of this run is sent after now: what comes stamped earlier waited in a
        # paused queue through the run before, and is not this run's
        self.not_before_ns = time.monotonic_ns()
        try:
            self.nic.configure(mode="respond", consume=True, cnp_interval_us=cnp_interval_us,
                               scale=scale, not_before_ns=self.not_before_ns, **self._answer)
            for netns, ifname in attach:
                self.nic.attach(netns, ifname, mode=spec.dataplane)
        except BaseException:
            self.nic.close()
            raise

    def start(self, at_ns: int) -> None:
        """Bin delivered bytes from `at_ns` (CLOCK_MONOTONIC, rounded down to a bin) and
        keep reading the completions while the run lasts."""
        self.origin_ns = at_ns - at_ns % RX_BIN_NS
        self.nic.configure(mode="respond", consume=True, scale=self.scale,
                           cnp_interval_us=self.cnp_interval_us, bin_origin_ns=self.origin_ns,
                           bin_ns=RX_BIN_NS, not_before_ns=self.not_before_ns, **self._answer)
        self._reader = threading.Thread(target=self._read_events, name="nic-events", daemon=True)
        self._reader.start()

    def _read_events(self) -> None:
        while not self._stop.wait(EVENT_POLL_S):
            self._events.extend(self.nic.events())

    def wait_delivered(self) -> float:
        """Poll the frames the program booked until none came for a few polls (or the
        limit); the seconds waited. The runner calls it once the switches' queues are
        empty, in place of the grace Python receivers need to read their sockets."""
        start = time.monotonic()
        seen, quiet = self.nic.counters()["data"], 0
        while quiet < DELIVERY_QUIET_POLLS and time.monotonic() - start < DELIVERY_LIMIT_S:
            time.sleep(DELIVERY_POLL_S)
            now = self.nic.counters()["data"]
            quiet = quiet + 1 if now == seen else 0
            seen = now
        return time.monotonic() - start

    def finish(self, sent: dict[int, int], until_ns: int) -> dict:
        """hostrun recv's answer for every flow in `sent` (flow id -> packets sent), bins
        up to `until_ns`."""
        self._stop.set()
        if self._reader is not None:
            self._reader.join()
        self._events.extend(self.nic.events())
        flows = report.flow_records(self.nic.qps(), self._events, sent,
                                    closed_loop=not self._answer.get("open_loop"))
        nbins = max(0, (until_ns - self.origin_ns) // RX_BIN_NS + 1)
        bins = report.water_filled(self.nic.rx_bins(nbins), self.line_bps * RX_BIN_NS / 8e9)
        first = self.origin_ns // RX_BIN_NS
        keys = ("packets", "bytes", "lost", "duplicates", "out_of_order", "ce")
        counters = self.nic.counters()
        return {"flows": flows, "totals": {k: sum(f[k] for f in flows.values()) for k in keys},
                "socket_drops": 0, "stale_frames": counters["stale"], "rx_bin_ns": RX_BIN_NS,
                "rx_bins": {str(first + b): n for b, n in bins.items()},
                "nic": {k: counters[k] for k in ("data", "acks", "cnps", "qp_full", "event_lost",
                                                  "bin_out", "tx_fail")}}

    def close(self) -> None:
        self._stop.set()
        if self._reader is not None and self._reader.is_alive():
            self._reader.join()
        self.nic.close()


def kernel_nic(spec: LabSpec, receive: str, send: str, receivers: list[str], sends: list,
               cfg: TransportConfig, *, scale: float | None, duration_s: float, limit_s: float,
               sample_s: float, pause_plan: dict | None) -> tuple[KernelReceivers | None, KernelSenders | None]:
    """The kernel NIC's sides of a run that receive_side and send_side gave it: the
    responder (on the senders' ports too when the engine needs their feedback or pauses)
    and the engine. Nothing is left if either fails to start."""
    rx = tx = None
    senders = sorted({host for host, _, _ in sends})
    try:
        if receive == "kernel":
            rx = KernelReceivers(
                spec, receivers, max_qps=len(sends), scale=scale, transport=cfg,
                cnp_interval_us=(cfg.dcqcn or DcqcnParams()).cnp_interval_us if cfg.closed_loop else 0.0,
                senders=senders if send == "kernel" and (cfg.closed_loop or pause_plan) else ())
        if send == "kernel":
            tx = KernelSenders(spec, sends, duration_s, pause_plan=pause_plan, nic=rx.nic if rx else None,
                               closed=(cfg, scale, limit_s, sample_s) if cfg.closed_loop else None)
    except BaseException:
        if rx is not None:
            rx.close()
        raise
    return rx, tx
