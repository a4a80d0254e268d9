"""The native send engine (native/engine/engine.c): the send side of the kernel NIC for
open-loop workloads, one process sending for the host ports its schedule names (a run
splits its ports over one engine per CPU it can keep busy: dataplane.nic.shards).

Python writes a schedule file (`write_schedule`), starts the engine (`SendEngine`), which
opens one AF_PACKET socket per port in that port's namespace and says ``ready``, then
gives it the common start (`go`, CLOCK_MONOTONIC ns) and reads its one-line JSON report
(`result`). The engine builds every frame in C, byte for byte what
dataplane.traffic.sender.FlowFramer / roce.FrameTemplate.fill make, and paces each flow
with send_flows' rule (module doc of engine.c; docs/design/nic.md, "The send engine").

    n = write_schedule(path, {"h1:eth0": ("railab-lab-h1", "eth0")},
                       {"h1:eth0": [(flow, src_mac, dst_mac), ...]}, duration_s=2.0)
    with SendEngine(path) as eng:          # compiled (cached) on first use; waits for ready
        eng.go(time.monotonic_ns() + 10_000_000)
        report = eng.result(timeout=10)    # packets, bytes, errors, lateness_ns, ...

A closed-loop run adds `reliable=Reliable(...)` (the engine reads the NIC's feedback,
SendEngine's `feedback`); PFC adds `pfc=PausePlan(...)` (the engine reads the pauses the
NIC booked, SendEngine's `pauses`; docs/design/nic.md, "PFC").

The binary is compiled with gcc into /var/cache/railab/engine/railab-engine-<hash>
(RAILAB_ENGINE_CACHE overrides the folder), keyed by the sources and gcc's version;
`python -m dataplane.nic.engine` builds it and prints its path (scripts/setup.sh,
`make native`).
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from dataplane import timescale
from dataplane.errors import UsageError
from dataplane.wire import roce

SOURCE_DIR = Path(__file__).resolve().parents[2] / "native" / "engine"
DEFAULT_CACHE = "/var/cache/railab/engine"
CFLAGS = ("-O2", "-Wall", "-Wextra", "-std=gnu11")
LIBS = ("-lz",)
NAME = "railab-engine-"             # every engine process's name starts with it

MAGIC, DUMP_MAGIC, VERSION = b"RLENGSCH", b"RLENGDMP", 2
_HDR = struct.Struct("<8sIIIIQQII")                      # 48 B
_PORT = struct.Struct("<256s32s")                        # 288 B
_FLOW = struct.Struct("<II6s6s4s4sHBBB3xIIIIdII")        # 68 B
_MSG = struct.Struct("<IIQ")                             # 16 B
_TRANSPORT = struct.Struct("<IIQIIdQQQIIdddQQ")          # 104 B, then a f64 line rate per port
_PFC = struct.Struct("<QQ64s")                           # 80 B, then a u32 pause slot per port
NO_SLOT = 0xFFFFFFFF
TRANSPORT_KINDS = {"go-back-n": 1, "selective-repeat": 2}
_DUMP_REC = struct.Struct("<IIqqI")
KINDS = {"send": 0, "write": 1}


@dataclass(frozen=True)
class Reliable:
    """A closed-loop run's transport for the engine (closed.c), every time in wall ns.
    line_bps: per port key (write_schedule's `ports`), the port's wall-clock line rate;
    dcqcn: None, or g, alpha_period_ns, rate_period_ns, byte_counter, fast_recovery,
    rai_fraction, rhai_fraction, min_rate_fraction."""
    kind: str
    window: int
    rto_ns: int
    line_bps: Mapping[str, float]
    burst_packets: int = 4
    dcqcn: Mapping[str, float] | None = None
    limit_ns: int = 0
    sample_ns: int = 0

    def section(self, port_keys: Sequence[str]) -> bytes:
        if self.kind not in TRANSPORT_KINDS:
            raise ValueError(f"transport {self.kind!r}: {' or '.join(TRANSPORT_KINDS)}")
        missing = [k for k in port_keys if k not in self.line_bps]
        if missing:
            raise ValueError(f"no line rate for ports {missing}")
        d = self.dcqcn or {}
        head = _TRANSPORT.pack(TRANSPORT_KINDS[self.kind], self.window, self.rto_ns, self.burst_packets,
                               1 if self.dcqcn else 0, d.get("g", 0.0), int(d.get("alpha_period_ns", 0)),
                               int(d.get("rate_period_ns", 0)), int(d.get("byte_counter", 0)),
                               int(d.get("fast_recovery", 0)), 0, d.get("rai_fraction", 0.0),
                               d.get("rhai_fraction", 0.0), d.get("min_rate_fraction", 0.0),
                               self.limit_ns, self.sample_ns)
        return head + b"".join(struct.pack("<d", float(self.line_bps[k])) for k in port_keys)


@dataclass(frozen=True)
class PausePlan:
    """PFC for the engine (pause.c): a flow's data frames wait while its port's switch
    pauses its priority. priorities: DSCP -> priority (any other DSCP: 0, lossy); slots:
    per port key (write_schedule's `ports`), its nic_pauses slot
    (NicResponder.add_pause_port), a port missing or None is never paused;
    watchdog_ns, restore_ns: the PFC watchdog in wall ns (0: none)."""
    priorities: Mapping[int, int]
    slots: Mapping[str, int | None]
    watchdog_ns: int = 0
    restore_ns: int = 0

    @classmethod
    def from_host_plan(cls, plan: Mapping, slots: Mapping[str, int | None]) -> "PausePlan":
        """From the runner's host_pause_plan (priorities by DSCP string, real-fabric
        watchdog_s / restore_s, scale)."""
        scale = plan.get("scale")
        return cls({int(d): int(p) for d, p in plan["priorities"].items()}, slots,
                   int(timescale.wall_seconds(plan.get("watchdog_s", 0.0), scale) * 1e9),
                   int(timescale.wall_seconds(plan.get("restore_s", 0.0), scale) * 1e9))

    def section(self, port_keys: Sequence[str]) -> bytes:
        prio = bytearray(64)
        for dscp, p in self.priorities.items():
            if not 0 <= dscp < 64 or not 0 <= p < 8:
                raise ValueError(f"PFC: DSCP {dscp} -> priority {p} (0..63 -> 0..7)")
            prio[dscp] = p
        if min(self.watchdog_ns, self.restore_ns) < 0:
            raise ValueError("PFC watchdog and restore times must be >= 0")
        slots = [self.slots.get(k) for k in port_keys]
        if any(s is not None and not 0 <= s < NO_SLOT for s in slots):
            raise ValueError(f"PFC: bad pause slots {slots}")
        return _PFC.pack(self.watchdog_ns, self.restore_ns, bytes(prio)) + \
            b"".join(struct.pack("<I", NO_SLOT if s is None else s) for s in slots)


def port_reports(report: Mapping, port_keys: Sequence[str]) -> dict[str, dict]:
    """The engine report's per-port PFC figures (pause_frames_received, xon_received,
    watchdog_trips, paused_ns by priority, paused_waits, watchdog_drops) by port key, in
    the order write_schedule was given the ports."""
    return {port_keys[int(i)]: rep for i, rep in (report.get("pfc") or {}).items()}


class EngineError(RuntimeError):
    """The engine could not be built, did not start or failed (one line: its own words)."""


def default_psn0(flow_id: int) -> int:
    """FlowFramer's first PSN of a flow."""
    return (flow_id * 0x9E3779B1) & roce.PSN_MASK


def _mac(text: str) -> bytes:
    b = bytes(int(x, 16) for x in text.split(":"))
    if len(b) != 6:
        raise ValueError(f"bad MAC address {text!r}")
    return b


# ---------------------------------------------------------------- schedule files

def write_schedule(path: str | os.PathLike, ports: Mapping[str, tuple[str | None, str]],
                   flows: Mapping[str, Sequence[tuple]], *, duration_s: float | None = None,
                   burst: int = 8, burst_ns: int = 20_000_000, ecn: int = roce.ECN_ECT0,
                   reliable: Reliable | None = None, pfc: PausePlan | None = None,
                   first_slot: int = 0) -> int:
    """Write the engine's schedule file; returns how many packets it holds.

    ports: port key (e.g. "h1:eth0") -> (netns, ifname); netns None or "" = the
    engine's own namespace, a name = /var/run/netns/<name>, "/..." = a path.
    flows: port key -> [(Flow, src_mac, dst_mac) or (Flow, src_mac, dst_mac, psn0)]; psn0
    defaults to FlowFramer's. Each Flow's messages, rate_bps (Ethernet frame bits per
    wall-clock second, 0: unpaced; as send_flows takes it, the lab's scale already applied), mtu, opcode kind, DSCP, addresses and QPs go in as they are; every
    frame has `ecn`. duration_s, burst, burst_ns: as send_flows'. reliable: a closed-loop
    run (every flow a reliable QP whose feedback is nic_reqs slot = its index in the file).
    pfc: honour the switches' pauses (the burst credit is then one packet). first_slot: the
    nic_reqs slot of the file's first flow (the rest follow), for a run split over engines."""
    keys = list(ports)
    unknown = set(flows) - set(keys)
    if unknown:
        raise ValueError(f"flows for ports not in `ports`: {sorted(unknown)}")
    body = []
    nflows = packets = 0
    for pi, key in enumerate(keys):
        for item in flows.get(key, ()):
            f, smac, dmac = item[:3]
            psn0 = item[3] if len(item) > 3 else default_psn0(f.flow_id)
            if f.opcode not in KINDS:
                raise ValueError(f"flow {f.flow_id}: opcode {f.opcode!r} (send or write)")
            body.append(_FLOW.pack(pi, f.flow_id, _mac(smac), _mac(dmac),
                                   ipaddress.IPv4Address(f.src_ip).packed,
                                   ipaddress.IPv4Address(f.dst_ip).packed, f.src_port,
                                   KINDS[f.opcode], f.dscp, ecn, f.dst_qp, f.src_qp,
                                   psn0 & roce.PSN_MASK, f.mtu, float(f.rate_bps),
                                   len(f.messages), first_slot + nflows))
            body += [_MSG.pack(m.msg_id, m.size, m.start_ns) for m in f.messages]
            nflows += 1
            packets += f.total_packets
    tail = reliable.section(keys) if reliable is not None else b""
    pfc_tail = pfc.section(keys) if pfc is not None else b""
    head = [_HDR.pack(MAGIC, VERSION, len(keys), nflows, burst, burst_ns,
                      int(duration_s * 1e9) if duration_s else 0, len(tail), len(pfc_tail))]
    for key in keys:
        netns, ifname = ports[key]
        head.append(_PORT.pack((netns or "").encode(), ifname.encode()))
    body += [tail, pfc_tail]
    tmp = Path(f"{path}.tmp{os.getpid()}")
    tmp.write_bytes(b"".join(head + body))
    os.replace(tmp, path)
    return packets


def read_schedule(path: str | os.PathLike) -> dict:
    """A schedule file back as plain data (tests, debugging)."""
    data = Path(path).read_bytes()
    magic, version, nports, nflows, burst, burst_ns, duration_ns, transport_len, pfc_len = _HDR.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"{path}: not a version {VERSION} engine schedule")
    off = _HDR.size
    ports = []
    for _ in range(nports):
        ns, ifname = _PORT.unpack_from(data, off)
        ports.append((ns.rstrip(b"\0").decode(), ifname.rstrip(b"\0").decode()))
        off += _PORT.size
    flows = []
    for _ in range(nflows):
        (port, flow_id, smac, dmac, sip, dip, sport, kind, dscp, ecn, dqp, sqp, psn0, mtu,
         rate, nmsgs, fb_slot) = _FLOW.unpack_from(data, off)
        off += _FLOW.size
        msgs = [_MSG.unpack_from(data, off + i * _MSG.size) for i in range(nmsgs)]
        off += nmsgs * _MSG.size
        flows.append({"port": port, "flow_id": flow_id, "src_mac": roce.mac_str(smac),
                      "dst_mac": roce.mac_str(dmac), "src_ip": str(ipaddress.IPv4Address(sip)),
                      "dst_ip": str(ipaddress.IPv4Address(dip)), "src_port": sport,
                      "opcode": {v: k for k, v in KINDS.items()}[kind], "dscp": dscp, "ecn": ecn,
                      "dst_qp": dqp, "src_qp": sqp, "psn0": psn0, "mtu": mtu, "rate_bps": rate,
                      "messages": msgs, "fb_slot": fb_slot})
    transport = None
    if transport_len:
        fields = _TRANSPORT.unpack_from(data, off)
        lines = struct.unpack_from(f"<{nports}d", data, off + _TRANSPORT.size)
        transport = {"kind": {v: k for k, v in TRANSPORT_KINDS.items()}[fields[0]], "window": fields[1],
                     "rto_ns": fields[2], "burst_packets": fields[3], "dcqcn": bool(fields[4]),
                     "limit_ns": fields[14], "sample_ns": fields[15], "line_bps": list(lines)}
        off += transport_len
    pfc = None
    if pfc_len:
        watchdog_ns, restore_ns, prio = _PFC.unpack_from(data, off)
        slots = struct.unpack_from(f"<{nports}I", data, off + _PFC.size)
        pfc = {"watchdog_ns": watchdog_ns, "restore_ns": restore_ns,
               "priorities": {d: p for d, p in enumerate(prio) if p},
               "slots": [None if s == NO_SLOT else s for s in slots]}
        off += pfc_len
    if off != len(data):
        raise ValueError(f"{path}: {len(data) - off} bytes after the last flow")
    return {"version": version, "ports": ports, "flows": flows, "burst": burst,
            "burst_ns": burst_ns, "duration_ns": duration_ns, "transport": transport, "pfc": pfc}


def read_dump(path: str | os.PathLike) -> list[tuple[int, int, int, int, bytes]]:
    """Frames of an engine --dump file: (port index, flow index, due_ns, ts_ns, frame)."""
    data = Path(path).read_bytes()
    if data[:8] != DUMP_MAGIC:
        raise ValueError(f"{path}: not an engine dump")
    out, off = [], 16
    while off < len(data):
        port, flow, due, ts, n = _DUMP_REC.unpack_from(data, off)
        off += _DUMP_REC.size
        out.append((port, flow, due, ts, data[off:off + n]))
        off += n
    return out


# ---------------------------------------------------------------- the binary

def cache_dir() -> Path:
    return Path(os.environ.get("RAILAB_ENGINE_CACHE", DEFAULT_CACHE))


def _gcc() -> str:
    gcc = shutil.which("gcc")
    if not gcc:
        raise UsageError("the send engine needs gcc (Debian: gcc libc6-dev zlib1g-dev; "
                         "scripts/setup.sh installs them)")
    return gcc


def engine_binary() -> Path:
    """The compiled engine: from the cache if it holds this build, else compiled now
    (gcc, atomically: a temporary file renamed into place)."""
    gcc = _gcc()
    version = subprocess.run([gcc, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    sources = sorted(p for p in SOURCE_DIR.iterdir() if p.suffix in (".c", ".h"))
    if not any(p.suffix == ".c" for p in sources):
        raise EngineError(f"no engine sources in {SOURCE_DIR}")
    h = hashlib.sha256(f"railab-engine {VERSION}\n{version}\n{' '.join(CFLAGS + LIBS)}\n".encode())
    for p in sources:
        h.update(f"{p.name}\n".encode() + p.read_bytes())
    name = f"{NAME}{h.hexdigest()[:16]}"
    directory = cache_dir()
    if os.access(directory / name, os.X_OK):
        return directory / name
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK):
            raise PermissionError(directory)
    except PermissionError:         # not root: a cache of this user's own
        directory = Path(tempfile.gettempdir()) / f"railab-engine-{os.getuid()}"
        directory.mkdir(mode=0o700, exist_ok=True)
        if os.access(directory / name, os.X_OK):
            return directory / name
    target = directory / name
    tmp = directory / f".{target.name}.{os.getpid()}.tmp"
    proc = subprocess.run([gcc, *CFLAGS, "-o", str(tmp), *(str(p) for p in sources if p.suffix == ".c"),
                           *LIBS], capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        errors = [line for line in proc.stderr.splitlines() if "error" in line] or proc.stderr.splitlines()
        raise EngineError(f"gcc could not build the send engine: {errors[0] if errors else proc.returncode}")
    os.replace(tmp, target)
    return target


# ---------------------------------------------------------------- the process

class SendEngine:
    """One engine process for one schedule (module doc). Starting it waits for its
    `ready` (an EngineError with its stderr's last line if it fails); `close()` (also on
    leaving the `with` block, whatever happened) kills it if it still runs and reaps it."""

    def __init__(self, schedule_path: str | os.PathLike, *, fifo: bool = True,
                 cpu: int | None = None, spin_ns: int | None = None, batch: int | None = None,
                 ready_timeout: float = 30.0, feedback: tuple[int, int] | None = None,
                 pauses: tuple[int, int] | None = None):
        """feedback: (fd, slots) of the NIC's nic_reqs for a closed-loop schedule
        (NicResponder.requesters_fd, max_reqs); pauses: (fd, slots) of its nic_pauses for
        a schedule with PFC (pauses_fd, max_pauses). The engine inherits the fds."""
        argv = [str(engine_binary()), str(schedule_path)]
        if feedback is not None:
            argv += ["--feedback-fd", str(feedback[0]), "--feedback-slots", str(feedback[1])]
        if pauses is not None:
            argv += ["--pause-fd", str(pauses[0]), "--pause-slots", str(pauses[1])]
        if not fifo:
            argv.append("--no-fifo")
        for flag, value in (("--cpu", cpu), ("--spin-ns", spin_ns), ("--batch", batch)):
            if value is not None:
                argv += [flag, str(value)]
        self._stderr = tempfile.TemporaryFile()
        self._buf = b""
        self._reported = False
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr,
                                     pass_fds=tuple(x[0] for x in (feedback, pauses) if x))
        try:
            line = self._readline(ready_timeout)
            if line != "ready":
                raise EngineError(self._why("did not start"))
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _why(self, what: str) -> str:
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        self._stderr.seek(0)
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        code = self.proc.poll()
        return f"send engine {what}" + (f" (exit {code})" if code is not None else "") + \
            (f": {lines[-1]}" if lines else "")

    def _readline(self, timeout: float | None) -> str:
        fd = self.proc.stdout.fileno()
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise EngineError(f"send engine: no answer within {timeout:g} s")
            if not select.select([fd], [], [], left)[0]:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EngineError(self._why("ended without a report"))
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode().strip()

    def go(self, start_ns: int | None = None) -> int:
        """Start sending: flows' start times count from `start_ns` (CLOCK_MONOTONIC ns,
        default now). Returns the start."""
        start = time.monotonic_ns() if start_ns is None else int(start_ns)
        try:
            self.proc.stdin.write(f"go {start}\n".encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise EngineError(self._why("is gone")) from None
        return start

    def result(self, timeout: float | None = None) -> dict:
        """The engine's report (one JSON object: packets, bytes, errors, elapsed_s,
        per_flow_packets with int flow ids as keys, lateness_ns, engine; with PFC, per port
        index "pfc": port_reports) once it is done."""
        line = self._readline(timeout)
        try:
            rep = json.loads(line)
        except json.JSONDecodeError:
            raise EngineError(f"send engine: not a report: {line[:200]!r}") from None
        rep["per_flow_packets"] = {int(k): v for k, v in rep["per_flow_packets"].items()}
        # not waiting for its exit here: closing its packet sockets takes the kernel an RCU
        # grace period each (150 ms a run for 16 ports), which close() waits out later
        self._reported = True
        return rep

    def stop(self) -> None:
        """Ask a sending engine to stop (SIGTERM): it reports what it sent."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def close(self) -> None:
        if self._reported:
            try:     # it is exiting by itself
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        self._stderr.close()

    def __enter__(self) -> "SendEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def dump_frames(schedule_path: str | os.PathLike, dump_path: str | os.PathLike,
                start_ns: int = 1_000_000_000) -> dict:
    """Run the engine in --dump mode (no sockets, a virtual clock that jumps to each due
    time): every frame it would send goes to `dump_path` (read_dump). Returns its report;
    an EngineError with the engine's error line if it fails."""
    proc = subprocess.run([str(engine_binary()), str(schedule_path), "--dump", str(dump_path),
                           "--start", str(start_ns)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise EngineError(lines[-1] if lines else f"send engine exited {proc.returncode}")
    return json.loads(proc.stdout)


def main() -> int:
    """Build the engine (or find it in the cache) and print its path."""
    try:
        print(engine_binary())
    except (EngineError, UsageError) as e:
        print(f"railab-engine: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
