"""What a lab split over machines (`railab deploy --hosts`) records, in the lab's state
directory, before anything is made: every machine ("host") with its underlay address,
the namespace that plays it on this machine (None: this machine itself), its part (a lab
of its own, `<lab>-<host>`, with its state, containers, pins and agent), the agent's TCP
port once it listens, and the token every request to it carries. `railab destroy` finds
every part from it, also after a `kill -9` of the deployer.

The file is root's only (0600): the tokens change the lab's forwarding.
"""
from __future__ import annotations

import json
import os

from dataplane.errors import RuntimeStateError
from dataplane.runtime import state

RECORD = "hosts.json"
TOKEN_ENV = "RAILAB_AGENT_TOKEN"    # how a part's agent gets its token (dataplane.agent.netserve)
MARK = "machine.json"       # in a part's state directory: which lab and machine it is


def record_path(lab: str):
    return state.state_dir(lab) / RECORD


def save(lab: str, record: dict) -> None:
    path = record_path(lab)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(record, out, indent=1)
    os.replace(tmp, path)


def load(lab: str) -> dict | None:
    try:
        return json.loads(record_path(lab).read_text())
    except (FileNotFoundError, ValueError, RuntimeError):
        return None


def split_parts(lab: str) -> list[dict]:
    """The parts of a split lab whose agents listen ({host, address, port, token}), [] for
    a lab on one machine."""
    try:
        record = load(lab)
    except Exception:       # a bad lab name: the ordinary path reports it
        return []
    if record is None:
        return []
    parts = [p for p in record["parts"] if p["switches"]]     # a part of hosts only has no agent
    waiting = [p["host"] for p in parts if not p.get("port")]
    if waiting:
        raise RuntimeStateError(f"lab {lab}: the agent on host {waiting[0]} is not up "
                                f"(deploy unfinished? railab destroy {lab})")
    return parts


def mark_part(part: str, lab: str, host: str, netns: str | None) -> None:
    path = state.state_dir(part) / MARK
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"lab": lab, "host": host, "netns": netns}))


def part_mark(part: str) -> dict | None:
    try:
        return json.loads((state.state_dir(part) / MARK).read_text())
    except (FileNotFoundError, ValueError):
        return None
