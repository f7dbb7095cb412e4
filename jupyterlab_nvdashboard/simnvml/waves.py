"""The smooth, deterministic loads every simulated GPU runs, and their exact integrals."""

from __future__ import annotations

import math


def wave(t: float, period_s: float, phase: float) -> float:
    """0..1, smooth, so the charts look alive and stay deterministic."""
    return 0.5 + 0.5 * math.sin(2 * math.pi * t / period_s + phase)


def wave_integral(t: float, period_s: float, phase: float) -> float:
    """Integral of wave from 0 to t, so counters are exact for any read time."""
    omega = 2 * math.pi / period_s
    return 0.5 * t - 0.5 * (math.cos(omega * t + phase) - math.cos(phase)) / omega
