"""The lab's control agent: one process per lab.

It compiles and loads the XDP switch program once (one BPF object serves every switch of
the lab), pins it, attaches it to every switch port, programs routes and groups from the
controller's plan, and then serves run-time requests (counters, map changes) on a Unix
socket in the lab's state directory. One process per lab keeps bring-up to a single
compile and memory to a single bcc instance.

Run by `railab deploy` as `python -m dataplane.agent LAB --ready-fd N`: it compiles while
the runtime builds the namespaces, waits for "go" on stdin, then writes "ready" (or
"error: ...") to the ready fd.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socketserver
import sys
import threading
import traceback
import zlib

from dataplane.runtime import state
from dataplane.runtime.labspec import LabSpec


class SwitchProgrammer:
    """Turns a LabSpec into map entries of a SwitchDataplane."""

    def __init__(self, spec: LabSpec, dataplane):
        self.spec = spec
        self.dp = dataplane
        self.groups: dict[tuple[str, tuple[str, ...]], int] = {}
        self.group_members: dict[int, list[str]] = {}

    def seed_for(self, switch: str) -> int:
        return zlib.crc32(f"{self.spec.name}/{switch}".encode())

    def program(self) -> None:
        slot = 0  # counters live in arrays indexed by slot, shared by the whole lab
        for node in self.spec.switches:
            self.dp.set_switch(node.switch_id, hash_seed=self.seed_for(node.name))
            for iface in node.interfaces:
                slot += 1
                self.dp.set_port(iface.ifindex, switch_id=node.switch_id, slot=slot,
                                 mac=iface.mac, speed_bps=iface.speed_bps)
                if iface.address:
                    self.dp.add_address(node.switch_id, iface.ifindex, iface.address.split("/")[0])
        for node in self.spec.switches:
            by_name = {i.name: i for i in node.interfaces}
            for route in self.spec.routes.get(node.name, []):
                gid = self._group(node.name, tuple(route.nexthops), by_name)
                self.dp.add_route(node.switch_id, route.prefix, gid)

    def _group(self, switch: str, nexthops: tuple[str, ...], by_name) -> int:
        key = (switch, nexthops)
        gid = self.groups.get(key)
        if gid is None:
            gid = len(self.groups) + 1
            self.groups[key] = gid
            self.group_members[gid] = list(nexthops)
            self.dp.set_group(gid, [(by_name[n].ifindex, by_name[n].peer_mac) for n in nexthops])
        return gid

    def attach(self, attach_xdp) -> None:
        for node in self.spec.switches:
            for iface in node.interfaces:
                attach_xdp(node.netns, iface.ifindex, self.dp.prog_fd)

    def counters(self, switch: str | None = None) -> dict:
        result: dict = {"switches": {}}
        for node in self.spec.switches:
            if switch and node.name != switch:
                continue
            ports = {i.name: self.dp.port_counters(i.ifindex) for i in node.interfaces}
            groups = {}
            for (owner, members), gid in self.groups.items():
                if owner != node.name:
                    continue
                per_member = self.dp.member_counters(gid)
                groups[str(gid)] = {
                    "members": [dict(interface=m, **c) for m, c in zip(members, per_member)],
                }
            result["switches"][node.name] = {"ports": ports, "groups": groups}
        return result


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        for raw in self.rfile:
            try:
                request = json.loads(raw)
                reply = {"ok": True, "result": self.server.dispatch(request)}
            except Exception as err:  # the reply carries the error to the CLI
                reply = {"ok": False, "error": f"{type(err).__name__}: {err}"}
            self.wfile.write((json.dumps(reply) + "\n").encode())


class ControlServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, programmer: SwitchProgrammer):
        self.programmer = programmer
        self.lock = threading.Lock()
        super().__init__(path, _Handler)

    def dispatch(self, request: dict):
        op = request.get("op")
        with self.lock:
            if op == "status":
                return {"lab": self.programmer.spec.name, "pid": os.getpid(),
                        "groups": len(self.programmer.groups)}
            if op == "counters":
                return self.programmer.counters(request.get("switch"))
        raise ValueError(f"unknown op {op!r}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dataplane.agent")
    parser.add_argument("lab")
    parser.add_argument("--ready-fd", type=int, required=True)
    args = parser.parse_args(argv)
    ready = os.fdopen(args.ready_fd, "w")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        lab_state = state.load(args.lab)
        if lab_state is None:
            raise RuntimeError(f"no state file for lab {args.lab}")
        spec = lab_state.spec
        from dataplane.switch_dataplane import SwitchDataplane, attach_xdp

        ports = sum(len(n.interfaces) for n in spec.switches)
        routes = sum(len(r) for r in spec.routes.values())
        dp = SwitchDataplane(max_ports=max(64, ports + 1), max_routes=max(256, routes + 1))
        if sys.stdin.readline().strip() != "go":
            return 1
        dp.pin(str(state.pin_dir(spec.name)))
        programmer = SwitchProgrammer(spec, dp)
        programmer.program()
        programmer.attach(attach_xdp)
        sock = state.agent_socket(spec.name)
        if sock.exists():
            sock.unlink()
        server = ControlServer(str(sock), programmer)
    except Exception as err:
        traceback.print_exc()
        ready.write(f"error: {type(err).__name__}: {err}\n")
        ready.close()
        return 1
    ready.write("ready\n")
    ready.close()
    print(f"agent for lab {spec.name} ready: {len(programmer.groups)} groups", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
