"""Latency statistics and the bootstrap ratio interval."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_sme2.analysis.stats import LatencyStats, median_ratio


def test_latency_stats_match_numpy():
    samples = [3.0, 1.0, 2.0, 10.0, 4.0]
    stats = LatencyStats.of(samples)
    assert stats.median_ms == 3.0
    assert stats.mean_ms == pytest.approx(4.0)
    assert stats.std_ms == pytest.approx(np.std(samples, ddof=1))
    assert (stats.min_ms, stats.max_ms, stats.count) == (1.0, 10.0, 5)
    assert stats.p95_ms == pytest.approx(np.percentile(samples, 95))


def test_ratio_interval_brackets_the_value_and_is_deterministic():
    rng = np.random.default_rng(1)
    off = list(10 + rng.normal(0, 0.3, 30))
    on = list(5 + rng.normal(0, 0.2, 30))
    a = median_ratio(off, on, paired=True)
    b = median_ratio(off, on, paired=True)
    assert a == b
    assert a.low < a.value < a.high
    assert a.low > 1.8 and a.high < 2.2


def test_interval_narrows_with_more_samples():
    rng = np.random.default_rng(2)
    few = median_ratio(list(10 + rng.normal(0, 1, 5)), list(5 + rng.normal(0, 1, 5)))
    many = median_ratio(list(10 + rng.normal(0, 1, 200)), list(5 + rng.normal(0, 1, 200)))
    assert many.high - many.low < few.high - few.low


def test_paired_needs_equal_lengths():
    with pytest.raises(ValueError, match="differ in length"):
        median_ratio([1.0, 2.0], [1.0], paired=True)
