"""Talks to a lab's agent over its Unix socket: one JSON request per line, one reply."""
from __future__ import annotations

import json
import socket

from dataplane.errors import RuntimeStateError
from dataplane.runtime import state


def request(lab: str, op: str, timeout_s: float = 30.0, **fields) -> object:
    path = state.agent_socket(lab)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise RuntimeStateError(f"lab {lab}: agent is not running (is the lab deployed?)")
        sock.sendall((json.dumps({"op": op, **fields}) + "\n").encode())
        with sock.makefile("rb") as reply_file:
            line = reply_file.readline()
    if not line:
        raise RuntimeStateError(f"lab {lab}: agent closed the connection")
    reply = json.loads(line)
    if not reply.get("ok"):
        raise RuntimeStateError(f"lab {lab}: agent refused {op}: {reply.get('error')}")
    return reply["result"]
