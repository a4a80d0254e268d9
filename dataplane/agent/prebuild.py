"""Build the XDP object into railab's cache at install time (scripts/setup.sh), one per
size class of the labs given (default: the shipped ones), so that a user's first deploy
loads it instead of compiling it. The cache key holds the sources, the -D sizes, the
kernel release and the bcc version: a change to any of them compiles again, once.

    python -m dataplane.agent.prebuild [LAB.clab.yml ...]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from dataplane.agent.server import dataplane_sizes
from dataplane.runtime import labspec
from dataplane.topology import clab
from dataplane.xdp.switch import SwitchDataplane

SHIPPED = sorted((Path(__file__).resolve().parents[2] / "labs").glob("*/*.clab.yml"))


def prebuild(paths: list[Path]) -> list[dict]:
    done: dict[tuple, dict] = {}
    for path in paths:
        sizes = dataplane_sizes(labspec.build(clab.read(path), str(path)))
        key = tuple(sorted(sizes.items()))
        if key in done:
            done[key]["labs"].append(path.stem.replace(".clab", ""))
            continue
        started = time.monotonic()
        with SwitchDataplane(**sizes) as dp:
            how = dp.bpf_cache
        done[key] = {"sizes": sizes, "cache": how, "seconds": round(time.monotonic() - started, 2),
                     "labs": [path.stem.replace(".clab", "")]}
    return list(done.values())


def main(argv: list[str]) -> int:
    for entry in prebuild([Path(a) for a in argv] or SHIPPED):
        print(f"prebuild: {', '.join(entry['labs'])}: {entry['cache']} ({entry['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
