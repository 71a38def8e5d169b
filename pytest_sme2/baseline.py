"""Stored expectations per device: ``baselines/<device>/<model>-<dtype>[-t<threads>].json``.

One file per case holds two kinds of expectation:

* the portable part (top-level ``variants``, ``instruction_ratio``): operator structure, packed
  operators, SME2 kernels, emulated instruction counts — true on every machine of the device kind;
* ``machines``: one time record per machine class (``DeviceInfo.class_id``) — latency, category
  shares of time, speedup — judged only against a measurement of the same class.

The JSON is for people first: sorted keys, two-space indent, floats rounded to 4 significant
digits. Updating keeps every value that is still within tolerance and every other machine class's
record as it was, so ``git diff baselines/`` shows what really moved, and reports each change.
"""

from __future__ import annotations

import enum
import functools
import importlib.metadata
import json
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from pytest_sme2.analysis import Profile
from pytest_sme2.cache import write_atomic
from pytest_sme2.devices.base import DeviceInfo, describe_class
from pytest_sme2.errors import ConfigError
from pytest_sme2.kernels import sme2_kernels_by_kind
from pytest_sme2.ops import parse_op_name
from pytest_sme2.result import Measurement, VariantMeasurement
from pytest_sme2.stats import LatencyStats, Ratio
from pytest_sme2.validation import key_path, problem, validator

SCHEMA_VERSION = 2
#: The JSON Schema every baseline is validated against when read, and before it is written.
SCHEMA_FILE = "baseline_schema.json"
#: What an invalid baseline's line advises.
REGENERATE = "regenerate it with --sme2-update-baselines (which sets the invalid file aside)"


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
    #: the reference workload's latencies from the same rounds (see pytest_sme2.reference)
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


def _variant_baseline(vm: VariantMeasurement) -> VariantBaseline:
    prof = vm.profile
    counted = prof.counts_instructions
    return VariantBaseline(
        operators=operator_structure(prof),
        packed_operators=prof.packed_operators,
        instructions=vm.evidence.instructions if vm.evidence else None,
        sme2_kernels=vm.evidence.sme2_kernels if vm.evidence else (),
        operator_instructions=operator_instructions(prof) if counted else {},
        instruction_shares={c: stable(v) for c, v in prof.shares.items()} if counted else {},
        operator_sme2_kernels=operator_sme2_kernels(vm),
        init_instructions=vm.load.init_instructions if vm.load else None,
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
    machine class where the device's time means something."""
    return Baseline(
        model=m.model,
        dtype=m.dtype,
        device=m.device.name,
        threads=m.threads,
        variants={str(v): _variant_baseline(vm) for v, vm in m.variants.items()},
        instruction_ratio=stable(m.instruction_ratio) if m.instruction_ratio else None,
        machines={m.device.class_id: _time_record(m)} if m.device.time_meaningful else {},
        tolerances=tolerances,
    )


def to_json(b: Baseline) -> str:
    """The file's text; ``written_by`` names the pytest-sme2 that wrote it, so that a later one
    that meets a newer schema can say which version reads it."""
    doc = {"schema_version": SCHEMA_VERSION, "written_by": package_version(), **asdict(b)}
    for variant in doc["variants"].values():
        if not variant["operator_sme2_kernels"]:  # baselines without them keep their bytes
            del variant["operator_sme2_kernels"]
        for key in ("init_instructions", "planned_bytes"):  # nor do those made without these
            if variant[key] is None:
                del variant[key]
    for record in doc["machines"].values():
        if record["calibration"] is None:  # uncalibrated records keep the shape they always had
            del record["calibration"]
        for times in record["variants"].values():  # as do those of a runner without load figures
            for key in ("program_load_ms", "method_init_ms", "peak_rss_bytes"):
                if times[key] is None:
                    del times[key]
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


@functools.cache
def package_version() -> str:
    """This pytest-sme2's version, as installed."""
    return importlib.metadata.version("pytest-sme2")


class InvalidBaseline(ConfigError):
    """A baseline that cannot be used: unreadable, not JSON, or not what the schema allows.

    ``--sme2-update-baselines`` sets such a file aside and writes a fresh one (:func:`read`)."""

    def __init__(self, path: Path, problem: str, advice: str = REGENERATE) -> None:
        self.path, self.problem = path, problem
        super().__init__(f"{path}: {problem}; {advice}")


class NewerBaseline(ConfigError):
    """A baseline of a newer schema than this pytest-sme2 reads: never judged, never replaced
    (overwriting it would throw away what a newer pytest-sme2 recorded)."""


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    """The validator of ``baseline_schema.json`` (the package's copy), built once."""
    return validator(json.loads(resources.files("pytest_sme2").joinpath(SCHEMA_FILE).read_text()))


def schema_problem(doc: Any) -> str | None:
    """The one violation of the schema to tell a user (key path, value and rule), else None."""
    found = problem(_validator(), doc)
    return None if found is None else f"{key_path(found[0])}: {found[1]}"


def load(path: Path) -> Baseline | None:
    """The baseline at ``path``, None if there is none.

    A file that cannot be used is :class:`InvalidBaseline` (one line: the file, the key path, the
    value), one of a newer schema :class:`NewerBaseline`: validated against the schema before
    anything is built from it, so no stored value (NaN, a negative or zero latency, a string) can
    switch a gate off or end in a traceback.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:  # a directory, no permission, I/O, not text
        problem = getattr(err, "strerror", None) or err
        raise InvalidBaseline(
            path,
            f"cannot read the baseline ({problem})",
            "fix the path or point --sme2-baseline-dir elsewhere",
        ) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise InvalidBaseline(path, f"not valid JSON ({err.msg} at line {err.lineno})") from None
    except RecursionError:
        raise InvalidBaseline(path, "not a baseline (JSON nested too deeply)") from None
    version = doc.get("schema_version") if isinstance(doc, dict) else None
    if isinstance(version, int) and not isinstance(version, bool):
        if version > SCHEMA_VERSION:
            writer = doc.get("written_by")
            writer = (
                f"pytest-sme2 {writer}"
                if isinstance(writer, str)
                else f"a newer pytest-sme2 than {package_version()}"
            )
            raise NewerBaseline(
                f"{path}: baseline schema {version}, written by {writer}; this pytest-sme2 "
                f"({package_version()}) reads schema {SCHEMA_VERSION}: judge this case with "
                f"{writer} (the file is left as it is, --sme2-update-baselines included)"
            )
        if version < SCHEMA_VERSION:
            raise InvalidBaseline(
                path, f"baseline schema {version}, this pytest-sme2 reads {SCHEMA_VERSION}"
            )
    problem = schema_problem(doc)
    if problem is not None:
        raise InvalidBaseline(path, f"not a valid baseline: {problem}")
    return _from_doc(doc)


def _from_doc(doc: Mapping[str, Any]) -> Baseline:
    """The Baseline of a document the schema accepted (so every key it reads is there)."""
    return Baseline(
        model=doc["model"],
        dtype=doc["dtype"],
        device=doc["device"],
        threads=doc["threads"],
        variants={
            name: VariantBaseline(
                operators=dict(v["operators"]),
                packed_operators=tuple(v["packed_operators"]),
                instructions=v.get("instructions"),
                sme2_kernels=tuple(v.get("sme2_kernels", ())),
                operator_instructions=dict(v.get("operator_instructions", {})),
                instruction_shares=dict(v.get("instruction_shares", {})),
                operator_sme2_kernels={
                    kind: tuple(names) for kind, names in v.get("operator_sme2_kernels", {}).items()
                },
                init_instructions=v.get("init_instructions"),
                planned_bytes=v.get("planned_bytes"),
            )
            for name, v in doc["variants"].items()
        },
        instruction_ratio=doc.get("instruction_ratio"),
        machines={class_id: _record(record) for class_id, record in doc["machines"].items()},
        tolerances=Tolerances(**doc["tolerances"]),
    )


def _record(doc: Mapping[str, Any]) -> TimeRecord:
    variants = {}
    for name, v in doc["variants"].items():
        lat = v["latency"]
        variants[name] = VariantTimes(
            latency=LatencyBaseline(
                **{
                    **lat,
                    "samples_ms": tuple(lat["samples_ms"]),
                    "reference_samples_ms": tuple(lat.get("reference_samples_ms", ())),
                }
            ),
            shares=dict(v["shares"]),
            program_load_ms=v.get("program_load_ms"),
            method_init_ms=v.get("method_init_ms"),
            peak_rss_bytes=v.get("peak_rss_bytes"),
        )
    speedup = doc.get("speedup")
    calibration = doc.get("calibration")
    return TimeRecord(
        machine_class=dict(doc["machine_class"]),
        notes=dict(doc.get("notes", {})),
        variants=variants,
        speedup=SpeedupBaseline(**speedup) if speedup else None,
        calibration=Calibration(**calibration) if calibration else None,
    )


@dataclass(frozen=True)
class Stored:
    """What a case's baseline path holds, as the session uses it."""

    baseline: Baseline | None
    #: under ``--sme2-update-baselines``: the line saying where an invalid file was set aside
    set_aside: str | None = None


def read(path: Path, *, update: bool) -> Stored:
    """:func:`load`, and under ``update`` an invalid file set aside so a fresh one is written.

    Set aside when read, before the case is measured, rather than when the fresh one is saved: a
    measurement that then fails leaves the file under a name that says what it is, and the next
    session starts afresh instead of tripping over it again. A newer schema is never set aside.
    """
    try:
        return Stored(load(path))
    except InvalidBaseline as err:
        if not update:
            raise
        aside = path.with_name(f"{path.name}{INVALID_SUFFIX}{_utc_stamp()}")
        try:
            path.rename(aside)
        except OSError as move_err:
            raise ConfigError(
                f"{path}: {err.problem}; cannot set it aside as {aside.name} "
                f"({move_err.strerror or move_err}): move or delete it"
            ) from None
        return Stored(None, f"set aside the invalid baseline as {aside} ({err.problem})")


#: What a set-aside invalid baseline's name carries (``toy_cnn-fp32.json.invalid-<UTC time>``);
#: the repository's .gitignore keeps such files out of ``git add baselines/``.
INVALID_SUFFIX = ".invalid-"


def _utc_stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def save(path: Path, b: Baseline) -> None:
    """Write atomically: an interrupted run never leaves a half-written baseline, and one that
    cannot be written (a read-only directory, a full disk) leaves the stored file as it was and
    fails with one line naming the path. What would not be read back (a value outside the
    schema) is never written."""
    text = to_json(b)
    problem = schema_problem(json.loads(text))
    if problem is not None:
        raise ConfigError(f"{path}: not writing a baseline that would not validate: {problem}")
    try:
        write_atomic(path, text)
    except OSError as err:
        raise ConfigError(
            f"{path}: cannot write the baseline ({err.strerror or err}); the stored file, if any, "
            "is unchanged: make the directory writable or point --sme2-baseline-dir elsewhere"
        ) from None


def merge(old: Baseline | None, new: Baseline, tol: Tolerances) -> tuple[Baseline, tuple[str, ...]]:
    """``new``, keeping every value still within tolerance ``tol`` of ``old``; and the changes.

    Structure is compared by :func:`structure_diff`, every other quantity by its "moved" rule
    (:class:`Move`), the gates' own. Only the time record of ``new``'s machine
    class is touched: every other class's record is kept as it was, to the byte. Returns the
    baseline to store and one line per change.
    """
    if old is None:
        return new, ("new baseline",)
    changes: list[str] = []
    variants: dict[str, VariantBaseline] = {}
    for name, nv in new.variants.items():
        ov = old.variants.get(name)
        if ov is None:
            changes.append(f"{name}: new variant")
            variants[name] = nv
            continue
        changes += [f"{name} {line}" for line in structure_diff(ov, nv)]
        if not ov.operator_sme2_kernels and nv.operator_sme2_kernels:
            changes.append(f"{name} SME2 kernels per operator kind recorded")
        changes += [f"{name} {line}" for line in kernel_selection_diff(ov, nv)[0]]
        variants[name] = nv
        if _replaced(ov.instructions, nv.instructions, instructions_move, tol):
            changes.append(f"{name} instructions/inference {ov.instructions} → {nv.instructions}")
        elif not ov.instruction_shares and nv.instruction_shares:
            changes.append(f"{name} instructions per operator and category shares recorded")
        elif moved_shares(nv.instruction_shares, ov.instruction_shares, tol):
            changes.append(f"{name} instruction shares moved beyond ±{tol.share_points:g} points")
        elif ov.operator_instructions.keys() == nv.operator_instructions.keys():
            # within tolerance: the instruction counts stay as they were, to the byte
            variants[name] = replace(
                nv,
                instructions=ov.instructions,
                operator_instructions=ov.operator_instructions,
                instruction_shares=ov.instruction_shares,
            )
        changes += [f"{name} {line}" for line in _load_changes(ov, nv, tol)]
        if not _replaced(ov.init_instructions, nv.init_instructions, instructions_move, tol):
            variants[name] = replace(variants[name], init_instructions=ov.init_instructions)
    changes += [
        f"{name}: variant no longer measured" for name in old.variants if name not in new.variants
    ]
    instruction_ratio = old.instruction_ratio
    if _replaced(old.instruction_ratio, new.instruction_ratio, instruction_ratio_move, tol):
        changes.append(f"instruction ratio {old.instruction_ratio}× → {new.instruction_ratio}×")
        instruction_ratio = new.instruction_ratio
    machines = dict(old.machines)
    for class_id, record in new.machines.items():
        machines[class_id], record_changes = _merge_record(old.machines.get(class_id), record, tol)
        changes += [f"[{class_id}] {line}" for line in record_changes]
    merged = replace(
        new,
        variants=variants,
        instruction_ratio=instruction_ratio,
        machines=machines,
        tolerances=tol,
    )
    return merged, tuple(changes)


def _load_changes(old: VariantBaseline, new: VariantBaseline, tol: Tolerances) -> list[str]:
    """What an update records of a variant's load: init instructions that appeared or moved
    beyond the instruction tolerance, and a planned memory that changed at all (exact)."""
    changes = []
    if _replaced(old.init_instructions, new.init_instructions, instructions_move, tol):
        changes.append(f"init instructions {old.init_instructions} → {new.init_instructions}")
    if old.planned_bytes != new.planned_bytes:
        changes.append(f"planned memory {old.planned_bytes} → {new.planned_bytes} bytes")
    return changes


def _replaced(
    old: float | None,
    new: float | None,
    rule: Callable[[float, float, Tolerances], Move],
    tol: Tolerances,
) -> bool:
    """Whether a stored number gives way to the new one: it appeared, vanished or moved by
    ``rule``."""
    if old is None or new is None:
        return old != new
    return rule(new, old, tol) is not Move.WITHIN


def _merge_record(
    old: TimeRecord | None, new: TimeRecord, tol: Tolerances
) -> tuple[TimeRecord, list[str]]:
    """One machine class's record, updated where a time moved beyond tolerance; the notes follow
    the times (they say what the machine was when the kept times were taken)."""
    if old is None:
        return new, [f"new time record: {describe_class(new.machine_class)}"]
    changes: list[str] = []
    variants: dict[str, VariantTimes] = {}
    for name, nv in new.variants.items():
        ov = old.variants.get(name)
        if ov is None:
            changes.append(f"{name}: new variant")
            variants[name] = nv
            continue
        latency = ov.latency
        if latency_move(nv.latency, ov.latency, old.latency_percent(tol)):
            changes.append(
                f"{name} fastest run {ov.latency.min_ms} → {nv.latency.min_ms} ms "
                f"(median {ov.latency.median_ms} → {nv.latency.median_ms} ms)"
            )
            latency = nv.latency
        shares = dict(ov.shares)
        for cat in moved_shares(nv.shares, ov.shares, tol):
            changes.append(
                f"{name} {cat} share {100 * ov.shares.get(cat, 0.0):.1f}% → "
                f"{100 * nv.shares[cat]:.1f}%"
            )
            shares[cat] = nv.shares[cat]
        load_lines, times = _merge_load_times(ov, nv, tol)
        changes += [f"{name} {line}" for line in load_lines]
        variants[name] = replace(times, latency=latency, shares=shares)
    speedup = old.speedup
    if new.speedup is None or old.speedup is None:
        if new.speedup != old.speedup:
            changes.append(
                f"speedup {old.speedup and old.speedup.value} → {new.speedup and new.speedup.value}"
            )
        speedup = new.speedup
    elif speedup_move(new.speedup, old.speedup, tol):
        changes.append(f"speedup {old.speedup.value}× → {new.speedup.value}×")
        speedup = new.speedup
    notes = old.notes
    if changes:
        changes += [f"note {line}" for line in notes_diff(old.notes, new.notes)]
        notes = new.notes
    merged = replace(
        new, notes=notes, variants=variants, speedup=speedup, calibration=old.calibration
    )
    return merged, changes


def _merge_load_times(
    old: VariantTimes, new: VariantTimes, tol: Tolerances
) -> tuple[list[str], VariantTimes]:
    """A variant's program load, method init and peak resident memory as an update stores them:
    each the new one where it appeared or moved beyond its tolerance, else the stored one (a
    record written before they were kept gets them); and one line per change."""
    changes: list[str] = []
    kept = old
    for key, what, rule in (
        ("program_load_ms", "program load ms", init_time_move),
        ("method_init_ms", "method init ms", init_time_move),
        ("peak_rss_bytes", "peak resident memory bytes", peak_rss_move),
    ):
        before, after = getattr(old, key), getattr(new, key)
        if _replaced(before, after, rule, tol):
            changes.append(f"{what} {before} → {after}")
            kept = replace(kept, **{key: after})
    return changes, kept


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
