"""Lab fixtures: every lab a test deploys gets a unique name and is destroyed afterwards,
also when the test fails; `assert_no_leftovers` checks that nothing of it remains."""
from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from dataplane.runtime import containerlab, lifecycle, state
from dataplane.runtime import netns as rt
from dataplane.runtime.labspec import LabSpec, build
from dataplane.topology.clab import read as load_topology

from .. import sweeper

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "labs"
RAILAB = [sys.executable, "-m", "dataplane.cli.main"]


def unique_name(prefix: str) -> str:
    """A lab name of this session's own (tests/sweeper.py removes it if the session is
    killed before its fixture can)."""
    return f"{sweeper.tag()}-{prefix}-{uuid.uuid4().hex[:6]}"


def shipped(kind: str) -> Path:
    return LABS / kind / f"{kind}.clab.yml"


def spec_from(path: Path, name: str) -> LabSpec:
    topo = load_topology(path)
    topo.name = name
    return build(topo, str(path))


def leftovers(lab: str, spec: LabSpec | None = None) -> list[str]:
    found = []
    names = {n.netns for n in spec.nodes} if spec else set()
    for ns in rt.list_netns():
        if ns in names or ns.startswith(f"railab-{lab}-"):
            found.append(f"netns {ns}")
    if state.state_dir(lab).exists():
        found.append(f"state dir {state.state_dir(lab)}")
    if state.pin_dir(lab).exists():
        found.append(f"pins {state.pin_dir(lab)}")
    for pid in lifecycle._lab_agent_pids(lab):
        found.append(f"agent process {pid}")
    for ns in rt.list_netns():
        if ns.startswith(f"clab-{lab}-"):
            found.append(f"containerlab netns {ns}")
    if containerlab.leftovers(lab):
        found.append(f"containers labelled {containerlab.LAB_LABEL}={lab}")
    return found


def railab(*args: str, check: bool = True, timeout: float = 180,
           env: dict | None = None) -> subprocess.CompletedProcess:
    child = subprocess.Popen([*RAILAB, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=ROOT, env=env)
    try:
        out, err = child.communicate(timeout=timeout)
    except BaseException:
        # A timeout (ours or pytest's) or Ctrl-C: interrupt railab as a user would, so it
        # cleans up what it made (a SIGKILL would leave its lab behind), then give up on it.
        child.send_signal(signal.SIGINT)
        try:
            child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
        raise
    proc = subprocess.CompletedProcess(child.args, child.returncode, out, err)
    if check and proc.returncode != 0:
        raise AssertionError(f"railab {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@contextlib.contextmanager
def deployed(kind: str | Path, prefix: str):
    """A shipped lab (by kind) or a lab file deployed under a unique name for a module's
    tests; destroyed at the end, also on failure, and checked to leave nothing behind."""
    spec = spec_from(shipped(kind) if isinstance(kind, str) else kind, unique_name(prefix))
    lifecycle.deploy(spec)
    try:
        yield spec
    finally:
        lifecycle.destroy(spec.name)
        assert not leftovers(spec.name, spec)


def lab_fixture(kind: str | Path, prefix: str):
    """A module's `lab` fixture: `deployed(kind, prefix)` for the module's tests, the
    LabSpec as its value (`lab = lab_fixture("clos2", "flt")` in the module)."""
    @pytest.fixture(scope="module", name="lab")
    def lab():
        with deployed(kind, prefix) as spec:
            yield spec
    return lab


def run_experiment(path: Path, output: Path, *, name: str | None = None, prefix: str = "exp",
                   timeout: float = 600, plots: bool = False) -> dict:
    """`railab run PATH --json --output OUTPUT --name NAME` as a user runs it: its JSON report.
    Without `name` the experiment deploys a lab of its own under a unique name, and must
    leave nothing of it behind. `--no-plots` unless the test looks at the figures (they
    cost seconds a run)."""
    own = name is None
    name = name or unique_name(prefix)
    proc = railab("run", str(path), "--json", "--output", str(output), "--name", name,
                  *([] if plots else ["--no-plots"]), timeout=timeout)
    if own:
        assert leftovers(name) == [], "the lab the experiment deployed must be gone"
    return json.loads(proc.stdout)


@pytest.fixture
def lab_factory():
    """Deploys labs in-process; destroys every one of them at the end, whatever happens."""
    made: list[LabSpec] = []

    def deploy(path: Path, prefix: str = "t") -> LabSpec:
        spec = spec_from(path, unique_name(prefix))
        made.append(spec)
        lifecycle.deploy(spec)
        return spec

    yield deploy
    problems = []
    for spec in made:
        lifecycle.destroy(spec.name)
        left = leftovers(spec.name, spec)
        if left:
            problems.append(f"{spec.name}: {left}")
    assert not problems, f"labs left things behind: {problems}"


def xdp_prog_ids_in(netns: str) -> list[int]:
    out = subprocess.run(["ip", "-n", netns, "-d", "link", "show"], capture_output=True, text=True).stdout
    ids = []
    for line in out.splitlines():
        if "prog/xdp id" in line:
            ids.append(int(line.split("prog/xdp id")[1].split()[0]))
    return ids


def wait_for(predicate, timeout_s: float = 60.0) -> bool:
    """Poll until predicate() holds: the kernel finishes some teardown (devices of an
    unlinked namespace, the XDP programs on them) after the call that started it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def bpf_prog_exists(prog_id: int) -> bool:
    return subprocess.run(["bpftool", "prog", "show", "id", str(prog_id)],
                          capture_output=True).returncode == 0
