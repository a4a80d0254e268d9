"""Helpers shared by the CLI verbs."""
from __future__ import annotations

import argparse
import math
import sys

from rich.console import Console

from dataplane.errors import RuntimeStateError
from dataplane.runtime import splitstate, state


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
    # a split lab's parts (`<lab>-<host>`) are its own business: the lab is what a user means
    labs = [n for n in labs if (splitstate.part_mark(n) or {}).get("lab") not in labs]
    if len(labs) == 1:
        return labs[0]
    if not labs:
        raise RuntimeStateError("no lab is deployed")
    raise RuntimeStateError(f"several labs are deployed ({', '.join(labs)}): name one")


def output_console():
    """A rich Console for a command's output. Piped or redirected output gets no width
    limit (rich would cut tables to 80 columns and hide digits); a terminal its own width."""
    return Console(width=None if sys.stdout.isatty() else 1000)


def positive(kind):
    """argparse type: a finite number above zero (one clear line otherwise)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0")
        return value
    return parse
