"""The lab's control agent: one process per lab.

It compiles and loads the XDP switch program once (one BPF object serves every switch of
the lab), pins it, attaches it to every switch port, programs routes and groups from the
controller's plan (dataplane.agent.programmer), starts the fabric monitor
(dataplane.agent.monitor), and then serves run-time requests (dataplane.agent.protocol)
on a Unix socket in the lab's state directory. One process per lab keeps bring-up to a
single compile and memory to a single bcc instance.

Run by `railab deploy` as `python -m dataplane.agent LAB --ready-fd N`: it compiles while
the runtime builds the namespaces, waits for "go" on stdin, then writes "ready" (or
"error: ...") to the ready fd.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
import traceback
from typing import Callable

from dataplane import timescale
from dataplane.agent import netserve
from dataplane.agent import protocol as proto
from dataplane.agent.flows import heaviest
from dataplane.agent.kernelswitches import KernelSwitches
from dataplane.agent.monitor import FabricMonitor
from dataplane.agent.nav import Navigator
from dataplane.agent.programmer import SwitchProgrammer
from dataplane.runtime import state
from dataplane.xdp import abi
from dataplane.xdp.bpfio import attach_xdp_ports
from dataplane.xdp.switch import SwitchDataplane


FLOWS_WINDOW_US = 10.0          # real-fabric time (2 s of wall time at scale 5e-6)
MIN_FLOWS_WINDOW_S = 0.2        # reads of the table from Python resolve no finer
FLOWS_TOP = 8
HOSTS_LEARNED_TIMEOUT_S = 60
SOCKET_MODE = 0o600             # the agent changes a lab's forwarding: its owner only
_UCRED = struct.Struct("3i")    # struct ucred: pid, uid, gid
log = logging.getLogger("railab.agent")


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix stream socket, as the
    kernel recorded them at connect time (SO_PEERCRED): nothing the peer can claim."""
    return _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        for raw in self.rfile:
            try:
                request = proto.decode(json.loads(raw))
                reply = {"ok": True, "result": self.server.dispatch(request)}
            except Exception as err:  # the reply carries the error to the CLI
                reply = {"ok": False, "error": f"{type(err).__name__}: {err}"}
            self.wfile.write((json.dumps(reply) + "\n").encode())


class ControlServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """Serves the protocol: one handler per request type. The programmer's handlers run
    under the lock; the fabric monitor takes the lock itself where it needs it."""
    daemon_threads = True

    def __init__(self, path: str, programmer: SwitchProgrammer | KernelSwitches, monitor: FabricMonitor | None = None):
        self.programmer = programmer
        self.lock = threading.RLock()
        self.monitor = monitor
        self.navigator: Navigator | None = None     # made on first use (path navigation)
        p = programmer
        self.locked: dict[type, Callable] = {
            proto.Counters: lambda r: p.counters(r.switch),
            proto.Trace: lambda r: p.trace(r.flows),
            proto.LbSet: lambda r: p.lb_set(**r.fields()),
            proto.LbShow: lambda r: p.lb_show(),
            proto.LbRestore: lambda r: p.lb_restore(r.snapshot),
            proto.PortModel: lambda r: p.apply_port_model(**r.fields()),
            proto.TmAdd: lambda r: p.tm_add(**r.fields()),
            proto.TmDel: lambda r: p.tm_del(**r.fields()),
            proto.TmList: lambda r: p.tm_list(r.switch),
            proto.PortSpeed: lambda r: p.port_speed(**r.fields()),
            proto.SwitchReset: self._switch_reset,
            proto.PortStates: lambda r: p.port_states(r.switch),
            proto.PortLoad: lambda r: p.port_load(r.switch),
            proto.ReactionStamps: lambda r: p.reaction_stamps(bool(r.clear)),
        }
        self.unlocked: dict[type, Callable] = {
            proto.ArnConfig: lambda r: self._monitor().configure(**r.fields()),
            proto.ArnStatus: lambda r: self._monitor().status(),
            proto.Events: lambda r: self._monitor().recent_events(int(r.since_ns)),
            proto.HoldPorts: self._hold,
            proto.ReleasePorts: lambda r: self._monitor().release([int(x) for x in r.ifindexes]),
            proto.Flows: self._flows,
            proto.NavStart: lambda r: self._nav().start(r.interval_us),
            proto.NavStop: lambda r: self._nav().stop(),
            proto.NavStatus: lambda r: self._nav().status(),
            proto.NavAnnounce: lambda r: self._nav().announce(list(r.flows)),
        }
        super().__init__(path, _Handler)

    def server_bind(self) -> None:
        # created 0600 from the start (umask), not chmod-ed after: no moment in which
        # another user could connect
        old = os.umask(0o177)
        try:
            super().server_bind()
        finally:
            os.umask(old)
        os.chmod(self.server_address, SOCKET_MODE)
        os.chown(self.server_address, os.geteuid(), os.getegid())

    def verify_request(self, request, client_address) -> bool:
        """Only root and the agent's own user may talk to it, whatever the file's mode
        became: the kernel's record of who connected decides, and a refusal is logged."""
        pid, uid, _ = peer_credentials(request)
        if uid in (0, os.geteuid()):
            return True
        log.warning("refused a control connection from pid %d uid %d: only root or uid %d may "
                    "change this lab", pid, uid, os.geteuid())
        return False

    def dispatch(self, request: proto.Request):
        handler = self.locked.get(type(request))
        if handler is not None:
            with self.lock:
                return handler(request)
        return self.unlocked[type(request)](request)

    monitor_absent = "the fabric monitor is not running"

    def _monitor(self) -> FabricMonitor:
        if self.monitor is None:
            raise ValueError(self.monitor_absent)
        return self.monitor

    def _nav(self) -> Navigator:
        if not isinstance(self.programmer, SwitchProgrammer):
            raise ValueError("path navigation and flow visibility need the XDP data plane "
                             "(this lab's switches are kernel-forwarding ones)")
        with self.lock:
            if self.navigator is None:
                self.navigator = Navigator(self.programmer, self.lock)
            return self.navigator

    def _flows(self, r: proto.Flows) -> list[dict]:
        """Heaviest flows per egress port (flow_seen), over a window of real-fabric time."""
        nav = self._nav()
        if r.switch is not None:
            with self.lock:
                self.programmer.select(r.switch, None)
        window_us = FLOWS_WINDOW_US if r.window_us is None else float(r.window_us)
        top = FLOWS_TOP if r.top is None else int(r.top)
        if not window_us > 0 or top < 1:
            raise ValueError("window_us must be more than 0 and top at least 1")
        wall = max(timescale.wall_seconds(window_us * 1e-6, self.programmer.port_model["scale"]),
                   MIN_FLOWS_WINDOW_S)
        flows = [f for f in nav.flows.read(int(wall * 1e9)) if r.switch in (None, f.switch)]
        return [f.to_wire() for f in heaviest(flows, top)]

    def _switch_reset(self, r: proto.SwitchReset) -> dict:
        out = self.programmer.switch_reset(r.switch)
        if self.monitor:
            self.monitor.clear_switch(r.switch)
        return out

    def _hold(self, r: proto.HoldPorts) -> dict:
        self._monitor().hold([int(x) for x in r.ifindexes])
        return {"held": len(r.ifindexes)}


def _start_kernel_lab(lab: str, spec, mark) -> tuple[ControlServer, str, str] | None:
    """A `--dataplane kernel` lab: nothing to compile or attach (the runtime put the kernel
    routes in); serve counters and the ECMP settings, refuse the rest with the reason."""
    if sys.stdin.readline().strip() != "go":
        return None
    mark("waiting for the namespaces")
    server = ControlServer(_fresh_socket(spec.name), KernelSwitches(spec))
    server.monitor_absent = ("the lab forwards with the kernel (--dataplane kernel): "
                             "failover notices and ARN need the XDP dataplane")
    return server, "kernel forwarding", "none"


def _size_class(n: int) -> int:
    """The next power of two: labs of about the same size share one compiled object (its
    cache key holds the -D sizes), so a cache warmed for one lab serves its neighbours."""
    return 1 << max(0, int(n) - 1).bit_length()


def dataplane_sizes(spec) -> dict[str, int]:
    """The XDP object's table sizes for a lab (its -D cflags), rounded up to size classes."""
    ports = sum(len(n.interfaces) for n in spec.switches)
    routes = sum(len(r) for r in spec.routes.values())
    # room for learned /32 host routes (a host that turns up where the lab did not put it
    # needs one on most switches of its plane; LPM tries take memory per entry, not per
    # max_entries) and for the more specific copies ARN exclusions may add
    host_ports = sum(len(nic.ports) for nics in spec.host_nics.values() for nic in nics)
    routes += host_ports * len(spec.switches) + 64
    # a group holds every next hop of a route (a large leaf has over a hundred uplinks)
    widest = max((len(r.nexthops) for rs in spec.routes.values() for r in rs), default=1)
    # one group per (switch, next hops) at start (a leaf's planned /32s make one per host
    # port), and room for as many again: lb, ARN and hosts learned elsewhere make groups at
    # run time. Each holds a range of `members` a power of two long (MemberRanges).
    groups = {(sw, tuple(r.nexthops)) for sw, rs in spec.routes.items() for r in rs}
    member_entries = sum(1 << max(0, len(hops) - 1).bit_length() for _, hops in groups)
    # every addressed switch port answers ARP for its address (port_addrs; local_addrs has
    # one entry per switch and address, no more); every host port is learned on its leaf
    addresses = sum(1 for n in spec.switches for i in n.interfaces if i.address)
    return {"max_ports": _size_class(max(64, ports + 1)),
            "max_addrs": _size_class(max(abi.MAX_ADDRS, addresses + 64)),
            "max_learned": _size_class(max(abi.MAX_LEARNED, 2 * host_ports)),
            "max_routes": _size_class(max(256, routes + 1)),
            "max_members": _size_class(max(abi.MAX_MEMBERS, widest)),
            "max_groups": _size_class(max(abi.MAX_GROUPS, 2 * len(groups) + 64)),
            "max_member_entries": _size_class(max(abi.MAX_MEMBER_ENTRIES, 2 * member_entries + 4096))}


def _start_xdp_lab(lab: str, spec, mark) -> tuple[ControlServer, str, str] | None:
    """Load the XDP object (cached, or compiled while the runtime builds the lab), then on
    "go" pin, program, attach, start the fabric monitor and wait until every host is
    learned. Returns (server, note, how the object was loaded)."""
    mark("read the lab")
    dp = SwitchDataplane(**dataplane_sizes(spec))
    mark("compile and load (bcc)")
    if sys.stdin.readline().strip() != "go":
        return None
    mark("waiting for the namespaces")
    # Re-read: a runtime may have learned the ports' ifindexes while the program compiled
    # (containerlab makes the veths; the counts the compile used do not change).
    spec = state.load(lab).spec
    dp.pin(str(state.pin_dir(spec.name)))
    mark("read the lab again, pin")
    programmer = SwitchProgrammer(spec, dp)
    programmer.program()
    mark("program the maps")
    programmer.attach(attach_xdp_ports)
    mark("attach XDP")
    server = ControlServer(_fresh_socket(spec.name), programmer)
    server.monitor = FabricMonitor(programmer, server.lock)
    server.monitor.start()
    mark("start the monitor")
    # ready means forwarding: every host announced itself at the monitor's start, and
    # its /32 routes must be in the switches before anyone sends to it
    missing = server.monitor.wait_learned(HOSTS_LEARNED_TIMEOUT_S)
    if missing:
        print(f"agent: {missing} host ports not learned after {HOSTS_LEARNED_TIMEOUT_S} s", flush=True)
    mark("learn every host")
    return server, f"{len(programmer.routing.groups)} groups", dp.bpf_cache


def _fresh_socket(lab: str) -> str:
    sock = state.agent_socket(lab)
    if sock.exists():
        sock.unlink()
    return str(sock)


def main(argv=None, started: float | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dataplane.agent")
    parser.add_argument("lab")
    parser.add_argument("--ready-fd", type=int, required=True)
    parser.add_argument("--listen", metavar="ADDRESS:PORT",
                        help="also serve over TCP, with the token from $RAILAB_AGENT_TOKEN "
                             "(one machine's part of a lab split over machines)")
    args = parser.parse_args(argv)
    ready = os.fdopen(args.ready_fd, "w")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    phases: dict[str, float] = {}
    last = started if started is not None else time.monotonic()

    def mark(name: str) -> None:
        nonlocal last
        now = time.monotonic()
        phases[name] = round(now - last, 4)
        last = now

    mark("python start, imports")
    try:
        lab_state = state.load(args.lab)
        if lab_state is None:
            raise RuntimeError(f"no state file for lab {args.lab}")
        spec = lab_state.spec
        start = _start_kernel_lab if spec.dataplane == "kernel" else _start_xdp_lab
        begun = start(args.lab, spec, mark)
        if begun is None:
            return 1
        server, note, bpf_cache = begun
        listening = None
        if args.listen:
            listening = netserve.listen(args.listen, os.environ.get(netserve.TOKEN_ENV, ""), server)
    except Exception as err:
        traceback.print_exc()
        ready.write(f"error: {type(err).__name__}: {err}\n")
        ready.close()
        return 1
    ready.write(f"ready {json.dumps({'phases': phases, 'bpf_cache': bpf_cache, 'listen': listening})}\n")
    ready.close()
    print(f"agent for lab {spec.name} ready: {note}", flush=True)
    server.serve_forever()
    return 0
