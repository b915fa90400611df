"""Helpers the host-CPU benchmarks share (bench/host/*.py): a weighted line fit and the CPU's name."""

from __future__ import annotations

import platform


def fit_line(xs, ys, ws=None):
    """Weighted least squares y = a + b x (ws=None: ordinary); returns
    (a, b, r2) with r2 of the same weighting."""
    ws = ws or [1.0] * len(xs)
    sw = sum(ws)
    mx = sum(w * x for w, x in zip(ws, xs)) / sw
    my = sum(w * y for w, y in zip(ws, ys)) / sw
    sxx = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs))
    sxy = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys))
    b = sxy / sxx
    a = my - b * mx
    ss_tot = sum(w * (y - my) ** 2 for w, y in zip(ws, ys))
    ss_res = sum(w * (y - a - b * x) ** 2 for w, x, y in zip(ws, xs, ys))
    return a, b, (1 - ss_res / ss_tot) if ss_tot > 0 else 1.0


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
