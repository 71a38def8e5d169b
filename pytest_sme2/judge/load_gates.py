"""Load and memory gates: method init and planned memory against the baseline's portable part,
method init time and peak resident memory against the time record of the measuring machine's
class, and the ``max_init_ms`` ceiling of the ``sme2`` marker.

Why gated: XNNPACK and KleidiAI pack the weights when the method is initialised, and a kernel
or library update can make that several times dearer while inference stays as it was (a Llama's
load went from 13.8 s to 30.2 s on a phone, pytorch/executorch#5162). Init counted in guest
instructions (qemu-sme2) is exact like an inference's count, so it is judged with the same
instruction tolerance and no re-measure; the planned memory follows from the program alone.
Where time means something, the fastest method init of the timing runs is judged with its own
tolerance (``Tolerances.init_time_percent``) and, being wall-clock time, confirmed by a fresh
measurement (its gate is in ``gates.TIME_GATES``); the runner's peak resident memory, which holds
the machine's libraries, with ``peak_rss_percent``, not re-measured (a busy neighbour does not move
it). A baseline or time record written before a quantity was kept is judged without it, saying
so, and gets it on update.
"""

from __future__ import annotations

from pytest_sme2.judge.baseline import (
    Baseline,
    Move,
    Tolerances,
    VariantTimes,
    init_time_move,
    instructions_move,
    peak_rss_move,
)
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.wording import RECORD_IT, case_name
from pytest_sme2.records.measurement import MIB, Measurement
from pytest_sme2.records.verdict import Status, Verdict


def load_verdicts(
    m: Measurement, now: Baseline, baseline: Baseline | None, exp: Expectations, tol: Tolerances
) -> list[Verdict]:
    """Every load gate's verdict for ``m`` (none for a variant without load figures)."""
    verdicts = _max_init(m, exp)
    if baseline is None:
        return verdicts
    for variant in m.variants:
        stored, measured = baseline.variants.get(str(variant)), now.variants[str(variant)]
        if stored is None:
            continue
        if stored.init_instructions and measured.init_instructions is not None:
            verdicts.append(
                _init(m, str(variant), measured.init_instructions, stored.init_instructions, tol)
            )
        if stored.planned_bytes is not None and measured.planned_bytes is not None:
            verdicts.append(
                _planned(m, str(variant), measured.planned_bytes, stored.planned_bytes, tol)
            )
    return verdicts + _timed(m, now, baseline, tol)


#: The gates judged against the time record; ``INIT_TIME`` is wall-clock (``gates.TIME_GATES``).
INIT_TIME, PEAK_MEMORY = "init-time", "peak-memory"


def _timed(m: Measurement, now: Baseline, baseline: Baseline, tol: Tolerances) -> list[Verdict]:
    """Method init time and peak resident memory per variant against the time record of the
    measuring machine's class (none where it has none: ``gates`` says the time gates were not
    judged), and one "not judged" verdict per quantity the record was written without."""
    record = baseline.record_for(m.device)
    if not m.device.time_meaningful or record is None:
        return []
    verdicts: list[Verdict] = []
    unrecorded: dict[str, str] = {}
    for variant, measured in now.machines[m.device.class_id].variants.items():
        stored = record.variants.get(variant)
        if stored is None:
            continue
        for gate, what in ((INIT_TIME, "init time"), (PEAK_MEMORY, "peak resident memory")):
            judged = _judge_timed(m, variant, gate, measured, stored, tol)
            if judged is not None:
                verdicts.append(judged)
            elif _value(measured, gate) is not None:
                unrecorded[gate] = what
    verdicts += [
        Verdict(
            gate,
            Status.SKIP,
            f"{what} of {case_name(m)} not judged: the time record has no {what}; "
            "--sme2-update-baselines records it",
        )
        for gate, what in unrecorded.items()
    ]
    return verdicts


def _value(times: VariantTimes, gate: str) -> float | None:
    return times.method_init_ms if gate == INIT_TIME else times.peak_rss_bytes


def _judge_timed(
    m: Measurement,
    variant: str,
    gate: str,
    measured: VariantTimes,
    stored: VariantTimes,
    tol: Tolerances,
) -> Verdict | None:
    """One variant's method init time or peak resident memory against the record's, by the
    "moved" rule an update uses; None where either side has no value."""
    now, then = _value(measured, gate), _value(stored, gate)
    if now is None or then is None:
        return None
    change = f" ({100 * (now / then - 1):+.1f}%)" if then else ""
    if gate == INIT_TIME:
        move, percent = init_time_move(now, then, tol), tol.init_time_percent
        what = "method init (fastest of the runs)"
        numbers = f"{then:g} → {now:g} ms{change}"
    else:
        move, percent = peak_rss_move(now, then, tol), tol.peak_rss_percent
        what = "peak resident memory"
        numbers = f"{then / MIB:,.1f} → {now / MIB:,.1f} MiB{change}"
    name = f"{gate}[{variant}]"
    if move is Move.ROSE:
        return Verdict(
            name,
            Status.FAIL,
            f"{what} of {case_name(m)} ({variant}) rose {numbers}, beyond the {percent:g}% "
            "tolerance of this machine class's record",
        )
    if move is Move.FELL:
        return Verdict(name, Status.PASS, f"{what} ({variant}) fell {numbers}: {RECORD_IT}")
    return Verdict(name, Status.PASS, f"{what} ({variant}) {numbers}")


def _init(m: Measurement, variant: str, now: int, stored: int, tol: Tolerances) -> Verdict:
    counts = f"{stored:,} → {now:,} instructions ({100 * (now / stored - 1):+.2f}%)"
    gate = f"init-instructions[{variant}]"
    move = instructions_move(now, stored, tol)
    if move is Move.ROSE:
        return Verdict(
            gate,
            Status.FAIL,
            f"method init of {case_name(m)} ({variant}) rose {counts}, beyond the "
            f"{tol.instruction_percent:g}% tolerance: the weights are packed at a higher cost "
            "(a library or kernel update, a changed layer)",
        )
    if move is Move.FELL:
        return Verdict(gate, Status.PASS, f"cheaper method init ({variant}): {counts}: {RECORD_IT}")
    return Verdict(gate, Status.PASS, f"method init ({variant}) {counts}")


def _planned(m: Measurement, variant: str, now: int, stored: int, tol: Tolerances) -> Verdict:
    """The program's memory plan: exact, so growth beyond the instruction tolerance fails."""
    sizes = f"{stored / MIB:,.2f} → {now / MIB:,.2f} MiB"
    gate = f"planned-memory[{variant}]"
    if now > stored * (1 + tol.instruction_percent / 100):
        return Verdict(
            gate,
            Status.FAIL,
            f"planned memory of {case_name(m)} ({variant}) grew {sizes}, beyond the "
            f"{tol.instruction_percent:g}% tolerance",
        )
    if now < stored:
        return Verdict(gate, Status.PASS, f"less planned memory ({variant}): {sizes}: {RECORD_IT}")
    return Verdict(gate, Status.PASS, f"planned memory ({variant}) {sizes}")


def _max_init(m: Measurement, exp: Expectations) -> list[Verdict]:
    """``max_init_ms``: each variant's fastest method init under the ceiling, where time means
    something; skipped, saying why, where it does not."""
    if exp.max_init_ms is None:
        return []
    if not m.device.time_meaningful:
        reason = m.device.limits.get("latency", f"{m.device.name}'s time is not meaningful")
        return [Verdict("max-init", Status.SKIP, f"max_init_ms not judged: {reason}")]
    verdicts = []
    for variant, vm in m.variants.items():
        init = vm.load.method_init_ms if vm.load else None
        if init is None:
            continue
        ok = init <= exp.max_init_ms
        verdicts.append(
            Verdict(
                f"max-init[{variant}]",
                Status.PASS if ok else Status.FAIL,
                f"method init of {case_name(m)} ({variant}) {init:.3f} ms "
                f"{'≤' if ok else '>'} max_init_ms {exp.max_init_ms:g}",
            )
        )
    return verdicts
