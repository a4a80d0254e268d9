"""The shipped labs under labs/: up to date with the generator, small, readable."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dataplane.topology import clab
from dataplane.topology.model import FABRIC_KINDS, Role

ROOT = Path(__file__).resolve().parents[2]


def gen_labs():
    spec = importlib.util.spec_from_file_location("gen_labs", ROOT / "scripts" / "gen_labs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_one_lab_per_kind():
    assert set(gen_labs().LABS) == set(FABRIC_KINDS)


@pytest.mark.parametrize("path, text", sorted(gen_labs().expected_files().items()),
                         ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else "")
def test_shipped_file_matches_generator(path, text):
    assert path.exists(), f"{path} missing: run scripts/gen_labs.py"
    assert path.read_text(encoding="utf-8") == text, f"{path} is stale: run scripts/gen_labs.py"


@pytest.mark.parametrize("kind", FABRIC_KINDS)
def test_lab_is_laptop_sized_and_valid(kind):
    path = ROOT / "labs" / kind / f"{kind}.clab.yml"
    clab.validate(yaml.safe_load(path.read_text()), str(path))
    topo = clab.read(path)
    assert topo.kind == kind and topo.name == kind
    assert len(topo.by_role(Role.HOST)) <= 16
    assert len(topo.nodes) <= 20
    assert len(topo.switches) >= 2


def test_check_mode_exit_status(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_labs.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
