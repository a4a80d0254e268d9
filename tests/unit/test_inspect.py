"""`railab inspect` without a lab name: one lab is shown in full, several are listed."""
from __future__ import annotations

import json
from types import SimpleNamespace

from dataplane.cli import inspect
from dataplane.runtime import labspec, lifecycle, state
from dataplane.topology.generate import generate


def _labs(monkeypatch, names):
    states = {n: state.LabState(labspec.build(generate("clos2", name=n)), "up", None, None) for n in names}
    monkeypatch.setattr(state, "known_labs", lambda: sorted(names + ["gone"]))
    monkeypatch.setattr(state, "load", lambda lab: states.get(lab))
    monkeypatch.setattr(lifecycle, "is_up", lambda lab: lab != "beta")
    monkeypatch.setenv("COLUMNS", "200")


def test_several_labs_are_all_listed(monkeypatch, capsys):
    _labs(monkeypatch, ["alpha", "beta"])
    assert inspect.run(SimpleNamespace(lab=None, json=True)) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(d["name"], d["status"]) for d in listed] == [("alpha", "up"), ("beta", "broken"), ("gone", "leftovers")]
    assert inspect.run(SimpleNamespace(lab=None, json=False)) == 0
    out = capsys.readouterr().out
    assert "alpha" in out and "railab destroy beta" in out and "railab destroy gone" in out


def test_a_named_lab_is_shown_in_full(monkeypatch, capsys):
    _labs(monkeypatch, ["alpha", "beta"])
    assert inspect.run(SimpleNamespace(lab="alpha", json=True)) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["name"] == "alpha" and shown["status"] == "up" and shown["nodes"]
