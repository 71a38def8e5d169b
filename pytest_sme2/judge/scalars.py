"""The built-in scalar quantities, one :class:`~pytest_sme2.judge.scalar.ScalarSpec` each:
everything about a quantity is its entry here (how it is measured, stored, merged, judged, said).

Why load and memory are gated: XNNPACK and KleidiAI pack the weights when the method is
initialised, and a kernel or library update can make that several times dearer while inference
stays as it was (a Llama's load went from 13.8 s to 30.2 s on a phone, pytorch/executorch#5162).
Init counted in guest instructions (qemu-sme2) is exact like an inference's count, so it is judged
with the same instruction tolerance and no re-measure; the planned memory follows from the program
alone. Where time means something, the fastest method init of the timing runs is judged with its
own tolerance and, being wall-clock time, confirmed by a fresh measurement; the runner's peak
resident memory, which holds the machine's libraries, with ``peak_rss_percent``, not re-measured
(a busy neighbour does not move it).

In the order the history page draws them.
"""

from __future__ import annotations

from collections.abc import Callable

from pytest_sme2.judge.moves import Move
from pytest_sme2.judge.scalar import Place, ScalarSpec, Sentences, Trend, percent_change
from pytest_sme2.records.measurement import MIB, VariantMeasurement

_NULL_OR_COUNT = {"oneOf": [{"type": "null"}, {"$ref": "#/$defs/count"}]}
_BEYOND = "beyond the {percent:g}% tolerance"


def _load(figure: str) -> Callable[[VariantMeasurement], float | None]:
    """A figure of the variant's load (:class:`~pytest_sme2.records.measurement.LoadMeasurement`),
    None where the runner reported none."""
    return lambda vm: None if vm.load is None else getattr(vm.load, figure)


def _grew(now: float, stored: float, percent: float) -> Move:
    """An exact size: growth beyond ``percent`` fails; any shrinking is news."""
    if now > stored * (1 + percent / 100):
        return Move.ROSE
    return Move.FELL if now < stored else Move.WITHIN


#: Instructions off ÷ on: the ratio of two exact counts, judged like them, without an interval.
INSTRUCTION_RATIO = ScalarSpec(
    name="instruction-ratio-baseline",
    key="instruction_ratio",
    place=Place.CASE,
    schema={"instruction_ratio": {"oneOf": [{"type": "null"}, {"$ref": "#/$defs/positive"}]}},
    read=lambda m: m.instruction_ratio or None,
    tolerance=lambda t: t.instruction_percent,
    change="instruction ratio {before}× → {after}×",
    sentences=Sentences(
        numbers=lambda stored, now: "",
        worse="SME2 instruction ratio {measured:.2f}× fell below the baseline {stored:g}× "
        + _BEYOND
        + " for {case}",
        better="SME2 instruction ratio {measured:.2f}× rose above the baseline {stored:g}× "
        + _BEYOND
        + ": {record_it}",
        same="SME2 instruction ratio {measured:.2f}× vs the baseline {stored:g}×",
    ),
    worse=Move.FELL,
    rounded=True,
    counted=True,
    keep_null=True,
)

#: The fastest runner process's program load: kept beside the method init, not judged.
PROGRAM_LOAD = ScalarSpec(
    name="program-load",
    key="program_load_ms",
    place=Place.TIME,
    schema={
        "program_load_ms": {
            "description": "the fastest runner process's program load (read and verify the .pte)",
            "$ref": "#/$defs/non_negative",
        }
    },
    read=_load("program_load_ms"),
    tolerance=lambda t: t.init_time_percent,
    change="program load ms {before} → {after}",
    rounded=True,
)

#: The fastest method init of the timing runs (raw time: no reference workload runs beside it).
METHOD_INIT = ScalarSpec(
    name="init-time",
    key="method_init_ms",
    place=Place.TIME,
    schema={
        "method_init_ms": {
            "description": "the fastest runner process's method init (memory plan, weight packing)",
            "$ref": "#/$defs/non_negative",
        }
    },
    read=_load("method_init_ms"),
    tolerance=lambda t: t.init_time_percent,
    change="method init ms {before} → {after}",
    sentences=Sentences(
        numbers=lambda then, now: f"{then:g} → {now:g} ms{percent_change(then, now)}",
        worse="method init (fastest of the runs) of {case} ({variant}) rose {numbers}, "
        + _BEYOND
        + " of this machine class's record",
        better="method init (fastest of the runs) ({variant}) fell {numbers}: {record_it}",
        same="method init (fastest of the runs) ({variant}) {numbers}",
    ),
    rounded=True,
    wall_clock=True,
    unrecorded="init time",
    trend=Trend("init-ms", "method init ms"),
)

#: The method's init (weight packing) in guest instructions, where the device counts them.
INIT_INSTRUCTIONS = ScalarSpec(
    name="init-instructions",
    key="init_instructions",
    place=Place.VARIANT,
    schema={
        "init_instructions": {
            "description": "guest instructions of the method's init (weight packing), where "
            "counted",
            **_NULL_OR_COUNT,
        }
    },
    read=_load("init_instructions"),
    tolerance=lambda t: t.instruction_percent,
    change="init instructions {before} → {after}",
    sentences=Sentences(
        numbers=lambda then, now: f"{then:,} → {now:,} instructions{percent_change(then, now, 2)}",
        worse="method init of {case} ({variant}) rose {numbers}, "
        + _BEYOND
        + ": the weights are packed at a higher cost (a library or kernel update, a changed "
        "layer)",
        better="cheaper method init ({variant}): {numbers}: {record_it}",
        same="method init ({variant}) {numbers}",
    ),
    counted=True,
    trend=Trend("init-instructions", "method init instructions"),
)

#: The program's memory plan: exact, the same on every machine of the device kind.
PLANNED_MEMORY = ScalarSpec(
    name="planned-memory",
    key="planned_bytes",
    place=Place.VARIANT,
    schema={
        "planned_bytes": {
            "description": "bytes of the program's memory plan: activations, inputs, mutable "
            "buffers",
            "oneOf": [{"type": "null"}, {"type": "integer", "minimum": 0}],
        }
    },
    read=_load("planned_bytes"),
    tolerance=lambda t: t.instruction_percent,
    change="planned memory {before} → {after} bytes",
    sentences=Sentences(
        numbers=lambda then, now: f"{then / MIB:,.2f} → {now / MIB:,.2f} MiB",
        worse="planned memory of {case} ({variant}) grew {numbers}, " + _BEYOND,
        better="less planned memory ({variant}): {numbers}: {record_it}",
        same="planned memory ({variant}) {numbers}",
    ),
    moved=_grew,
    exact_update=True,
    trend=Trend("planned", "planned memory MiB", 1 / MIB),
)

#: The runner's own peak resident memory, the largest of its processes'. Records written before
#: it hold ``peak_rss_bytes``, the pytest session's high-water mark (``ru_maxrss`` crosses exec):
#: read as no figure at all, so the gate says "not judged … --sme2-update-baselines records it".
PEAK_MEMORY = ScalarSpec(
    name="peak-memory",
    key="runner_peak_rss_bytes",
    place=Place.TIME,
    schema={
        "runner_peak_rss_bytes": {
            "description": "the largest of the runner processes' own peak resident memory "
            "(VmHWM, task_info)",
            "$ref": "#/$defs/count",
        },
        "peak_rss_bytes": {
            "description": "obsolete, never judged: what runners before it reported (ru_maxrss, "
            "which a process started by vfork inherits from the pytest session); "
            "--sme2-update-baselines replaces it with runner_peak_rss_bytes",
            "$ref": "#/$defs/count",
        },
    },
    read=_load("peak_rss_bytes"),
    tolerance=lambda t: t.peak_rss_percent,
    change="peak resident memory bytes {before} → {after}",
    sentences=Sentences(
        numbers=lambda then, now: (
            f"{then / MIB:,.1f} → {now / MIB:,.1f} MiB" + percent_change(then, now)
        ),
        worse="peak resident memory of {case} ({variant}) rose {numbers}, "
        + _BEYOND
        + " of this machine class's record",
        better="peak resident memory ({variant}) fell {numbers}: {record_it}",
        same="peak resident memory ({variant}) {numbers}",
    ),
    unrecorded="peak resident memory",
    trend=Trend("peak-rss", "peak resident memory MiB", 1 / MIB),
)

SCALARS = (
    INSTRUCTION_RATIO,
    PROGRAM_LOAD,
    METHOD_INIT,
    INIT_INSTRUCTIONS,
    PLANNED_MEMORY,
    PEAK_MEMORY,
)
