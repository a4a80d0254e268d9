"""Helpers shared by the CLI verbs."""
from __future__ import annotations

from dataplane.errors import RuntimeStateError
from dataplane.runtime import state


def load_lab(lab: str) -> state.LabState:
    current = state.load(lab)
    if current is None:
        raise RuntimeStateError(f"lab {lab} is not deployed (no state in {state.state_dir(lab)})")
    return current


def single_lab(lab: str | None) -> str:
    """The lab a command means: the one named, or the only one deployed."""
    if lab:
        return state.check_lab_name(lab)
    labs = state.known_labs()
    if len(labs) == 1:
        return labs[0]
    if not labs:
        raise RuntimeStateError("no lab is deployed")
    raise RuntimeStateError(f"several labs are deployed ({', '.join(labs)}): name one")


def output_console():
    """A rich Console for a command's output. Piped or redirected output gets no width
    limit (rich would cut tables to 80 columns and hide digits); a terminal its own width."""
    import sys

    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 1000)
