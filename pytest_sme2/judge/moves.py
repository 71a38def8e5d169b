"""How far a measured quantity may move from its stored value (:class:`Tolerances`), and whether it
moved (:class:`Move`).

A gate fails on a move in the worse direction and reports one in the better direction as news; a
baseline update replaces the stored value on a move either way. Both apply the quantity's one rule
(its spec's ``moved``) to the measurement in its baseline form (rounded as stored, :func:`stable`),
so they cannot disagree at the edge of a tolerance.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass


def stable(value: float) -> float:
    """Round to 4 significant digits: enough to judge, few enough digits to diff by eye."""
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.4g}")


@dataclass(frozen=True)
class Tolerances:
    """How far a measurement may move from its baseline before a gate fails."""

    share_points: float = 5.0
    #: the rise of the fastest run relative to the reference workload's, and the floor of a
    #: calibrated tolerance. At 3 %, benchmarks/gating_quality.py on a 2-core Intel Xeon VM failed
    #: 0 of 20 unchanged sessions, 19 of 20 at +5 % and 20 of 20 at +10 %, quiet and with a noisy
    #: neighbour alike (the judged ratio ×1.000 ± 0.017 unchanged, ×1.051 ± 0.020 at +5 %)
    latency_percent: float = 3.0
    speedup_percent: float = 3.0
    #: instructions per inference are exact under emulation: 1 % is a real change of work
    instruction_percent: float = 1.0
    #: the fastest method init (weight packing) of the timing runs. A single process's init is
    #: one short stretch of allocation and packing that a neighbour's burst or a page-cache miss
    #: moves, and it has no reference workload beside it: toy_cnn's (0.35 ms on a 2-core AMD
    #: EPYC) moved by up to 11 % between 8 unchanged measurements (3.5 % standard deviation).
    #: 15 % lets that pass and fails a 20 % dearer packing, which a fresh measurement confirms
    init_time_percent: float = 15.0
    #: the runner's peak resident memory: libraries, weights, packed weights and arenas, the
    #: same from run to run to a fraction of a percent (0.3 % over those 8 measurements) but
    #: moved by the allocator and the C library; 10 % is a real change of what is held
    peak_rss_percent: float = 10.0


class Move(enum.IntEnum):
    """How a measured quantity stands against its stored value: within tolerance, or moved."""

    FELL = -1
    WITHIN = 0
    ROSE = 1


def relative_move(now: float, stored: float, percent: float) -> Move:
    """Moved when ``now`` differs from ``stored`` by more than ``percent`` of ``stored``."""
    if stored == 0:
        return Move.ROSE if now > 0 else Move.WITHIN
    change = (now / stored - 1) * 100
    return Move.ROSE if change > percent else Move.FELL if change < -percent else Move.WITHIN


def points_move(now: float, stored: float, points: float) -> Move:
    """A fraction (a share of time or of instructions) moved by more than ``points`` percentage
    points either way."""
    change = (now - stored) * 100
    return Move.ROSE if change > points else Move.FELL if change < -points else Move.WITHIN
