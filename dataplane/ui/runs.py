"""Experiments started from the page: each is a `railab run FILE --name LAB` process, as a
user would start it, recorded in the lab's state directory (ui-run/), so a restarted
server finds it and its report, and `railab destroy` removes the record with the lab.

The process runs in its own session: stopping the server leaves it running; stopping it
sends SIGINT, which `railab run` answers as it answers Ctrl-C (its senders and receivers
stop and the lab gets its load balancing and port model back)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from dataplane.runtime import state
from dataplane.ui.validate import BadRequest

STOP_WAIT_S = 30.0


def experiment_files(folder: Path) -> dict[str, Path]:
    """name -> path of every experiment file in the folder."""
    if not folder.is_dir():
        return {}
    return {p.name: p for p in sorted(folder.glob("*.yml")) + sorted(folder.glob("*.yaml"))}


def _dir(lab: str) -> Path:
    return state.state_dir(lab) / "ui-run"


def _record(lab: str) -> dict | None:
    try:
        return json.loads((_dir(lab) / "run.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


def _save(lab: str, record: dict) -> None:
    path = _dir(lab) / "run.json"
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")   # one per writer
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(path)


def _alive(record: dict) -> bool:
    """The recorded process still runs (and, if another server started it, is still
    `railab run`, not a reused pid)."""
    pid = record["pid"]
    try:
        # a child of this server that ended is reaped here, so it does not linger as a zombie
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass                                   # not our child, or reaped already
    else:
        if done:
            # recorded at once: only this call learns the exit status
            record["returncode"] = os.waitstatus_to_exitcode(status)
            _save(record["lab"], record)
        return not done
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"run" in cmdline and str(record["file"]).encode() in cmdline


def start(lab: str, name: str, path: Path, results: Path) -> dict:
    current = status(lab)
    if current["state"] == "running":
        raise BadRequest(f"run: {current['experiment']} is still running on lab {lab} (stop it first)", 409)
    folder = _dir(lab)
    folder.mkdir(parents=True, exist_ok=True)
    results.mkdir(parents=True, exist_ok=True)
    with open(folder / "stdout.json", "wb") as out, open(folder / "stderr.log", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dataplane.cli.main", "run", str(path), "--name", lab,
             "--output", str(results.resolve()), "--json"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
    record = {"lab": lab, "experiment": name, "file": str(path), "pid": proc.pid, "started": time.time(),
              "results": str(results.resolve())}
    _save(lab, record)
    return status(lab)


def stop(lab: str) -> dict:
    record = _record(lab)
    if record is None or not _alive(record):
        raise BadRequest(f"run: no experiment is running on lab {lab}", 409)
    os.killpg(record["pid"], signal.SIGINT)
    deadline = time.monotonic() + STOP_WAIT_S
    while _alive(record) and time.monotonic() < deadline:
        time.sleep(0.1)
    record["stopped"] = time.time()
    _save(lab, record)
    return status(lab)


def status(lab: str) -> dict:
    """{"state": none|running|done|failed, experiment, started, and when it ended: folder,
    table (text), plots (file names), error (its last lines on stderr)}."""
    record = _record(lab)
    if record is None:
        return {"state": "none"}
    out = {k: record[k] for k in ("experiment", "started", "pid") if k in record}
    if _alive(record):
        return {**out, "state": "running"}
    if "returncode" in record:
        out["returncode"] = record["returncode"]
    folder = _dir(lab)
    try:
        summary = json.loads((folder / "stdout.json").read_text())
    except (FileNotFoundError, ValueError):
        summary = None
    if summary is None:
        err = (folder / "stderr.log").read_text(errors="replace").strip().splitlines()
        reason = "stopped" if "stopped" in record else "failed"
        return {**out, "state": reason, "error": "\n".join(err[-5:])}
    results = Path(summary["folder"])
    table = (results / "table.txt").read_text() if (results / "table.txt").is_file() else ""
    return {**out, "state": "done", "folder": str(results), "table": table,
            "plots": [Path(p).name for p in summary.get("plots", [])], "modes": summary.get("modes", {})}


def plot_path(lab: str, name: str) -> Path:
    """A plot of the last finished run, by file name (only names its report lists)."""
    current = status(lab)
    if current["state"] != "done" or name not in current["plots"]:
        raise BadRequest(f"run: no plot {name!r} in the last report of lab {lab}", 404)
    return Path(current["folder"]) / name
