"""What a stored baseline holds, as values: the portable part per variant, a time record per machine
class (its times per variant, its speedup and calibration), and the case's own figures.

One file per case (``baselines/<device>/<model>-<dtype>[-t<threads>].json``) holds two kinds of
expectation:

* the portable part (top-level ``variants``, the case's figures such as ``instruction_ratio``):
  operator structure, packed operators, SME2 kernels, emulated instruction counts — true on every
  machine of the device kind;
* ``machines``: one time record per machine class (``DeviceInfo.class_id``) — latency, category
  shares of time, speedup, load time and memory — judged only against a measurement of the same
  class.

A scalar quantity (a count, a size, a time) is kept in a ``figures`` mapping under its JSON key,
written and read by its spec (:mod:`pytest_sme2.judge.scalar`), so that adding one needs no field
here; the compound ones (latency, shares, structure, …) are typed fields their specs fill. What a
file did not hold stays absent (``None``, or no key), so a file read and written again is the same
file. How a measurement becomes a baseline and how the file is written walk the specs
(:mod:`pytest_sme2.judge.baseline`, :mod:`pytest_sme2.judge.baseline_file`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pytest_sme2.judge.moves import Tolerances
from pytest_sme2.measure.deadline import Deadline, case_deadline
from pytest_sme2.records.device import DeviceInfo

#: A scalar quantity's stored value by its JSON key; None where the file holds a JSON null.
Figures = Mapping[str, float | None]


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
class SpeedupBaseline:
    value: float
    low: float
    high: float


#: The statistic the latency gate judges (``LatencyBaseline.change_from``); a stored calibration
#: of any other is not applied.
LATENCY_STATISTIC = "fastest-run/reference-fastest-run"


@dataclass(frozen=True)
class Calibration:
    """What an A/A calibration (``--sme2-calibrate=N``) measured of the latency gate's statistic
    on one machine class: ``runs`` unchanged measurements of the case, one after another.

    ``noise_percent`` is the standard deviation of the judged change (:meth:`LatencyBaseline.
    change_from`) between two unchanged measurements, the worse variant's; the case's latency
    tolerance is ``tolerance_percent``, never below the session's floor (``Tolerances``).
    """

    runs: int
    noise_percent: float
    tolerance_percent: float
    #: the statistic the noise is of, so that a gate judging another one ignores this calibration
    statistic: str
    #: when it was measured (UTC, ISO 8601)
    when: str

    def detectable_percent(self, tolerance_percent: float) -> float:
        """The smallest slowdown the gate catches in at least 95 % of sessions at
        ``tolerance_percent``: the change must exceed the tolerance in the first measurement and
        in the confirming one (``decision.judge_confirmed``), each 97.5 % of the time, so 1.96
        standard deviations of noise beyond the tolerance."""
        return tolerance_percent + 1.96 * self.noise_percent


@dataclass(frozen=True)
class StoredCoverage:
    """A variant's SME2 coverage as a baseline keeps it (:mod:`pytest_sme2.judge.sme2_coverage`):
    the share of its GEMM and convolution multiply-adds run in SME2 kernels, in percent, and the
    operators that ran them (their labels: :attr:`~pytest_sme2.analysis.coverage.
    OperatorCoverage.label`), so a fall names those that left."""

    percent: float
    sme2_operators: tuple[str, ...] = ()


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
    #: inference by operator kind (portable name), and each category's share of the inference;
    #: None in a file written before they were kept
    operator_instructions: Mapping[str, int] | None = None
    instruction_shares: Mapping[str, float] | None = None
    #: where the device counts kernels per operator (qemu-sme2): operator kind (portable name) →
    #: the SME2 kernels that ran in it, sorted; what shows a library update changing the
    #: kernel selection (an SME2 kernel replaced by a NEON one), by name
    operator_sme2_kernels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: where the device counts kernels per operator (qemu-sme2): operator kind (portable name) →
    #: kernel family (``SME2 MOPA``, ``NEON``…) → its operators per inference; what shows a
    #: layer moved from SME2's outer products to its one-row kernel, or to NEON
    operator_kernel_families: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: SME2-on's share of the GEMM and convolution work in SME2 kernels, where the work is known
    sme2_coverage: StoredCoverage | None = None
    #: the scalar quantities of the variant (init instructions, planned memory, …)
    figures: Figures = field(default_factory=dict)


@dataclass(frozen=True)
class VariantTimes:
    """One variant's machine-bound expectations: E2E latency, the category shares of time, and its
    scalar quantities (what loading cost, the resident memory: the runner's resident memory holds
    the machine's libraries, so it is the class's like its times)."""

    latency: LatencyBaseline
    shares: Mapping[str, float]
    figures: Figures = field(default_factory=dict)


@dataclass(frozen=True)
class TimeRecord:
    """What one machine class measured: time is only comparable within a class.

    A CPU with other kernels (AVX-512 vs AVX2), more cores, another chip or another torch /
    executorch version moves latency *and* shares (toy_cnn fp16's Convolution share is 80.7 % on an
    AMD EPYC and 52.2 % on an Intel Xeon). ``notes`` are what else the machine said when these times
    were recorded (kernel release, Python patch version, runner build): shown when they change,
    never a reason to stop judging.
    """

    machine_class: Mapping[str, str]
    notes: Mapping[str, str]
    variants: Mapping[str, VariantTimes]
    speedup: SpeedupBaseline | None = None
    calibration: Calibration | None = None

    def latency_percent(self, tol: Tolerances) -> float:
        """This record's latency tolerance: derived from its calibration, never below the
        session's ``latency_percent`` (the floor)."""
        cal = self.calibration
        if cal is None or cal.statistic != LATENCY_STATISTIC:
            return tol.latency_percent
        return max(tol.latency_percent, cal.tolerance_percent)

    @property
    def reference_fastest_ms(self) -> float | None:
        """The reference workload's fastest run when these times were recorded (the machine's
        undisturbed speed then), or None where no reference was timed."""
        samples = [s for v in self.variants.values() for s in v.latency.reference_samples_ms]
        return min(samples) if samples else None


@dataclass(frozen=True)
class Baseline:
    """One case's stored expectations: the portable part, and a time record per machine class."""

    model: str
    dtype: str
    device: str
    threads: int
    variants: Mapping[str, VariantBaseline]
    #: machine class id (``DeviceInfo.class_id``) → what that class measured
    machines: Mapping[str, TimeRecord] = field(default_factory=dict)
    #: the tolerances the file was written with, as written (a record: the session's judge)
    tolerances: Mapping[str, float] = field(default_factory=dict)
    #: the case's scalar quantities (the instruction ratio)
    figures: Figures = field(default_factory=dict)

    def record_for(self, device: DeviceInfo) -> TimeRecord | None:
        """The time record of ``device``'s machine class, None when that class has none."""
        return self.machines.get(device.class_id)

    def deadline(self, device: DeviceInfo, fixed_s: float | None) -> Deadline:
        """The deadline of this case's runner calls on ``device`` (:mod:`pytest_sme2.measure.
        deadline`): from the slowest run of its machine class's record (the reference workload
        runs under the same deadline in every round), or, emulated, its largest instruction
        count."""
        record = self.record_for(device)
        slowest_ms = (
            max(
                max((times.latency.max_ms, *times.latency.reference_samples_ms))
                for times in record.variants.values()
            )
            if record is not None and record.variants
            else None
        )
        counts = [v.instructions for v in self.variants.values() if v.instructions]
        return case_deadline(
            fixed_s,
            time_meaningful=device.time_meaningful,
            slowest_ms=slowest_ms,
            instructions=max(counts) if counts else None,
        )


def notes_diff(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """``key: 'old' → 'new'`` for every note that differs."""
    return [
        f"{k}: {old.get(k)!r} → {new.get(k)!r}"
        for k in sorted({*old, *new})
        if old.get(k) != new.get(k)
    ]
