"""A lab split over machines (`railab deploy --hosts`) answers as one lab: every request
goes to each machine's agent over TCP with the lab's token (dataplane.agent.netserve),
in parallel, and the replies are merged into the reply one agent would give.

Each agent holds only its own machine's switches, so per-switch results (counters, lb,
port states, trace) do not overlap and merge by union; lab-wide tallies (verdicts, drops
by reason) are summed; lists (events, flows) are joined; settings every agent holds alike
(port model, clock) are taken from the first. A stamp (`t_ns`,
the kernel's monotonic clock) keeps the latest: one clock on one machine, and on several
the nearest thing to "when these were read".
"""
from __future__ import annotations

import json
import socket
from concurrent.futures import ThreadPoolExecutor

from dataplane.errors import RuntimeStateError

KEEP_LATEST = {"t_ns", "now_ns"}
SUMMED = {"verdicts", "drops"}      # the counters' lab-wide tallies


def ask(address: str, port: int, token: str, wire: dict, timeout_s: float = 30.0) -> dict:
    """One request to one agent; its reply line as a dict."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s) as sock:
            sock.sendall((json.dumps({"token": token, **wire}) + "\n").encode())
            with sock.makefile("rb") as reply_file:
                line = reply_file.readline()
    except OSError as err:
        raise RuntimeStateError(f"agent at {address}:{port} did not answer: {err}") from None
    if not line:
        raise RuntimeStateError(f"agent at {address}:{port} closed the connection")
    return json.loads(line)


def addressed(parts: list[dict], wire: dict) -> list[tuple[dict, dict]]:
    """(part, its request) for the parts a request concerns: a request naming a switch
    goes to that switch's machine, one naming a role to the machines with a switch of it,
    one naming switch ports (hold, release) to their machines with theirs, an lb_restore to each machine with its own switches' part of the snapshot; any other
    to every machine. (An agent refuses a switch or role it does not have.)"""
    if wire.get("switch"):
        owners = [p for p in parts if wire["switch"] in p["switches"]]
        return [(p, wire) for p in owners or parts]
    if wire.get("role"):
        owners = [p for p in parts if wire["role"] in p["switches"].values()]
        return [(p, wire) for p in owners or parts]
    if "ifindexes" in wire:         # switch ports: lab-unique (hostdeploy renumbers them)
        mine = [(p, {**wire, "ifindexes": [x for x in wire["ifindexes"] if int(x) in p["ports"]]})
                for p in parts]
        return [(p, w) for p, w in mine if w["ifindexes"]] or mine[:1]
    if wire["op"] == "lb_restore":
        saved = wire["snapshot"]["switches"]
        return [(p, {**wire, "snapshot": {**wire["snapshot"], "switches": {
            name: v for name, v in saved.items() if name in p["switches"]}}}) for p in parts]
    return [(p, wire) for p in parts]


def request(lab: str, parts: list[dict], wire: dict, timeout_s: float = 30.0) -> object:
    """`wire` to the parts' agents it concerns ({host, address, port, token, switches}
    each); the merged result."""
    def one(item):
        part, message = item
        return part, ask(part["address"], part["port"], part["token"], message, timeout_s)

    targets = addressed(parts, wire)
    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        replies = list(pool.map(one, targets))
    results = []
    for part, reply in replies:
        if not reply.get("ok"):
            raise RuntimeStateError(f"lab {lab}: agent on host {part['host']} refused "
                                    f"{wire['op']}: {reply.get('error')}")
        results.append(reply["result"])
    return merge(results)


def merge(results: list, summed: bool = False):
    """One reply from several agents' (see the module's doc). Numbers are summed only
    under SUMMED keys (lab-wide tallies); elsewhere a number is a setting every agent
    holds alike (the port model's scale, an ECN probability) and the first one stands."""
    results = [r for r in results if r is not None]
    if not results:
        return None
    first = results[0]
    if isinstance(first, dict):
        out: dict = {}
        for r in results:
            for key, value in r.items():
                if key not in out:
                    out[key] = value
                elif key in KEEP_LATEST and isinstance(value, (int, float)):
                    out[key] = max(out[key], value)
                else:
                    out[key] = merge([out[key], value], summed or key in SUMMED)
        return out
    if isinstance(first, list):
        return [item for r in results for item in r]
    if summed and not isinstance(first, bool) and all(isinstance(r, (int, float)) for r in results):
        return sum(results)
    return first
