"""Checks of the page's write requests against the lab (pure): a request is either turned
into the exact call the CLI makes or refused with one line saying what is wrong, before
anything is changed."""
from __future__ import annotations

from dataplane.lab.fabric import MODES
from dataplane.runtime.labspec import LabSpec

LINK_FAULTS = ("link-down", "link-up")
SWITCH_FAULTS = ("switch-down", "switch-up")
PLANE_FAULTS = ("plane-down", "plane-up")
UI_FAULTS = LINK_FAULTS + SWITCH_FAULTS + PLANE_FAULTS + ("clear",)


class BadRequest(Exception):
    """A request the server refuses: HTTP status and one line for the user."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def _object(body, allowed: set[str], what: str) -> dict:
    if not isinstance(body, dict):
        raise BadRequest(f"{what}: the body must be a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise BadRequest(f"{what}: unknown field {', '.join(unknown)}; known: {', '.join(sorted(allowed))}")
    return body


def _string(body: dict, key: str, what: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{what}: {key} must be a non-empty string")
    return value


def lb_request(body, spec: LabSpec) -> dict:
    """{"mode": M, "role": R} or {"mode": M, "switch": S} -> keyword arguments of
    dataplane.lab.fabric.Fabric.set_mode (as `railab lb set --mode M --role R|--switch S`)."""
    body = _object(body, {"mode", "role", "switch"}, "lb")
    mode = _string(body, "mode", "lb")
    if mode not in MODES:
        raise BadRequest(f"lb: mode {mode!r} is not one of {', '.join(MODES)}")
    if ("role" in body) == ("switch" in body):
        raise BadRequest("lb: give either role or switch")
    if "role" in body:
        role = _string(body, "role", "lb")
        roles = sorted({n.role for n in spec.switches})
        if role not in roles:
            raise BadRequest(f"lb: lab {spec.name} has no {role!r} switches (roles: {', '.join(roles)})")
        return {"mode": mode, "role": role}
    switch = _string(body, "switch", "lb")
    if switch not in {n.name for n in spec.switches}:
        raise BadRequest(f"lb: lab {spec.name} has no switch {switch!r}")
    return {"mode": mode, "switch": switch}


def _port(spec: LabSpec, ref: str, what: str) -> None:
    try:
        spec.endpoint(ref)
    except (KeyError, ValueError):
        raise BadRequest(f"{what}: lab {spec.name} has no interface {ref!r} (NODE:INTERFACE)") from None


def fault_request(body, spec: LabSpec) -> dict:
    """{"fault": F, ...} -> the event dataplane.lab.faults.apply takes (as `railab fault LAB F ...`)."""
    body = _object(body, {"fault", "a", "b", "switch", "plane"}, "fault")
    kind = _string(body, "fault", "fault")
    if kind not in UI_FAULTS:
        raise BadRequest(f"fault: {kind!r} is not one of {', '.join(UI_FAULTS)}")
    need = {"link-down": {"a"}, "link-up": {"a"}, "switch-down": {"switch"}, "switch-up": {"switch"},
            "plane-down": {"plane"}, "plane-up": {"plane"}, "clear": set()}[kind]
    optional = {"b"} if kind in LINK_FAULTS else set()
    given = set(body) - {"fault"}
    if need - given or given - need - optional:
        fields = ", ".join(sorted(need)) or "no other field"
        raise BadRequest(f"fault: {kind} takes {fields}" + (" (and optionally b)" if optional else ""))
    event = {"fault": kind}
    if kind in LINK_FAULTS:
        a = _string(body, "a", "fault")
        _port(spec, a, "fault")
        peer = spec.endpoint(a)[1].peer
        if "b" in body:
            b = _string(body, "b", "fault")
            _port(spec, b, "fault")
            if b != peer:
                raise BadRequest(f"fault: {a} is linked to {peer}, not {b}")
        event.update(a=a, b=peer)
    elif kind in SWITCH_FAULTS:
        switch = _string(body, "switch", "fault")
        if switch not in {n.name for n in spec.switches}:
            raise BadRequest(f"fault: lab {spec.name} has no switch {switch!r}")
        event["switch"] = switch
    elif kind in PLANE_FAULTS:
        plane = body["plane"]
        planes = sorted({int(n.plane) for n in spec.switches if n.plane is not None})
        if not isinstance(plane, int) or isinstance(plane, bool) or plane not in planes:
            raise BadRequest(f"fault: plane {plane!r} is not one of lab {spec.name}'s planes "
                             f"({', '.join(map(str, planes)) or 'none'})")
        event["plane"] = plane
    return event


def run_request(body, experiments: dict) -> str:
    """{"experiment": NAME} -> the file's name, one of `experiments` (name -> path): only
    files of the experiments folder run, never a path a request makes up."""
    body = _object(body, {"experiment"}, "run")
    name = _string(body, "experiment", "run")
    if name not in experiments:
        raise BadRequest(f"run: no experiment {name!r}; known: {', '.join(sorted(experiments)) or 'none'}")
    return name
