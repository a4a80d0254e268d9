"""Run-time settings changed by name (the port model, the fabric monitor's ARN settings):
one way to apply a request's changes over the current values."""
from __future__ import annotations


def merged(current: dict, changes: dict, defaults: dict, what: str) -> dict:
    """A copy of `current` with the changes that are not None applied, each converted to
    the type of its default; a name `defaults` does not have is a ValueError."""
    new = dict(current)
    for key, value in changes.items():
        if value is None:
            continue
        if key not in defaults:
            raise ValueError(f"unknown {what} setting {key!r}; known: {', '.join(defaults)}")
        new[key] = type(defaults[key])(value)
    return new
