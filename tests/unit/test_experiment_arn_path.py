"""The experiment file's `arn_path`: who makes and consumes the link-down notices for the
run (dataplane.agent.arnpath.PATHS); a wrong value is one line naming the file and field."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dataplane.experiment import spec

SHIPPED = Path(__file__).resolve().parents[2] / "experiments" / "link-failure-spine.yml"


def copy_with(tmp_path: Path, **fields) -> Path:
    doc = yaml.safe_load(SHIPPED.read_text())
    doc["lab"] = str((SHIPPED.parent / doc["lab"]).resolve())
    doc["workload"] = str((SHIPPED.parent / doc["workload"]).resolve())
    path = tmp_path / "exp.yml"
    path.write_text(yaml.safe_dump({**doc, **fields}))
    return path


def test_arn_path_is_optional_and_kept():
    assert spec.load(SHIPPED).arn_path is None
    assert spec.load(SHIPPED, {"arn_path": "dataplane"}).arn_path == "dataplane"


def test_arn_path_from_the_file(tmp_path):
    assert spec.load(copy_with(tmp_path, arn_path="agent")).arn_path == "agent"


def test_unknown_arn_path_is_one_line(tmp_path):
    path = copy_with(tmp_path, arn_path="kernel")
    with pytest.raises(spec.ExperimentError) as err:
        spec.load(path)
    message = str(err.value)
    assert message.startswith(f"{path}: arn_path: ") and "'dataplane'" in message and "\n" not in message
