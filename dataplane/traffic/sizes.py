"""Message-size distributions of a workload file (`size:` of a class or flow): fixed,
uniform, lognormal, a weighted choice, or a published flow-size CDF (cdf/, e.g.
websearch), each sampled reproducibly from the caller's random.Random."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataplane.errors import WorkloadError
from dataplane.units import parse_size


@dataclass(frozen=True)
class SizeDist:
    kind: str                                    # fixed | uniform | lognormal | choice
    params: tuple

    def sample(self, rng: random.Random) -> int:
        k, p = self.kind, self.params
        if k == "fixed":
            return p[0]
        if k == "uniform":
            return rng.randint(p[0], p[1])
        if k == "lognormal":
            median, sigma, lo, hi = p
            x = int(round(rng.lognormvariate(math.log(median), sigma)))
            return min(max(x, lo), hi)
        if k == "cdf":
            sizes, cum, scale = p
            u = rng.random() * cum[-1]
            i = next(j for j in range(1, len(cum)) if cum[j] >= u)
            span = cum[i] - cum[i - 1]
            x = sizes[i - 1] + (sizes[i] - sizes[i - 1]) * ((u - cum[i - 1]) / span if span else 1.0)
            return max(1, int(round(x * scale)))
        sizes, weights = p
        return rng.choices(sizes, weights)[0]

    @property
    def mean(self) -> float:
        k, p = self.kind, self.params
        if k == "fixed":
            return float(p[0])
        if k == "uniform":
            return (p[0] + p[1]) / 2
        if k == "lognormal":
            median, sigma, lo, hi = p
            return min(max(median * math.exp(sigma * sigma / 2), lo), hi)
        if k == "cdf":
            sizes, cum, scale = p
            return scale * sum((cum[i] - cum[i - 1]) * (sizes[i] + sizes[i - 1]) / 2
                               for i in range(1, len(cum))) / cum[-1]
        sizes, weights = p
        return sum(s * w for s, w in zip(sizes, weights)) / sum(weights)


def parse_dist(d: Any, where: str) -> SizeDist:
    try:
        if isinstance(d, list):
            d = {"choice": d}
        if not isinstance(d, dict):
            return SizeDist("fixed", (parse_size(d),))
        if "fixed" in d:
            return SizeDist("fixed", (parse_size(d["fixed"]),))
        if "uniform" in d:
            lo, hi = parse_size(d["uniform"]["min"]), parse_size(d["uniform"]["max"])
            if lo > hi:
                raise ValueError(f"min {lo} > max {hi}")
            return SizeDist("uniform", (lo, hi))
        if "lognormal" in d:
            ln = d["lognormal"]
            lo = parse_size(ln.get("min", 1))
            hi = parse_size(ln.get("max", 1 << 40))
            if lo > hi:
                raise ValueError(f"min {lo} > max {hi}")
            return SizeDist("lognormal", (parse_size(ln["median"]), float(ln["sigma"]), lo, hi))
        if "cdf" in d:
            sizes, cum = read_cdf(d["cdf"])
            return SizeDist("cdf", (sizes, cum, float(d.get("scale", 1.0))))
        pairs = d["choice"]
        return SizeDist("choice", (tuple(parse_size(s) for s, _ in pairs),
                                   tuple(float(w) for _, w in pairs)))
    except (ValueError, KeyError, TypeError) as e:
        raise WorkloadError(f"{where}: {e}") from None


CDF_DIR = Path(__file__).parent / "cdf"


def read_cdf(name: str) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """A flow-size CDF: a shipped one by name (dataplane/traffic/cdf/<name>.txt, e.g.
    websearch) or a file of "size cumulative-percent" lines."""
    path = CDF_DIR / f"{name}.txt" if "/" not in name and not name.endswith(".txt") else Path(name)
    try:
        rows = [line.split() for line in path.read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
        sizes = tuple(int(float(r[0])) for r in rows)
        cum = tuple(float(r[1]) for r in rows)
    except OSError:
        known = ", ".join(sorted(p.stem for p in CDF_DIR.glob("*.txt")))
        raise ValueError(f"cdf {name!r}: no such distribution (shipped: {known}) or file") from None
    except (IndexError, ValueError):
        raise ValueError(f"cdf {name!r}: lines must be 'size cumulative-percent'") from None
    if len(sizes) < 2 or any(b < a for a, b in zip(sizes, sizes[1:])) \
            or any(b < a for a, b in zip(cum, cum[1:])) or cum[-1] <= 0:
        raise ValueError(f"cdf {name!r}: sizes and percentages must rise")
    return sizes, cum
