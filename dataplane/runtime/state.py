"""Where a lab records what it made, so that any later process can find and remove it.

Everything a lab creates carries the lab's name: its state directory
(/run/railab/<lab>/), its namespaces (railab-<lab>-<node>), its pinned BPF objects
(/sys/fs/bpf/railab/<lab>/) and its agent (`python -m dataplane.agent <lab>`).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from dataplane.errors import RuntimeStateError
from dataplane.runtime.labspec import LabSpec

STATE_ROOT = Path(os.environ.get("RAILAB_STATE_DIR", "/run/railab"))
BPFFS_ROOT = Path(os.environ.get("RAILAB_BPFFS_DIR", "/sys/fs/bpf/railab"))
# No '.': bpffs refuses it in pin names (and '.'/'..' would be paths). The length keeps
# namespace names (railab-<lab>-<node>) well inside what the tools print in full.
LAB_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,47}$")


def check_lab_name(lab: str) -> str:
    if not isinstance(lab, str) or not LAB_NAME.match(lab):
        raise RuntimeStateError(
            f"lab name {lab!r}: railab lab names are 1-48 letters, digits, '-' and '_' "
            "(starting with a letter or digit; no '.', which pinned BPF objects cannot hold)")
    return lab


def state_dir(lab: str) -> Path:
    return STATE_ROOT / check_lab_name(lab)


def state_file(lab: str) -> Path:
    return state_dir(lab) / "lab.json"


def pin_dir(lab: str) -> Path:
    return BPFFS_ROOT / check_lab_name(lab)


def agent_socket(lab: str) -> Path:
    return state_dir(lab) / "agent.sock"


def agent_log(lab: str) -> Path:
    return state_dir(lab) / "agent.log"


@dataclass
class LabState:
    spec: LabSpec
    status: str                  # deploying | up
    agent_pid: int | None = None
    deployer_pid: int | None = None   # the railab process deploying it (while "deploying")
    # the spec as JSON text from the last save: a large lab's spec takes a noticeable part
    # of a second to encode, and most saves only change the status or a pid
    _spec_text: str | None = field(default=None, repr=False, compare=False)

    def spec_changed(self) -> None:
        """The spec was changed in place since the last save: encode it again next time."""
        self._spec_text = None

    def save(self) -> None:
        path = state_file(self.spec.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        if self._spec_text is None:
            self._spec_text = json.dumps(self.spec.to_json())
        head = json.dumps({"status": self.status, "agent_pid": self.agent_pid,
                           "deployer_pid": self.deployer_pid})
        tmp.write_text(f'{head[:-1]}, "spec": {self._spec_text}}}')
        os.replace(tmp, path)


def load(lab: str) -> LabState | None:
    try:
        data = json.loads(state_file(lab).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return LabState(LabSpec.from_json(data["spec"]), data["status"], data.get("agent_pid"),
                    data.get("deployer_pid"))


def known_labs() -> list[str]:
    """Labs with a state directory, plus labs that left only namespaces behind."""
    names = set()
    if STATE_ROOT.is_dir():
        names.update(p.name for p in STATE_ROOT.iterdir() if p.is_dir())
    if BPFFS_ROOT.is_dir():
        names.update(p.name for p in BPFFS_ROOT.iterdir() if p.is_dir())
    return sorted(n for n in names if LAB_NAME.match(n))
