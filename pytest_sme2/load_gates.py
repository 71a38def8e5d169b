"""Load and memory gates: method init and planned memory against the baseline, and the
``max_init_ms`` ceiling of the ``sme2`` marker.

Why gated: XNNPACK and KleidiAI pack the weights when the method is initialised, and a kernel
or library update can make that several times dearer while inference stays as it was (a Llama's
load went from 13.8 s to 30.2 s on a phone, pytorch/executorch#5162). Init counted in guest
instructions (qemu-sme2) is exact like an inference's count, so it is judged with the same
instruction tolerance and no re-measure; the planned memory follows from the program alone. A
baseline recorded before either was kept is judged without it and gets it on update.
"""

from __future__ import annotations

from pytest_sme2.baseline import Baseline, Move, Tolerances, instructions_move
from pytest_sme2.gates import RECORD_IT, Expectations, Status, Verdict, case_name
from pytest_sme2.result import Measurement

MIB = 1024 * 1024


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
    return verdicts


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
