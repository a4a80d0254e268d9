"""What the containerlab lab tests share: whether this machine can run them (and the rule
that CI must), the containers of a lab as Docker lists them, and what a split lab left."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from dataplane.runtime.emulated import stitch_devices

from .conftest import leftovers


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


def split_leftovers(lab: str, hosts: dict) -> list[str]:
    """Everything a lab split over the emulated machines `hosts` could leave, on every machine."""
    found = [f"{what} of {part}" for part in [lab] + [f"{lab}-{h}" for h in hosts]
             for what in leftovers(part)]
    found += [f"container {c}" for h in hosts for c in containers(f"{lab}-{h}")]
    found += [f"{h}: {d}" for h, devices in stitch_devices(hosts).items() for d in devices]
    found += [f"netns {ns}" for ns in os.listdir("/run/netns") if lab in ns]
    found += [f"process {pid}" for pid in os.listdir("/proc") if pid.isdigit()
              and lab.encode() in _cmdline(pid)]
    return found


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""
