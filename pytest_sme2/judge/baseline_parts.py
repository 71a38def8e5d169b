"""The parts a stored baseline (:class:`pytest_sme2.judge.baseline.Baseline`) is made of: the
tolerances it is judged with, a variant's portable record, a machine class's times of a variant
(latency, shares, load) and its speedup, each value rounded as stored (:func:`stable`).

Apart from the baseline as a whole (its time records, calibration, and how a measurement becomes
one) so each reads on its own; :mod:`pytest_sme2.judge.baseline` uses them all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field


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


@dataclass(frozen=True)
class LatencyBaseline:
    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    std_ms: float
    samples_ms: tuple[float, ...]
    #: the reference workload's latencies from the same rounds (see pytest_sme2.export.reference)
    reference_samples_ms: tuple[float, ...] = ()

    @property
    def relative_fastest(self) -> float | None:
        """The fastest run ÷ the reference workload's fastest run in the same rounds: the model's
        speed in units of the machine's speed of the moment; None where no reference was timed."""
        if not self.reference_samples_ms:
            return None
        return self.min_ms / min(self.reference_samples_ms)

    def change_from(self, stored: LatencyBaseline) -> float:
        """How this latency moved from ``stored``: the fastest run relative to the reference
        workload's fastest run, now ÷ then (the raw fastest run where either has no reference).

        The fastest run, because a busy neighbour only ever slows runs down. Relative to the
        reference, because a whole machine's speed moves between sessions: on a 2-core Intel Xeon
        VM (avx512 + amx) the raw fastest run of an unchanged ~1 ms model moved ×1.019 ± 0.020
        (up to ×1.11) with the reference beside it, which the ratio cancels (×0.997 ± 0.010);
        ``benchmarks/gating_quality.py`` measures both on any machine.
        """
        now, then = self.relative_fastest, stored.relative_fastest
        if now is None or then is None:
            return self.min_ms / stored.min_ms
        return now / then


@dataclass(frozen=True)
class VariantBaseline:
    """One variant's portable expectations: true on every machine of the device kind.

    Operator structure, packed operators and executed SME2 kernels follow from the program and
    the kernels XNNPACK picks for the device's ISA; instruction counts under emulation are exact.
    """

    operators: Mapping[str, float]  # operator kind → occurrences per run
    packed_operators: tuple[str, ...]
    #: per-inference guest instructions and executed SME2 kernels, where the device shows them
    instructions: int | None = None
    sme2_kernels: tuple[str, ...] = ()
    #: where the device splits the count between operators (qemu-sme2): instructions per
    #: inference by operator kind (portable name), and each category's share of the inference
    operator_instructions: Mapping[str, int] = field(default_factory=dict)
    instruction_shares: Mapping[str, float] = field(default_factory=dict)
    #: where the device counts kernels per operator (qemu-sme2): operator kind (portable name) →
    #: the SME2 kernels that ran in it, sorted; what shows a library update changing the
    #: kernel selection (an SME2 kernel replaced by a NEON one), by name
    operator_sme2_kernels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: the method's init (weight packing) in guest instructions, where the device counts them,
    #: and the program's planned memory: exact, the same on every machine of the device kind
    init_instructions: int | None = None
    planned_bytes: int | None = None


@dataclass(frozen=True)
class VariantTimes:
    """One variant's machine-bound expectations: E2E latency, the category shares of time, and
    what loading cost (the fastest program load and method init of the timing runs, the largest
    peak resident memory): the runner's resident memory holds the machine's libraries, so it is
    the class's like its times. None in a record written before they were kept."""

    latency: LatencyBaseline
    shares: Mapping[str, float]
    program_load_ms: float | None = None
    method_init_ms: float | None = None
    peak_rss_bytes: int | None = None


@dataclass(frozen=True)
class SpeedupBaseline:
    value: float
    low: float
    high: float
