"""What every picture of the report shares: colours, markers, the rate unit of an axis,
file names, the emulated-speed note and saving (dataplane.report.plots)."""
from __future__ import annotations

import re
from pathlib import Path

from matplotlib.figure import Figure

from dataplane.report import rundata
from dataplane.report.table import fmt_bps
from dataplane.topology.model import Endpoint

DPI = 110
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f")
TIER_NAME = {"host": "hosts", "leaf": "leaves", "spine": "spines", "core": "cores"}
ROLE_STYLE = {"host": ("s", "#606060"), "leaf": ("o", "#1f4e9c"), "spine": ("D", "#7b2d8b"),
              "core": ("h", "#8b2d2d")}
LOAD_CMAP = "plasma"


def rate_unit(max_bps: float) -> tuple[float, str]:
    for div, unit in ((1e12, "Tb/s"), (1e9, "Gb/s"), (1e6, "Mb/s"), (1e3, "kb/s")):
        if max_bps >= div:
            return div, unit
    return 1.0, "b/s"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "mode"


def node_of(ref: str) -> str:
    """The node of a link end ("leaf1:up1" -> "leaf1")."""
    return Endpoint.parse(ref).node


def palette_colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def speed_note(runs: list[dict]) -> str | None:
    """'port 100 Mb/s emulated = 400 Gb/s nominal' from the first uplink (or any link)."""
    for run in runs:
        for link in rundata.uplinks(run) or []:
            if link["scaled_bps"]:
                nominal = f" = {fmt_bps(link['speed_bps'])} nominal" if link["speed_bps"] else ""
                return f"port {fmt_bps(link['scaled_bps'])} emulated{nominal}"
        for link in run.get("links", []):
            if link.get("scaled_bps"):
                nominal = f" = {fmt_bps(link['speed_bps'])} nominal" if link.get("speed_bps") else ""
                return f"port {fmt_bps(link['scaled_bps'])} emulated{nominal}"
    return None


def save(fig: Figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, facecolor="white")
    return path
