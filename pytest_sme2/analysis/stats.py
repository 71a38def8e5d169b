"""Robust latency statistics and the one speedup formula, with bootstrap confidence intervals.

The reference workflow has three speedup formulas across its tools; pytest-sme2 has one:
``speedup = median(SME2-off) / median(SME2-on)``, and the same ratio for instruction counts. Its
95 % interval comes from a bootstrap that resamples *rounds* (an on/off pair measured back to back)
when the runs were interleaved, so slow drift of the machine cancels inside each resample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Bootstrap resamples: 2000 keeps the 2.5/97.5 percentiles stable to ~1 % and costs ~10 ms.
BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True)
class LatencyStats:
    """Summary of per-run latencies in milliseconds (warm-up runs already excluded)."""

    count: int
    mean_ms: float
    median_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    cv_percent: float

    @classmethod
    def of(cls, samples_ms: Sequence[float]) -> LatencyStats:
        """Summarise ``samples_ms``; an empty sequence is a programming error upstream."""
        if not samples_ms:
            raise ValueError("no latency samples to summarise")
        data = np.asarray(samples_ms, dtype=float)
        mean = float(data.mean())
        std = float(data.std(ddof=1)) if data.size > 1 else 0.0
        p90, p95, p99 = (float(v) for v in np.percentile(data, [90, 95, 99]))
        return cls(
            count=int(data.size),
            mean_ms=mean,
            median_ms=float(np.median(data)),
            std_ms=std,
            min_ms=float(data.min()),
            max_ms=float(data.max()),
            p90_ms=p90,
            p95_ms=p95,
            p99_ms=p99,
            cv_percent=100.0 * std / mean if mean else 0.0,
        )


@dataclass(frozen=True)
class Ratio:
    """A ratio of medians (``numerator / denominator``) with its bootstrap 95 % interval."""

    value: float
    low: float
    high: float
    paired: bool

    def describe(self, unit: str = "×") -> str:
        return f"{self.value:.2f}{unit} (95% CI {self.low:.2f}–{self.high:.2f}{unit})"


def median_ratio(
    numerator: Sequence[float],
    denominator: Sequence[float],
    *,
    paired: bool = False,
    level: float = 0.95,
    seed: int = 0,
) -> Ratio:
    """``median(numerator) / median(denominator)`` with a bootstrap confidence interval.

    ``paired=True`` (both sequences the same length, element i of each measured in the same round)
    resamples rounds jointly; otherwise each side is resampled independently. The seed is fixed so
    the same measurements always give the same interval — a gate must not flicker on resampling.
    """
    num = np.asarray(numerator, dtype=float)
    den = np.asarray(denominator, dtype=float)
    if num.size == 0 or den.size == 0:
        raise ValueError("a ratio needs samples on both sides")
    if paired and num.size != den.size:
        raise ValueError(f"paired samples differ in length: {num.size} vs {den.size}")
    rng = np.random.default_rng(seed)
    if paired:
        idx = rng.integers(0, num.size, size=(BOOTSTRAP_RESAMPLES, num.size))
        ratios = np.median(num[idx], axis=1) / np.median(den[idx], axis=1)
    else:
        ratios = _resampled_medians(num, rng) / _resampled_medians(den, rng)
    return _ratio(float(np.median(num) / np.median(den)), ratios, level, paired)


def relative_median_ratio(
    numerator: Sequence[float],
    numerator_reference: Sequence[float],
    denominator: Sequence[float],
    denominator_reference: Sequence[float],
    *,
    level: float = 0.95,
    seed: int = 0,
) -> Ratio:
    """How ``numerator`` moved against ``denominator`` once each is divided by the reference
    workload measured beside it: ``(med(n) / med(n_ref)) / (med(d) / med(d_ref))``.

    A machine that got uniformly slower moves both a latency and its reference, and cancels out.
    The interval resamples the four sample sets independently.
    """
    sets = [
        np.asarray(x, dtype=float)
        for x in (numerator, numerator_reference, denominator, denominator_reference)
    ]
    if any(x.size == 0 for x in sets):
        raise ValueError("a relative ratio needs samples in all four sets")
    n, nr, d, dr = sets
    value = float((np.median(n) / np.median(nr)) / (np.median(d) / np.median(dr)))
    rng = np.random.default_rng(seed)
    n_b, nr_b, d_b, dr_b = (_resampled_medians(x, rng) for x in sets)
    return _ratio(value, (n_b / nr_b) / (d_b / dr_b), level, paired=False)


def _resampled_medians(samples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    idx = rng.integers(0, samples.size, size=(BOOTSTRAP_RESAMPLES, samples.size))
    return np.median(samples[idx], axis=1)


def _ratio(value: float, resampled: np.ndarray, level: float, paired: bool) -> Ratio:
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = (float(v) for v in np.percentile(resampled, [tail, 100.0 - tail]))
    return Ratio(value=value, low=low, high=high, paired=paired)
