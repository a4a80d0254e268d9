"""Deploy and destroy labs. Deploy records what it will make before making it, so that
`destroy` (or an interrupted deploy's own cleanup) finds all of it by the lab's name.

Order of bring-up: state file -> agent started (it compiles the XDP program while the
namespaces are built) -> namespaces -> veths -> sysctls -> addresses/routes -> agent
attaches XDP and programs the maps -> state "up". Teardown runs the reverse.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from dataplane.errors import RuntimeStateError
from dataplane.runtime import clabattach
from dataplane.runtime import containerlab as clab_runtime
from dataplane.runtime import netns as rt
from dataplane.runtime import splitclean, splitstate, state
from dataplane.runtime.labspec import LabSpec, lab_netns_prefix

AGENT_READY_TIMEOUT_S = 120
# Who makes a lab's namespaces and links; each module offers check/create/remove/leftovers.
# An attached lab's containers go before containerlab's own remove unlinks their namespaces.
RUNTIMES = {rt.NAME: rt, clabattach.NAME: clabattach, clab_runtime.NAME: clab_runtime}


def runtime_of(spec: LabSpec | None):
    if spec is not None and spec.attached:
        return clabattach
    return RUNTIMES[spec.runtime if spec is not None else rt.NAME]


@dataclass
class DeployResult:
    lab: str
    already_up: bool
    seconds: float
    # where the time went: deployer steps in order, then the agent's own steps (it works
    # in parallel, so its phases overlap the deployer's), seconds each
    phases: dict[str, float] = field(default_factory=dict)
    agent_phases: dict[str, float] = field(default_factory=dict)
    bpf_cache: str = ""          # how the agent got the XDP object: warm | cold | off


class _PhaseClock:
    """Seconds per named step, in order."""

    def __init__(self):
        self.phases: dict[str, float] = {}
        self.last = time.monotonic()

    def mark(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self.last, 4)
        self.last = now


def require_root() -> None:
    if os.geteuid() != 0:
        raise RuntimeStateError("railab needs root to create namespaces and load XDP programs")


def is_up(lab: str) -> bool:
    current = state.load(lab)
    if current is None or current.status != "up":
        return False
    record = splitstate.load(lab)
    if record is not None:          # a lab split over machines: its parts' agents
        return all(p.get("port") and _agent_alive(p["part"], p.get("agent_pid"))
                   for p in record["parts"] if p["switches"])
    present = set(rt.list_netns())
    return all(n.netns in present for n in current.spec.nodes) and _agent_alive(lab, current.agent_pid)


def deploy(spec: LabSpec) -> DeployResult:
    require_root()
    try:
        state.check_lab_name(spec.name)
    except RuntimeStateError as err:
        raise RuntimeStateError(f"{err} (deploy it with --name)") from None
    started = time.monotonic()
    current = state.load(spec.name)
    if current is not None and current.status == "deploying" and current.deployer_pid \
            and current.deployer_pid != os.getpid() and pid_alive(current.deployer_pid):
        raise RuntimeStateError(f"lab {spec.name} is being deployed by process "
                                f"{current.deployer_pid}; wait for it, or pick another --name")
    if is_up(spec.name):
        if current.spec.source and spec.source and \
                Path(current.spec.source).resolve() != Path(spec.source).resolve():
            raise RuntimeStateError(f"lab {spec.name} is already deployed from {current.spec.source}; "
                                    "destroy it first or pick another --name")
        if current.spec.runtime != spec.runtime:
            raise RuntimeStateError(f"lab {spec.name} is already deployed with the "
                                    f"{current.spec.runtime} runtime; destroy it first")
        if current.spec.dataplane != spec.dataplane:
            raise RuntimeStateError(f"lab {spec.name} is already deployed with the "
                                    f"{current.spec.dataplane} dataplane; destroy it first")
        return DeployResult(spec.name, True, 0.0)
    runtime = runtime_of(spec)
    runtime.check(spec)
    if lab_leftovers(spec.name):
        earlier = state.load(spec.name)
        _undo(earlier.spec if earlier else spec)

    clock = _PhaseClock()
    lab_state = state.LabState(spec, "deploying", deployer_pid=os.getpid())
    lab_state.save()
    agent = None
    interrupted = _InterruptGuard()
    try:
        with interrupted:
            agent, ready_fd = _start_agent(spec.name)
            lab_state.agent_pid = agent.pid
            lab_state.save()
            clock.mark("state file, agent started")
            steps = (("namespaces, links", runtime.create), ("sysctls, offloads", rt.configure_sysctls),
                     ("links up, addresses, routes", rt.configure_all))
            for name, step in steps:
                interrupted.check()
                step(spec)
                clock.mark(name)
            lab_state.spec_changed()   # the runtime may have learned ifindexes the agent must use
            lab_state.save()
            interrupted.check()
            _send_go(spec.name, agent)
            clock.mark("state file")
            report = _wait_ready(spec.name, agent, ready_fd)
            clock.mark("waiting for the agent")
            interrupted.check()
            lab_state.status = "up"
            lab_state.save()
            clock.mark("state file")
    except BaseException:
        with _signals_held():       # a second Ctrl-C must not stop the cleanup half-way
            _undo(spec)
        raise
    return DeployResult(spec.name, False, time.monotonic() - started, clock.phases,
                        report.get("phases", {}), report.get("bpf_cache", ""))


class _StopSignals:
    """Ctrl-C and SIGTERM handled by `handler` for the duration, as before after it."""

    def __init__(self, handler):
        self.handler = handler
        self.previous = {}

    def __enter__(self):
        self.previous = {sig: signal.signal(sig, self.handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        return False


class _signals_held(_StopSignals):
    """Ignore Ctrl-C and SIGTERM for the duration (cleanup that must finish)."""

    def __init__(self):
        super().__init__(signal.SIG_IGN)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one we may not signal counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _InterruptGuard(_StopSignals):
    """Ctrl-C or SIGTERM during a deploy: raise KeyboardInterrupt at once, and again at
    the next step boundary in case a library swallowed the first one."""

    def __init__(self):
        super().__init__(self._handler)
        self.fired = False

    def _handler(self, signum, frame):
        self.fired = True
        raise KeyboardInterrupt

    def check(self) -> None:
        if self.fired:
            raise KeyboardInterrupt


def _start_agent(lab: str, prefix: tuple = (), extra: tuple = (), env: dict | None = None):
    """The lab's agent, started at once (it compiles while the lab is built). `prefix`
    runs it elsewhere (a split lab's machine: nsenter into its namespace), `extra` adds
    arguments, `env` its environment."""
    read_fd, write_fd = os.pipe()
    log = open(state.agent_log(lab), "ab")
    try:
        agent = subprocess.Popen(
            [*prefix, sys.executable, "-m", "dataplane.agent", lab, "--ready-fd", str(write_fd), *extra],
            env=env,
            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
            pass_fds=(write_fd,), start_new_session=True,
        )
    finally:
        os.close(write_fd)
        log.close()
    return agent, read_fd


def _send_go(lab: str, agent) -> None:
    """Tell the agent the namespaces are there. An agent that already exited (it could
    not load the XDP object for this lab, say) is this deploy's error, with its log's last
    line: a bare BrokenPipeError reached the CLI, which took it for a closed stdout and
    exited 0 with the lab destroyed."""
    try:
        agent.stdin.write(b"go\n")
        agent.stdin.close()
    except BrokenPipeError:
        tail = _log_tail(lab)
        raise RuntimeStateError(f"lab {lab}: agent failed: "
                                f"{tail or 'it exited before the namespaces were ready'}") from None


def _wait_ready(lab: str, agent: subprocess.Popen, ready_fd: int) -> dict:
    """Wait for the agent's "ready {report as JSON}" line; returns the report (its phases
    and how it loaded the XDP object)."""
    try:
        readable, _, _ = select.select([ready_fd], [], [], AGENT_READY_TIMEOUT_S)
        message = os.read(ready_fd, 65536).decode().strip() if readable else ""
    finally:
        os.close(ready_fd)
    if message == "ready" or message.startswith("ready "):
        try:
            return json.loads(message[len("ready"):] or "{}")
        except json.JSONDecodeError:
            return {}
    if not message:
        tail = _log_tail(lab)
        message = f"agent exited or timed out ({tail})" if tail else "agent exited or timed out"
    raise RuntimeStateError(f"lab {lab}: agent failed: {message}")


def _log_tail(lab: str) -> str:
    try:
        lines = state.agent_log(lab).read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return ""
    return lines[-1] if lines else ""


def _agent_alive(lab: str, pid: int | None) -> bool:
    return pid is not None and _is_lab_agent(pid, lab)


def _is_lab_agent(pid: int, lab: str) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"dataplane.agent" in argv and lab.encode() in argv


def _lab_agent_pids(lab: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _is_lab_agent(int(entry), lab):
            pids.append(int(entry))
    return pids


def agent_labs() -> list[str]:
    """Labs named by running agent processes (`python -m dataplane.agent LAB`), whether
    or not their state directory is left."""
    labs = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"dataplane.agent" in argv:
            after = argv[argv.index(b"dataplane.agent") + 1:]
            if after and state.LAB_NAME.match(after[0].decode(errors="replace")):
                labs.add(after[0].decode())
    return sorted(labs)


def destroy_namespaces(names: list[str]) -> None:
    """Delete these namespaces, ending every process inside them first."""
    if names:
        _terminate(sorted(_pids_in_netns(_netns_inodes(names))))
        rt.delete_namespaces([n for n in names if os.path.lexists(os.path.join(rt.NETNS_DIR, n))])


def lab_leftovers(lab: str) -> bool:
    return bool(_lab_netns(lab) or state.state_dir(lab).exists() or state.pin_dir(lab).exists()
                or _lab_agent_pids(lab) or any(r.leftovers(lab) for r in RUNTIMES.values()))


def _lab_netns(lab: str) -> list[str]:
    current = state.load(lab)
    if current is not None:
        # a split lab's part: only its own machine's nodes (the others are another part's)
        wanted = {n.netns for n in current.spec.nodes if current.spec.is_local(n.name)}
        return [n for n in rt.list_netns() if n in wanted]
    # No state file: fall back to the name prefix, leaving alone labs that still have one.
    prefix = lab_netns_prefix(lab)
    others = {n.netns for other in state.known_labs() if other != lab
              for s in [state.load(other)] if s for n in s.spec.nodes}
    return [n for n in rt.list_netns() if n.startswith(prefix) and n not in others]


def _netns_inodes(names: list[str]) -> set[int]:
    inodes = set()
    for name in names:
        try:
            inodes.add(os.stat(os.path.join(rt.NETNS_DIR, name)).st_ino)
        except OSError:
            pass
    return inodes


def _pids_in_netns(inodes: set[int]) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino in inodes:
                pids.append(int(entry))
        except OSError:
            continue
    return pids


def _terminate(pids: list[int], grace_s: float = 2.0) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _exists(p)]
        if alive:
            time.sleep(0.02)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _exists(pid: int) -> bool:
    try:
        # A zombie still "exists" for kill(0); it is gone for our purposes.
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def destroy(lab: str) -> bool:
    """Remove everything of `lab`. Returns False when there was nothing to remove."""
    require_root()
    _remove_parts(lab)
    namespaces = _lab_netns(lab)
    if not (namespaces or lab_leftovers(lab)):
        return False
    current = state.load(lab)
    pids = set(_lab_agent_pids(lab))
    if current and current.agent_pid and _is_lab_agent(current.agent_pid, lab):
        pids.add(current.agent_pid)
    pids.update(_pids_in_netns(_netns_inodes(namespaces)))
    pids.discard(os.getpid())
    _terminate(sorted(pids))
    spec = current.spec if current else None
    # Every runtime's remove: a crash may have left a lab's state without knowing its runtime.
    for runtime in RUNTIMES.values():
        runtime.remove(lab, spec)
    rt.delete_namespaces([n for n in namespaces if os.path.lexists(os.path.join(rt.NETNS_DIR, n))])
    shutil.rmtree(state.pin_dir(lab), ignore_errors=True)
    shutil.rmtree(state.state_dir(lab), ignore_errors=True)
    return True


def _remove_parts(lab: str) -> None:
    """A lab split over machines: each part on its machine, then as a lab of its own;
    one part named by itself: its machine's side."""
    for part, netns, devices in splitclean.parts_of(lab):
        # a containerlab still at work on the part (its deployer was killed) would finish
        # it after the destroy
        marker = str(clab_runtime.topology_file(part)).encode()
        _terminate([p for p, argv in _processes() if marker in argv
                    and any(a.endswith(b"containerlab") for a in argv)])
        splitclean.machine_side(part, netns, devices)
        if part != lab:
            destroy(part)


def _processes():
    """(pid, argv) of every process but this one."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                yield int(entry), Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue


def _undo(spec: LabSpec) -> None:
    """What a deploy that cannot finish leaves: nothing of a lab railab made; of an
    attached lab, the user's containers as containerlab made them."""
    if spec.attached:
        release(spec)
    else:
        destroy(spec.name)


def release(spec: LabSpec) -> None:
    """railab's part of an attached lab (agent, XDP programs, host configuration, pins,
    state) undone; its containers left running for containerlab."""
    pids = set(_lab_agent_pids(spec.name))
    current = state.load(spec.name)
    if current and current.agent_pid and _is_lab_agent(current.agent_pid, spec.name):
        pids.add(current.agent_pid)
    pids.discard(os.getpid())
    _terminate(sorted(pids))
    clabattach.release(spec)
    shutil.rmtree(state.pin_dir(spec.name), ignore_errors=True)
    shutil.rmtree(state.state_dir(spec.name), ignore_errors=True)


def all_labs() -> list[str]:
    """Every lab on this machine that something is left of: a state directory, pins,
    containers, or an agent still running after its state directory went."""
    return sorted(set(state.known_labs()) | set(clab_runtime.labs_with_containers()) | set(agent_labs()))


def destroy_all() -> list[str]:
    """Every lab of all_labs(); then namespaces of labs whose state is gone entirely (by
    the railab prefix)."""
    removed = [lab for lab in all_labs() if destroy(lab)]
    stray = [n for n in rt.list_netns() if n.startswith("railab-")]
    if stray:
        destroy_namespaces(stray)
        removed.append(f"{len(stray)} stray namespaces")
    return removed
