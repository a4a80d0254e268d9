"""The one client of a lab's agent: every caller (dataplane.lab.fabric, dataplane.lab.faults, the CLI
verbs, the experiment runner) asks through `request`, which checks the request against
dataplane.agent.protocol before it is sent (to the lab's agent on its Unix socket, or, for
a lab split over machines, to every machine's agent: dataplane.agent.remote); `counters` reads the reply as a
CounterSnapshot."""
from __future__ import annotations

import json
import socket

from dataplane.agent import protocol as proto
from dataplane.agent import remote
from dataplane.errors import RuntimeStateError
from dataplane.runtime import state
from dataplane.runtime.splitstate import split_parts


def request(lab: str, op: str, timeout_s: float = 30.0, **fields) -> object:
    """Send one request (fields None = not given) and return the agent's result."""
    wire = proto.request(op, **fields).to_wire()
    parts = split_parts(lab)
    if parts:
        return remote.request(lab, parts, wire, timeout_s)
    path = state.agent_socket(lab)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise RuntimeStateError(f"lab {lab}: agent is not running (is the lab deployed?)")
        sock.sendall((json.dumps(wire) + "\n").encode())
        with sock.makefile("rb") as reply_file:
            line = reply_file.readline()
    if not line:
        raise RuntimeStateError(f"lab {lab}: agent closed the connection")
    reply = json.loads(line)
    if not reply.get("ok"):
        raise RuntimeStateError(f"lab {lab}: agent refused {op}: {reply.get('error')}")
    return reply["result"]


def counters(lab: str, switch: str | None = None, timeout_s: float = 30.0) -> proto.CounterSnapshot:
    return proto.CounterSnapshot.from_wire(request(lab, "counters", timeout_s=timeout_s, switch=switch))
