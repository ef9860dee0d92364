"""Small helpers the rules share."""
from __future__ import annotations

import statistics


def us(v: float) -> str:
    """A duration for a message: µs below 1 ms, ms above."""
    if v >= 1000:
        return f"{v / 1000:.2f} ms"
    return f"{v:.1f} µs"


def mib(nbytes: float) -> str:
    if abs(nbytes) >= 1024**3:
        return f"{nbytes / 1024**3:.2f} GiB"
    return f"{nbytes / 1024**2:.1f} MiB"


def pct(v: float) -> str:
    return f"{v:.1f}%"


def median(xs) -> float:
    xs = list(xs)
    return statistics.median(xs) if xs else 0.0


def quantile(xs: list[float], q: float) -> float:
    """Nearest-rank quantile of a non-empty list."""
    s = sorted(xs)
    k = min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))
    return s[k]


def r3(v: float) -> float:
    return round(v, 3)
