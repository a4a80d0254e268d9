"""What the containerlab lab tests share: whether this machine can run them (and the rule
that CI must), and the containers of a lab as Docker lists them."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def require(images: list[str]) -> None:
    """Skip (fail in CI) unless Docker, containerlab and these images are here."""
    missing = [tool for tool in ("docker", "containerlab") if shutil.which(tool) is None]
    if not missing and subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        missing.append("a running Docker engine")
    for image in ([] if missing else images):
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode != 0:
            missing.append(f"railab's image {image} (scripts/setup.sh builds it)")
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the containerlab tests, but this machine lacks {', '.join(missing)}")
        pytest.skip(f"needs {', '.join(missing)}")


def containers(lab: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label=containerlab={lab}",
                          "--format", "{{.Names}}"], capture_output=True, text=True, check=True)
    return sorted(out.stdout.split())
