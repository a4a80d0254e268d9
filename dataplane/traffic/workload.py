"""Workloads: a YAML file -> validated model -> a reproducible list of Flow objects.

Pure code: no I/O beyond reading the YAML file. Same file + same seed + same hosts
-> the same flows, message sizes and start times (each flow draws from its own
``random.Random`` seeded with the seed, the pair's index and host names/rails, so
interface names and addresses do not change the draws).

Model
-----
A *sender* is one NIC (host, ifname). Every (source GPU, destination GPU) pair that the
pattern produces becomes one Flow per traffic class with a non-zero share (elephant,
mice, protocol; default byte mix 70/20/10 %). A sender's rate is split over its pairs
evenly and inside a pair by the byte mix, so the bytes a sender offers follow the mix
exactly (up to one message per flow). Rates count Ethernet frame bytes (headers + ICRC,
no FCS/preamble); a rate given in pps is turned into bits/s with MTU-sized frames.

Message start times: ``paced`` (default for elephant) -- back to back at the flow's
rate; ``poisson`` (default for mice and protocol) -- exponential gaps with the same
mean. Messages are generated while their start time is below the duration.
``gap_us`` (a class's or a flow's) puts an idle gap after every paced message, as a
collective's pipeline leaves between the chunks it sends (a step waits for the data of
the step before): the chunk goes at the flow's rate, then the sender is quiet. The gap is
real-fabric time: the experiment stretches it by the lab's time scale (``stretch``), like
every time constant, so flowlets see the same gaps at every scale.

Patterns (``pattern.type``):
  ring-allreduce  for each rail r, a ring over the hosts' NIC r (rail-local);
                  ``bidirectional: true`` adds the reverse ring; ``shift: k`` makes it
                  cross the rails: each step goes to the next host's NIC on rail r + k.
  all-to-all      every GPU to every GPU of every other host (``rails: same`` keeps it
                  rail-local). Cross-rail pairs leave from the source GPU's NIC unless
                  ``pxn: true``: then from the source host's NIC on the destination's rail.
  cross-rail      GPU i of host a -> GPU (i + shift) % R of host (a + 1) % H.
  permutation     every NIC sends to one NIC of another host and receives from one, drawn
                  from the seed (the simulators' permutation traffic matrix): no
                  destination is shared, so a non-blocking fabric can carry every flow
                  at line rate, and what slows a flow is where the fabric placed it.
  flows           an explicit list: ``{src: h1:eth0, dst: h2:eth1, class: mice, rate: ...}``;
                  ``load: 0.6`` instead of ``rate`` is a fraction of the NIC's line rate
                  (the experiment turns it into a rate through the port model's scale, so
                  the file means the same at every scale).
``pattern.messages: N`` caps every flow at N messages (a collective's fixed transfer: with
the duration past the last one's end, every message is sent whole).

Queue pairs (``qp``): ``per-pair`` (default) -- one QP per pair and class, its messages
queue behind each other in the QP's send queue, as an application that posts every
message to one connection; ``per-message`` -- every message is a QP (and a flow) of its
own with its own UDP source port, as the simulators of the HPCC and ConWeave papers run
FCT experiments: a short message never waits behind a long one of the same pair, the
NIC serves its active QPs in turn, and ECMP hashes each message anew. Needs a
closed-loop transport (an open-loop flow is paced at its own rate).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from dataplane import units, yamlfile
from dataplane.errors import WorkloadError
from dataplane.traffic import patterns
from dataplane.traffic.patterns import Host, Nic  # noqa: F401 (the model's hosts, re-exported)
from dataplane.traffic.sizes import SizeDist, parse_dist
from dataplane.traffic.transport import DcqcnParams, TransportConfig
from dataplane.traffic.workloadschema import validate
from dataplane.wire import roce

CLASSES = ("elephant", "mice", "protocol")
DEFAULT_MIX = {"elephant": 0.7, "mice": 0.2, "protocol": 0.1}
DEFAULT_CLASSES: dict[str, dict[str, Any]] = {
    "elephant": {"size": {"lognormal": {"median": "1MiB", "sigma": 0.5,
                                        "min": "64KiB", "max": "16MiB"}},
                 "opcode": "write", "arrival": "paced"},
    "mice": {"size": {"uniform": {"min": "1KiB", "max": "64KiB"}},
             "opcode": "send", "arrival": "poisson"},
    "protocol": {"size": {"fixed": 64}, "opcode": "send", "arrival": "poisson"},
}
SRC_PORT_MIN, SRC_PORT_MAX = 49152, 65535
QP_BASE = 0x100
QP_MODES = ("per-pair", "per-message")


# --- units: dataplane.units (re-exported here for the workload's callers) -----------------
parse_size, parse_rate, parse_duration, Rate = units.parse_size, units.parse_rate, units.parse_duration, units.Rate
SIZE_RE, RATE_RE, TIME_RE = units.SIZE_RE, units.RATE_RE, units.TIME_RE


# --- model -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Message:
    msg_id: int
    size: int          # bytes of IB payload (>= roce.RAILAB_HLEN)
    start_ns: int      # offset from the workload start


@dataclass(frozen=True)
class Flow:
    flow_id: int
    cls: str                       # elephant | mice | protocol
    src_host: str
    src_ifname: str
    src_ip: str
    dst_host: str | None
    dst_ifname: str | None
    dst_ip: str
    src_port: int
    dst_port: int
    src_qp: int
    dst_qp: int
    opcode: str                    # send | write
    dscp: int
    rate_bps: float                # Ethernet frame bits per second
    mtu: int
    messages: tuple[Message, ...]
    src_rail: int | None = None
    dst_rail: int | None = None

    @property
    def total_bytes(self) -> int:
        return sum(m.size for m in self.messages)

    @property
    def wire_bytes(self) -> int:
        """Ethernet frame bytes of all packets (what `rate_bps` and the mix count)."""
        return sum(roce.frame_len(p, roce.Opcode.SEND_ONLY)
                   for m in self.messages for p in roce.segment_message(m.size, self.mtu)) \
            + (sum(roce.RETH_LEN for _ in self.messages) if self.opcode == "write" else 0)

    @property
    def total_packets(self) -> int:
        return sum(len(roce.segment_message(m.size, self.mtu)) for m in self.messages)

    @property
    def schedule_end_s(self) -> float:
        """When the flow's own pacing lets its last frame leave (seconds from the start):
        the last message's start plus its frames at the flow's rate. 0 without messages."""
        if not self.messages or self.rate_bps <= 0:
            return 0.0
        last = self.messages[-1]
        return last.start_ns / 1e9 + _wire_bits(last.size, self.mtu) / self.rate_bps


@dataclass(frozen=True)
class ClassSpec:
    size: SizeDist
    opcode: str
    arrival: str
    dscp: int
    gap_us: float = 0.0            # real-fabric idle time after each paced message


@dataclass
class Workload:
    name: str
    seed: int
    duration_s: float
    mtu: int
    rate: Rate
    mix: dict[str, float]
    classes: dict[str, ClassSpec]
    pattern: dict[str, Any]
    hosts: list[Host] = field(default_factory=list)
    source: str = "<workload>"
    transport: TransportConfig = field(default_factory=TransportConfig)
    load: float | None = None      # offered load as a fraction of the NIC's line rate (the experiment sets `rate`)
    qp: str = "per-pair"           # QP_MODES (module doc)
    stretch: float = 1.0           # wall seconds per real-fabric second (the experiment's scale)

    @property
    def mtu_frame_bytes(self) -> int:
        return roce.frame_len(self.mtu)


def hosts_from_list(items: Sequence[Any]) -> list[Host]:
    """Hosts from dicts ``{name, nics: [{ifname, ip, rail?, mac?}]}`` or Host objects.
    A NIC without a rail gets its index in the list."""
    out = []
    for h in items:
        if isinstance(h, Host):
            out.append(h)
            continue
        nics = tuple(Nic(n["ifname"], n["ip"], int(n.get("rail", i)), n.get("mac"))
                     for i, n in enumerate(h["nics"]))
        out.append(Host(h["name"], nics))
    return out


def load_dict(doc: Any, source: str = "<workload>") -> Workload:
    if isinstance(doc, dict) and set(doc) == {"workload"}:
        doc = doc["workload"]
    validate(doc, source)
    try:
        mix = {c: float(doc.get("mix", DEFAULT_MIX).get(c, 0.0)) for c in CLASSES}
        if "mix" not in doc:
            mix = dict(DEFAULT_MIX)
        total = sum(mix.values())
        if total <= 0:
            raise WorkloadError(f"{source}: mix: all class shares are zero")
        mix = {c: v / total for c, v in mix.items()}
        classes = {}
        for c in CLASSES:
            spec = {**DEFAULT_CLASSES[c], **doc.get("classes", {}).get(c, {})}
            classes[c] = ClassSpec(parse_dist(spec["size"], f"{source}: classes.{c}.size"),
                                   spec["opcode"], spec["arrival"],
                                   int(spec.get("dscp", roce.DSCP_DATA)),
                                   float(spec.get("gap_us", 0.0)))
        wl = Workload(
            name=str(doc.get("name", Path(source).stem)),
            seed=int(doc.get("seed", 1)),
            duration_s=parse_duration(doc.get("duration", "1s")),
            mtu=int(doc.get("mtu", 1024)),
            rate=parse_rate(doc.get("rate", "100Mbps")),
            mix=mix, classes=classes, pattern=doc["pattern"],
            hosts=hosts_from_list(doc.get("hosts", [])), source=source,
            transport=_transport(doc, source), load=doc.get("load"),
            qp=doc.get("qp", "per-pair"))
    except ValueError as e:
        raise WorkloadError(f"{source}: {e}") from None
    if wl.qp == "per-message" and not wl.transport.closed_loop:
        raise WorkloadError(f"{source}: qp: per-message needs a closed-loop transport (go-back-n "
                            "or selective-repeat): an open-loop flow is paced at its own rate")
    if wl.pattern["type"] == "flows":
        for i, f in enumerate(wl.pattern.get("flows", [])):
            if "rate" in f and "load" in f:
                raise WorkloadError(f"{source}: pattern.flows[{i}]: give rate or load, not both")
            for k in ("size",):
                if k in f:
                    parse_dist(f[k], f"{source}: pattern.flows[{i}].{k}")
    elif "flows" in wl.pattern:
        raise WorkloadError(f"{source}: pattern.flows: only allowed with type 'flows'")
    return wl


def _transport(doc: dict, source: str) -> TransportConfig:
    raw = doc.get("transport", "open-loop")
    spec = {"kind": raw} if isinstance(raw, str) else dict(raw)
    dcqcn = doc.get("dcqcn", False)
    if dcqcn is not False and spec["kind"] == "open-loop":
        raise WorkloadError(f"{source}: dcqcn: needs a closed-loop transport (go-back-n or "
                            "selective-repeat); the open-loop sender keeps its rate")
    params = None
    if dcqcn is not False:
        over = dcqcn if isinstance(dcqcn, dict) else {}
        if any(over.get(k, 0.5) > 1 for k in ("g", "rai_fraction", "rhai_fraction", "min_rate_fraction")):
            raise WorkloadError(f"{source}: dcqcn: g and the *_fraction options are fractions (at most 1)")
        params = DcqcnParams(**{k: (int(v) if k in ("byte_counter", "fast_recovery") else float(v))
                                for k, v in over.items()})
    return TransportConfig(**spec, dcqcn=params)


def load(path: str | Path) -> Workload:
    """Read and validate a workload YAML file."""
    return load_dict(yamlfile.load(path, WorkloadError, "workload file"), str(path))


# --- flow generation ---------------------------------------------------------------------------

def _messages(rng: random.Random, dist: SizeDist, arrival: str, rate_bps: float,
              mtu: int, t0: float, t1: float, max_msgs: int | None,
              gap_s: float = 0.0) -> tuple[Message, ...]:
    """Message sizes and start times in [t0, t1) seconds for a flow of rate_bps; a paced
    flow idles gap_s (wall) after each message."""
    msgs: list[Message] = []
    t = t0
    if arrival == "poisson":
        t += rng.expovariate(1.0) * _wire_bits(dist.mean, mtu) / rate_bps
    while t < t1 and (max_msgs is None or len(msgs) < max_msgs):
        size = max(dist.sample(rng), roce.RAILAB_HLEN)
        msgs.append(Message(len(msgs), size, int(round(t * 1e9))))
        if arrival == "paced":
            t += _wire_bits(size, mtu) / rate_bps + gap_s
        else:
            t += rng.expovariate(1.0) * _wire_bits(dist.mean, mtu) / rate_bps
    return tuple(msgs)


def _wire_bits(size: float, mtu: int) -> float:
    """Ethernet bits a message of `size` bytes takes (headers of every packet)."""
    size = max(size, roce.RAILAB_HLEN)
    npk = max(1, math.ceil(size / mtu))
    return (size + npk * roce.frame_len(0) + 3) * 8


def generate(wl: Workload, hosts: Sequence[Any] | None = None) -> list[Flow]:
    """Flows of workload `wl` over `hosts` (default: the file's own `hosts:`)."""
    hs = hosts_from_list(hosts) if hosts is not None else list(wl.hosts)
    if not hs:
        raise WorkloadError(f"{wl.source}: hosts: no hosts given (in the file or by the lab)")
    pairs = patterns.pairs(wl, hs)
    per_sender: dict[tuple[str, str], int] = {}
    for p in pairs:
        if p.spec is None or "rate" not in p.spec:
            k = (p.src_host.name, p.src_nic.ifname)
            per_sender[k] = per_sender.get(k, 0) + 1
    sender_bps = wl.rate.bps(wl.mtu_frame_bytes)
    used_ports: dict[str, set[int]] = {}
    next_qp: dict[str, int] = {}
    flows: list[Flow] = []
    for pi, p in enumerate(pairs):
        spec = p.spec or {}
        if spec.get("class"):
            classes = [(spec["class"], 1.0)]
        else:
            classes = [(c, wl.mix[c]) for c in CLASSES if wl.mix[c] > 0]
        if "load" in spec and "rate" not in spec:
            raise WorkloadError(f"{wl.source}: pattern.flows[{pi}].load: needs the NICs' line rate "
                                "(an experiment with a port model scale)")
        if "rate" in spec:
            try:
                pair_bps = parse_rate(spec["rate"]).bps(wl.mtu_frame_bytes)
            except ValueError as err:
                raise WorkloadError(f"{wl.source}: pattern.flows[{pi}].rate: {err}") from None
        else:
            pair_bps = sender_bps / per_sender[(p.src_host.name, p.src_nic.ifname)]
        t0 = parse_duration(spec["start"]) if "start" in spec else 0.0
        t1 = parse_duration(spec["stop"]) if "stop" in spec else wl.duration_s
        for cls, share in classes:
            cspec = wl.classes[cls]
            key = (f"{wl.seed}/{pi}/{p.src_host.name}:{p.src_nic.rail}->"
                   f"{p.dst_host.name}:{p.dst_nic.rail}/{cls}")
            rng = random.Random(key)
            dist = parse_dist(spec["size"], "flow size") if "size" in spec else cspec.size
            opcode = spec.get("opcode", cspec.opcode)
            arrival = spec.get("arrival", cspec.arrival)
            bps = pair_bps * share
            gap_s = float(spec.get("gap_us", cspec.gap_us)) * 1e-6 * wl.stretch
            msgs = _messages(rng, dist, arrival, bps, wl.mtu, t0, t1,
                             spec.get("messages", wl.pattern.get("messages")), gap_s)
            if wl.qp == "per-message":
                # each message its own QP; its offered rate is its share of the pair's
                window = max(t1 - t0, 1e-9)
                parts = [((Message(0, m.size, m.start_ns),), _wire_bits(m.size, wl.mtu) / window)
                         for m in msgs]
            else:
                parts = [(msgs, bps)]
            for part_msgs, part_bps in parts:
                sport = _source_port(rng, used_ports.setdefault(p.src_nic.ip, set()))
                sqp = next_qp.get(p.src_nic.ip, QP_BASE)
                next_qp[p.src_nic.ip] = sqp + 1
                dqp = next_qp.get(p.dst_nic.ip, QP_BASE)
                next_qp[p.dst_nic.ip] = dqp + 1
                flows.append(Flow(
                    flow_id=len(flows) + 1, cls=cls,
                    src_host=p.src_host.name, src_ifname=p.src_nic.ifname, src_ip=p.src_nic.ip,
                    dst_host=p.dst_host.name, dst_ifname=p.dst_nic.ifname, dst_ip=p.dst_nic.ip,
                    src_port=sport, dst_port=roce.ROCE_PORT, src_qp=sqp, dst_qp=dqp,
                    opcode=opcode, dscp=cspec.dscp, rate_bps=part_bps, mtu=wl.mtu,
                    messages=part_msgs, src_rail=p.src_nic.rail, dst_rail=p.dst_nic.rail))
    return flows


def _source_port(rng: random.Random, used: set[int]) -> int:
    """A RoCEv2 UDP source port (ECMP's entropy), unique per source IP while the range
    lasts (a run of more QPs than ports starts reusing them, as a NIC does)."""
    span = SRC_PORT_MAX - SRC_PORT_MIN + 1
    if len(used) >= span:
        used.clear()
    port = SRC_PORT_MIN + rng.randrange(span)
    while port in used:
        port = SRC_PORT_MIN + (port - SRC_PORT_MIN + 1) % span
    used.add(port)
    return port


def load_flows(path: str | Path, hosts: Sequence[Any] | None = None,
               seed: int | None = None) -> list[Flow]:
    """load() + generate(); `seed` overrides the file's seed."""
    wl = load(path)
    if seed is not None:
        wl.seed = seed
    return generate(wl, hosts)


def flows_by_sender(flows: Sequence[Flow]) -> dict[tuple[str, str], list[Flow]]:
    """Group flows by the NIC that sends them: (src_host, src_ifname) -> flows; one
    sender.send_flows() call per group."""
    out: dict[tuple[str, str], list[Flow]] = {}
    for f in flows:
        out.setdefault((f.src_host, f.src_ifname), []).append(f)
    return out
