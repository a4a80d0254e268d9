"""Units in and out, once: speeds (bit/s), sizes (bytes), rates (bit/s or packets/s),
ratios (a:b) and durations (seconds). Parsers raise ValueError with the text they could
not read; callers that speak for a file or a flag turn it into their own error."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

# ------------------------------------------------------------------ speeds
SPEED_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
SPEED_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:b(?:ps|/s)?)?\s*$", re.IGNORECASE)


def speed_parts(text: object) -> tuple[Fraction, str]:
    """'400G' -> (400, 'G'), '1.6Tb/s' -> (1.6, 'T'), '25' -> (25, ''): the number, exact,
    and its unit letter (upper case; '' for none)."""
    match = SPEED_RE.match(str(text))
    if not match:
        raise ValueError(f"not a speed: {text!r} (e.g. 100G)")
    return Fraction(match.group(1)), match.group(2).upper()


def parse_speed(text: object) -> int:
    """'100G', '25g', '400Gb/s', 1e11 -> bits per second."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return int(text)
    value, unit = speed_parts(text)
    return int(value * SPEED_UNITS[unit])


def format_speed(bps: int) -> str:
    """400_000_000_000 -> '400G', 1_600_000_000_000 -> '1600G': exact, parse_speed reads it back."""
    for unit in ("G", "M", "K"):
        if bps % SPEED_UNITS[unit] == 0:
            return f"{bps // SPEED_UNITS[unit]}{unit}"
    return str(bps)


_RATE_STEPS = (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))


def fmt_bps(bps: float | None, spec: str = ".3g", *, short: bool = False, small: str | None = None) -> str:
    """A bit rate for people: '95.3 Mb/s', '1.2 Gb/s' (short: '95.3M', '1.2G', no Tb/s
    step); None -> '-'. spec formats the number; small, if given, formats rates under
    1 kb/s."""
    if bps is None:
        return "-"
    for unit, div in _RATE_STEPS[1:] if short else _RATE_STEPS:
        if abs(bps) >= div:
            return f"{bps / div:{spec}}{unit}" if short else f"{bps / div:{spec}} {unit}b/s"
    text = f"{bps:{small or spec}}"
    return text if short else f"{text} b/s"


def fmt_speed(bps: float) -> str:
    """A port speed, short: '400G', '2.5M'."""
    return fmt_bps(bps, "g", short=True)


# ------------------------------------------------------------------ ratios
def parse_ratio(text: object) -> tuple[int, int]:
    """'3:1' -> (3, 1), as written (not reduced)."""
    match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", str(text))
    if not match:
        raise ValueError(f"not a ratio: {text!r} (e.g. 1:1 or 3:1)")
    return int(match.group(1)), int(match.group(2))


def reduce_ratio(a: int, b: int) -> tuple[int, int]:
    g = math.gcd(a, b)
    return a // g, b // g


def format_ratio(a: int, b: int) -> str:
    return "%d:%d" % reduce_ratio(a, b)


# ------------------------------------------------------------------ sizes, rates, durations
_SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6,
               "g": 10**9, "gb": 10**9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
_RATE_UNITS = {"bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}
_PPS_MULT = {"pps": 1, "kpps": 1e3, "mpps": 1e6}
_TIME_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "m": 60.0, "min": 60.0}
_NUM = r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*"
SIZE_RE = re.compile(rf"^{_NUM}([kKmMgG]?(?:i?[bB])?)\s*$")
RATE_RE = re.compile(rf"^{_NUM}([kKmMgG]?(?:bps|pps))\s*$", re.IGNORECASE)
TIME_RE = re.compile(rf"^{_NUM}(s|ms|us|ns|m|min)?\s*$")


def parse_size(v: int | float | str) -> int:
    """'64KiB' -> 65536, '1MB' -> 1000000, 4096 -> 4096."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return int(v)
    m = SIZE_RE.match(str(v))
    if not m:
        raise ValueError(f"bad size {v!r}")
    size = int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    if size <= 0:
        raise ValueError(f"size {v!r} must be more than zero")
    return size


@dataclass(frozen=True)
class Rate:
    value: float
    unit: str   # "bps" or "pps"

    def bps(self, frame_bytes: int) -> float:
        return self.value if self.unit == "bps" else self.value * frame_bytes * 8


def parse_rate(v: str | int | float) -> Rate:
    """'200Mbps' -> Rate(2e8, 'bps'); '20kpps' -> Rate(2e4, 'pps'); a number is bit/s."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return Rate(float(v), "bps")
    m = RATE_RE.match(str(v))
    if not m:
        raise ValueError(f"bad rate {v!r}")
    unit = m.group(2).lower()
    x = float(m.group(1))
    if x <= 0:
        raise ValueError(f"rate {v!r} must be more than zero")
    if unit in _PPS_MULT:
        return Rate(x * _PPS_MULT[unit], "pps")
    return Rate(x * _RATE_UNITS[unit], "bps")


def parse_duration(v: str | int | float) -> float:
    """'2s' -> 2.0, '500ms' -> 0.5, 3 -> 3.0 (seconds)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    m = TIME_RE.match(str(v))
    if not m:
        raise ValueError(f"bad duration {v!r}")
    return float(m.group(1)) * _TIME_UNITS[m.group(2) or ""]


def fmt_us(us: float | None) -> str:
    """A duration for people from microseconds: 850 µs, 12.4 ms, 1.20 s."""
    if us is None:
        return "-"
    if abs(us) >= 1e6:
        return f"{us / 1e6:.3g} s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.3g} ms"
    return f"{us:.3g} µs"
