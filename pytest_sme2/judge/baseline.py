"""Stored expectations per device: ``baselines/<device>/<model>-<dtype>[-t<threads>].json``.

One file per case holds two kinds of expectation:

* the portable part (top-level ``variants``, ``instruction_ratio``): operator structure, packed
  operators, SME2 kernels, emulated instruction counts — true on every machine of the device kind;
* ``machines``: one time record per machine class (``DeviceInfo.class_id``) — latency, category
  shares of time, speedup — judged only against a measurement of the same class.

The JSON is for people first: sorted keys, two-space indent, floats rounded to 4 significant
digits. Updating keeps every value that is still within tolerance and every other machine class's
record as it was, so ``git diff baselines/`` shows what really moved, and reports each change.

This module holds the baseline's types (their parts, a variant's record and a machine class's
times, in :mod:`pytest_sme2.judge.baseline_parts`), how a measurement becomes one, and the "moved"
rules the gates and the update share; reading and writing the files is
:mod:`pytest_sme2.judge.baseline_file`, the update's merge :mod:`pytest_sme2.judge.baseline_update`.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_sme2.analysis.kernels import sme2_kernels_by_kind
from pytest_sme2.analysis.ops import parse_op_name
from pytest_sme2.analysis.profile import Profile
from pytest_sme2.analysis.stats import LatencyStats, Ratio
from pytest_sme2.judge.baseline_parts import (
    LatencyBaseline,
    SpeedupBaseline,
    Tolerances,
    VariantBaseline,
    VariantTimes,
    stable,
)
from pytest_sme2.measure.deadline import Deadline, case_deadline
from pytest_sme2.records.device import DeviceInfo
from pytest_sme2.records.measurement import Measurement, VariantMeasurement


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


#: The statistic the latency gate judges (``LatencyBaseline.change_from``); a stored calibration
#: of any other is not applied.
LATENCY_STATISTIC = "fastest-run/reference-fastest-run"


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
    instruction_ratio: float | None = None
    #: machine class id (``DeviceInfo.class_id``) → what that class measured
    machines: Mapping[str, TimeRecord] = field(default_factory=dict)
    tolerances: Tolerances = field(default_factory=Tolerances)

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


def baseline_path(directory: Path, device: str, model: str, dtype: str, threads: int) -> Path:
    suffix = "" if threads == 1 else f"-t{threads}"
    return directory / device / f"{model}-{dtype}{suffix}.json"


def latency_baseline(samples: Sequence[float], reference: Sequence[float]) -> LatencyBaseline:
    """Latency samples (and the reference workload's beside them) as a baseline stores them."""
    lat = LatencyStats.of(samples)
    return LatencyBaseline(
        median_ms=stable(lat.median_ms),
        mean_ms=stable(lat.mean_ms),
        min_ms=stable(lat.min_ms),
        max_ms=stable(lat.max_ms),
        std_ms=stable(lat.std_ms),
        samples_ms=tuple(stable(s) for s in samples),
        reference_samples_ms=tuple(stable(s) for s in reference),
    )


def portable_name(operator: str) -> str:
    """An operator kind as every machine of the device kind names it (``ops.portable_key``)."""
    return parse_op_name(operator).portable_key


def operator_structure(prof: Profile) -> dict[str, float]:
    """Operator kind (portable name) → occurrences per run: the structure a baseline stores."""
    counts: Counter[str] = Counter()
    for op in prof.operators:
        counts[portable_name(op.name)] += op.count
    return {name: stable(count / prof.runs) for name, count in counts.items()}


def operator_instructions(prof: Profile) -> dict[str, int]:
    """Operator kind (portable name) → instructions per inference, of an instruction profile."""
    counts: Counter[str] = Counter()
    for op in prof.operators:
        counts[portable_name(op.name)] += round(op.per_run_ms * 1e6)  # M instr → instructions
    return dict(sorted(counts.items()))


def _variant_baseline(vm: VariantMeasurement, counts: bool) -> VariantBaseline:
    """One variant's stored part; its instruction counts only where ``counts`` (repeatable)."""
    prof = vm.profile
    counted = prof.counts_instructions and counts
    return VariantBaseline(
        operators=operator_structure(prof),
        packed_operators=prof.packed_operators,
        instructions=vm.evidence.instructions if vm.evidence and counts else None,
        sme2_kernels=vm.evidence.sme2_kernels if vm.evidence else (),
        operator_instructions=operator_instructions(prof) if counted else {},
        instruction_shares={c: stable(v) for c, v in prof.shares.items()} if counted else {},
        operator_sme2_kernels=operator_sme2_kernels(vm),
        init_instructions=vm.load.init_instructions if vm.load and counts else None,
        planned_bytes=vm.load.planned_bytes if vm.load else None,
    )


def operator_sme2_kernels(vm: VariantMeasurement) -> dict[str, tuple[str, ...]]:
    """Operator kind (portable name) → the SME2 kernels that ran in it, from the variant's
    kernels per operator; {} where the device does not count them."""
    if vm.evidence is None or not vm.evidence.operator_kernels:
        return {}
    kinds: dict[str, set[str]] = {}
    for kind, names in sme2_kernels_by_kind(vm.evidence.operator_kernels).items():
        kinds.setdefault(portable_name(kind), set()).update(names)
    return {kind: tuple(sorted(names)) for kind, names in sorted(kinds.items())}


def speedup_baseline(s: Ratio) -> SpeedupBaseline:
    """A measured speedup and its interval as a baseline stores them."""
    return SpeedupBaseline(stable(s.value), stable(s.low), stable(s.high))


def _time_record(m: Measurement) -> TimeRecord:
    comparison = m.comparison
    speedup = speedup_baseline(comparison.speedup) if comparison is not None else None
    return TimeRecord(
        machine_class=dict(m.device.machine_class),
        notes=m.device.notes,
        variants={
            str(v): VariantTimes(
                latency=latency_baseline(vm.latencies_ms, m.reference_ms),
                shares={c: stable(s) for c, s in vm.profile.shares.items()},
                program_load_ms=_stable_or_none(vm.load.program_load_ms if vm.load else None),
                method_init_ms=_stable_or_none(vm.load.method_init_ms if vm.load else None),
                peak_rss_bytes=vm.load.peak_rss_bytes if vm.load else None,
            )
            for v, vm in m.variants.items()
        },
        speedup=speedup,
    )


def _stable_or_none(value: float | None) -> float | None:
    return None if value is None else stable(value)


def from_measurement(m: Measurement, tolerances: Tolerances) -> Baseline:
    """The baseline a measurement would store: its portable part, and a time record for its
    machine class where the device's time means something; no instruction counts where an
    emulator counted a thread pool (``Measurement.emulated_threads``: they vary run to run)."""
    counts = not m.emulated_threads
    return Baseline(
        model=m.model,
        dtype=m.dtype,
        device=m.device.name,
        threads=m.threads,
        variants={str(v): _variant_baseline(vm, counts) for v, vm in m.variants.items()},
        instruction_ratio=stable(m.instruction_ratio) if m.instruction_ratio and counts else None,
        machines={m.device.class_id: _time_record(m)} if m.device.time_meaningful else {},
        tolerances=tolerances,
    )


def notes_diff(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """``key: 'old' → 'new'`` for every note that differs."""
    return [
        f"{k}: {old.get(k)!r} → {new.get(k)!r}"
        for k in sorted({*old, *new})
        if old.get(k) != new.get(k)
    ]


class Move(enum.IntEnum):
    """How a measured quantity stands against its stored value: within tolerance, or moved."""

    FELL = -1
    WITHIN = 0
    ROSE = 1


# The one "moved" rule per quantity. A gate fails on a move in the bad direction (and reports one
# in the good direction as news); an update replaces the stored value on a move either way. Both
# apply it to the measurement in its baseline form (``from_measurement``: rounded by ``stable``),
# so they cannot disagree at the edge of a tolerance.


def _relative_move(now: float, stored: float, percent: float) -> Move:
    """Moved when ``now`` differs from ``stored`` by more than ``percent`` of ``stored``."""
    if stored == 0:
        return Move.ROSE if now > 0 else Move.WITHIN
    change = (now / stored - 1) * 100
    return Move.ROSE if change > percent else Move.FELL if change < -percent else Move.WITHIN


def latency_move(now: LatencyBaseline, stored: LatencyBaseline, percent: float) -> Move:
    """The fastest run relative to the machine's speed, against the stored one
    (``LatencyBaseline.change_from`` says why), beyond ``percent`` (the record's tolerance,
    ``TimeRecord.latency_percent``): a rise fails the gate, a fall is the new floor."""
    return _relative_move(now.change_from(stored), 1.0, percent)


def share_move(now: float, stored: float, tol: Tolerances) -> Move:
    """A category's share (of time or of instructions), beyond ``share_points`` either way."""
    points = (now - stored) * 100
    return (
        Move.ROSE
        if points > tol.share_points
        else Move.FELL
        if points < -tol.share_points
        else Move.WITHIN
    )


def moved_shares(
    now: Mapping[str, float], stored: Mapping[str, float], tol: Tolerances
) -> list[str]:
    """The categories whose share moved (:func:`share_move`), in ``now``'s order."""
    return [c for c, share in now.items() if share_move(share, stored.get(c, 0.0), tol)]


def instructions_move(now: float, stored: float, tol: Tolerances) -> Move:
    """Instructions per inference, exact under emulation: beyond ``instruction_percent``."""
    return _relative_move(now, stored, tol.instruction_percent)


def init_time_move(now: float, stored: float, tol: Tolerances) -> Move:
    """The fastest program load or method init of a variant, in ms: beyond ``init_time_percent``
    (raw time: the runner times no reference workload beside it)."""
    return _relative_move(now, stored, tol.init_time_percent)


def peak_rss_move(now: float, stored: float, tol: Tolerances) -> Move:
    """The runner's peak resident memory: beyond ``peak_rss_percent``."""
    return _relative_move(now, stored, tol.peak_rss_percent)


def instruction_ratio_move(now: float, stored: float, tol: Tolerances) -> Move:
    """Instructions off ÷ on: the ratio of two exact counts, judged like them."""
    return _relative_move(now, stored, tol.instruction_percent)


def speedup_move(now: SpeedupBaseline, stored: SpeedupBaseline, tol: Tolerances) -> Move:
    """Moved when the new 95 % interval lies wholly beyond ``speedup_percent`` of the stored
    speedup: one noisy median never moves it, a real change of the kernels does."""
    limit = tol.speedup_percent / 100
    if now.high < stored.value * (1 - limit):
        return Move.FELL
    if now.low > stored.value * (1 + limit):
        return Move.ROSE
    return Move.WITHIN


def structure_diff(stored: VariantBaseline, now: VariantBaseline) -> list[str]:
    """What changed in a variant's portable structure: operator kinds and counts (stored names
    made portable, so CPUs that spell dynamic int8 differently agree), packed operators and
    executed SME2 kernels, compared exactly; [] when nothing did."""
    diff = operator_diff(
        {portable_name(k): stable(v) for k, v in stored.operators.items()}, now.operators
    )
    if tuple(stored.packed_operators) != tuple(now.packed_operators):
        diff.append(
            f"packed operators {list(stored.packed_operators)} → {list(now.packed_operators)}"
        )
    if tuple(stored.sme2_kernels) != tuple(now.sme2_kernels):
        diff.append(f"SME2 kernels {list(stored.sme2_kernels)} → {list(now.sme2_kernels)}")
    return diff


def kernel_selection_diff(
    stored: VariantBaseline, now: VariantBaseline
) -> tuple[list[str], list[str]]:
    """How the SME2 kernels per operator kind changed, one line per kind naming the kernels
    (kinds matched without their packing, ``PF32`` = ``F32``: a kind that fell back to NEON is
    renamed); and the stored kinds that now run no SME2 kernel at all although the model still
    has them (a kind the user removed from the model is reported, not counted as gone). ([], [])
    where ``stored`` has none (a baseline written before they were recorded)."""
    if not stored.operator_sme2_kernels:
        return [], []

    def unpacked(kinds: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, tuple[str, ...]]]:
        return {parse_op_name(kind).unpacked_key: (kind, names) for kind, names in kinds.items()}

    old, new = unpacked(stored.operator_sme2_kernels), unpacked(now.operator_sme2_kernels)
    present = {parse_op_name(kind).unpacked_key for kind in now.operators}
    lines, gone = [], []
    for key in sorted({*old, *new}):
        kind, before = old[key] if key in old else (new[key][0], ())
        after = new[key][1] if key in new else ()
        if before == after:
            continue
        removed = [n for n in before if n not in after]
        added = [n for n in after if n not in before]
        if not after and key not in present:  # the user's model no longer has this kind
            lines.append(f"{kind}: no longer in the model (it ran {', '.join(removed)})")
        elif not after:
            gone.append(kind)
            lines.append(f"{kind}: SME2 kernel {', '.join(removed)} no longer runs, none does")
        elif not before:
            lines.append(f"{kind}: now runs SME2 kernel {', '.join(added)}")
        else:
            lines.append(
                f"{kind}: SME2 kernel {', '.join(removed) or '—'} → {', '.join(added) or '—'}"
            )
    return lines, gone


def operator_diff(old: Mapping[str, float], new: Mapping[str, float]) -> list[str]:
    """Compact lines: ``+ name ×n/run``, ``− name ×n/run``, ``name ×a → ×b/run``."""
    lines = []
    for name in sorted({*old, *new}):
        a, b = old.get(name), new.get(name)
        if a == b:
            continue
        if a is None:
            lines.append(f"+ {name} ×{b:g}/run")
        elif b is None:
            lines.append(f"− {name} ×{a:g}/run")
        else:
            lines.append(f"{name} ×{a:g} → ×{b:g}/run")
    return lines
