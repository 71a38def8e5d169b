"""Judging rules: a Measurement against its Baseline and the test's expectations → Verdicts (the
time gates in :mod:`pytest_sme2.judge.time_gates`, the load gates in
:mod:`pytest_sme2.judge.load_gates`; what the plugin then does with them,
:func:`pytest_sme2.judge.decision.decide`).

Rules, as the user's CI relies on them:

* structure (operator kinds and counts per run, packed SME operators) must match exactly;
* category shares stay within an absolute tolerance of the baseline (default 5 points), and
  within the limits the test's ``sme2`` marker sets;
* SME2 speedup is at least the floor and not worse than the baseline beyond tolerance;
* every quantity against the baseline "moved" by the rule a baseline update uses
  (``baseline.Move``): a gate fails on a move for the worse and names a move for the better;
* time (latency, shares, speedup against the baseline) is judged only against the time record of
  the measuring machine's class; with none, those gates are "not judged" and the portable ones
  (structure, packed operators, kernels, parity, instruction counts) still are;
* latency fails when the fastest timing-only run, relative to the reference workload's fastest
  run beside it, rose from the baseline's by more than the record's tolerance (default 3 %, or
  calibrated: ``TimeRecord.latency_percent``; ``LatencyBaseline.change_from`` says why); a speedup
  gate fails only when the bootstrap 95 % interval of the speedup lies entirely beyond its
  tolerance. Time-only failures are confirmed by a fresh measurement
  (:func:`pytest_sme2.judge.decision.judge_confirmed`).

Every verdict carries a sentence a reviewer would write, and, for structure, a compact diff.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytest_sme2.analysis.numerics import DEGENERATE_ADVICE, NO_REFERENCE
from pytest_sme2.analysis.profile import Profile
from pytest_sme2.judge.baseline import (
    Baseline,
    Move,
    Tolerances,
    from_measurement,
    instruction_ratio_move,
    instructions_move,
    kernel_selection_diff,
    operator_instructions,
    structure_diff,
)
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.label_gate import label_verdicts
from pytest_sme2.judge.load_gates import load_verdicts
from pytest_sme2.judge.sme2_gate import sme2_kernels
from pytest_sme2.judge.thread_gates import thread_gain_gates, without_emulated_counts
from pytest_sme2.judge.time_gates import (
    latency_gates,
    no_time_record,
    share_gates,
    speedup_gates,
    without_disturbed_time,
)
from pytest_sme2.judge.wording import RECORD_IT, case_name, shares_verdict
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status, Verdict


def judge(
    m: Measurement,
    baseline: Baseline | None,
    expectations: Expectations,
    tolerances: Tolerances,
    *,
    judge_disturbed: bool = False,
) -> tuple[Verdict, ...]:
    """Every gate's verdict for ``m``; with no baseline, only the baseline-free gates are judged.
    Time gates are not judged where other work took the CPU from the runs, unless
    ``judge_disturbed`` (``--sme2-judge-disturbed``).

    Against the baseline, ``m`` is judged in its baseline form (``from_measurement``) with the
    "moved" rules a baseline update uses (:class:`pytest_sme2.judge.baseline.Move`): what fails here
    is exactly what ``--sme2-update-baselines`` would record.
    """
    record = baseline.record_for(m.device) if baseline is not None else None
    now = from_measurement(m, tolerances)
    verdicts: list[Verdict] = label_verdicts(m)
    verdicts += _share_limits(m, expectations)
    verdicts += _op_counts(m, expectations)
    verdicts += sme2_kernels(m, expectations)
    verdicts += speedup_gates(m, record, expectations, tolerances)
    verdicts += thread_gain_gates(m, expectations)
    verdicts += _instruction_ratio(m, now, baseline, expectations, tolerances)
    if baseline is not None:
        verdicts += _instructions(m, now, baseline, tolerances)
    verdicts += load_verdicts(m, now, baseline, expectations, tolerances)
    verdicts += _numerics(m)
    verdicts += _parity(m)
    if baseline is not None:
        verdicts += _structure(m, now, baseline)
        verdicts += _kernel_selection(m, now, baseline, expectations)
        if not m.device.time_meaningful:
            verdicts += _instruction_shares(m, now, baseline, tolerances) or _time_meaningless(
                m, "shares"
            )
            verdicts += _time_meaningless(m, "latency")
        elif record is None:
            verdicts += no_time_record(m)
        else:
            measured = now.machines[m.device.class_id]
            verdicts += share_gates(m, measured, record, tolerances)
            verdicts += latency_gates(m, measured, record, tolerances)
    verdicts = without_emulated_counts(m, verdicts)
    return tuple(verdicts if judge_disturbed else without_disturbed_time(m, verdicts))


def _time_meaningless(m: Measurement, gate: str) -> list[Verdict]:
    """The skip verdict for a time-based gate on a device whose time means nothing, else []."""
    if m.device.time_meaningful:
        return []
    reason = m.device.limits.get("latency", f"{m.device.name}'s time is not meaningful")
    if gate == "latency":
        return [Verdict(gate, Status.SKIP, reason)]
    return [Verdict(gate, Status.SKIP, f"category shares not judged: {reason}")]


def _share_limits(m: Measurement, exp: Expectations) -> list[Verdict]:
    if not exp.max_share and not exp.min_share:
        return []
    variant = m.headline
    prof = m.variants[variant].profile
    if not prof.counts_instructions and (skipped := _time_meaningless(m, "share-limits")):
        return skipped
    shares = prof.shares
    share = _share_word(prof)
    broken = [
        f"{cat} {share} {100 * shares[cat]:.1f}% is above the limit {100 * limit:.1f}%"
        for cat, limit in exp.max_share.items()
        if shares[cat] > limit
    ] + [
        f"{cat} {share} {100 * shares[cat]:.1f}% is below the minimum {100 * limit:.1f}%"
        for cat, limit in exp.min_share.items()
        if shares[cat] < limit
    ]
    if broken:
        return [
            Verdict(
                "share-limits", Status.FAIL, f"{'; '.join(broken)} for {case_name(m)} ({variant})"
            )
        ]
    return [
        Verdict(
            "share-limits", Status.PASS, f"category {share}s within the marker's limits ({variant})"
        )
    ]


def _share_word(prof: Profile) -> str:
    """What a share is of: time, or — where the profile counts instructions — instructions."""
    return "instruction share" if prof.counts_instructions else "share"


def _op_counts(m: Measurement, exp: Expectations) -> list[Verdict]:
    if not exp.op_counts:
        return []
    variant = m.headline
    prof = m.variants[variant].profile
    actual = {op.name: op.count / prof.runs for op in prof.operators}
    wrong = [
        f"{name}: expected ×{want:g}/run, got ×{actual.get(name, 0):g}/run"
        for name, want in exp.op_counts.items()
        if actual.get(name, 0) != want
    ]
    if wrong:
        return [
            Verdict(
                "op-counts",
                Status.FAIL,
                f"operator counts differ for {case_name(m)} ({variant})",
                tuple(wrong),
            )
        ]
    return [Verdict("op-counts", Status.PASS, "operator counts as expected")]


def _numerics(m: Measurement) -> list[Verdict]:
    """The export's numerics, as judged when the program was exported (a program that failed
    them was never measured): the program error and, beside it, the quantization error. Vacuous
    — passed, and saying so first — when the eager outputs are degenerate."""
    numerics = m.numerics
    if numerics is None:
        return []
    if numerics.program is None:  # a registered program given no expected outputs
        return [Verdict("numerics", Status.SKIP, f"{case_name(m)}: {NO_REFERENCE}")]
    if numerics.program.vacuous:
        return [
            Verdict(
                "numerics",
                Status.PASS,
                f"vacuous: the outputs of {m.model}[{m.dtype}] are degenerate "
                f"({numerics.program.vacuous}), any program matches them; {DEGENERATE_ADVICE}",
                (numerics.describe(),),
            )
        ]
    return [Verdict("numerics", Status.PASS, numerics.describe())]


def _parity(m: Measurement) -> list[Verdict]:
    if m.parity is None:
        return []
    if m.parity.ok and m.parity.vacuous:
        return [
            Verdict(
                "parity",
                Status.PASS,
                f"vacuous: SME2-on outputs match SME2-off trivially, {m.parity.vacuous}; "
                + DEGENERATE_ADVICE,
                (m.parity.describe(),),
            )
        ]
    if m.parity.ok:
        return [
            Verdict("parity", Status.PASS, f"SME2-on outputs match SME2-off: {m.parity.describe()}")
        ]
    return [
        Verdict(
            "parity",
            Status.FAIL,
            f"SME2-on outputs of {case_name(m)} differ from SME2-off: {m.parity.describe()}",
        )
    ]


def _instruction_ratio(
    m: Measurement, now: Baseline, baseline: Baseline | None, exp: Expectations, tol: Tolerances
) -> list[Verdict]:
    """Instructions off ÷ on: deterministic under emulation, so judged without an interval."""
    ratio = m.instruction_ratio
    if ratio is None:
        if exp.instruction_ratio_floor is None:
            return []
        reason = f"{m.device.name} does not count instructions"
        return [Verdict("instruction-ratio", Status.SKIP, reason)]
    verdicts = []
    if exp.instruction_ratio_floor is not None:
        ok = ratio >= exp.instruction_ratio_floor
        verdicts.append(
            Verdict(
                "instruction-ratio-floor",
                Status.PASS if ok else Status.FAIL,
                f"SME2 instruction ratio {ratio:.2f}× (instructions off ÷ on) is "
                + ("at least" if ok else "below")
                + f" the floor {exp.instruction_ratio_floor:g}× for {case_name(m)}",
            )
        )
    stored = baseline.instruction_ratio if baseline is not None else None
    if stored is not None and now.instruction_ratio is not None:
        # two exact counts: their ratio is exact too, judged at the instruction tolerance
        move = instruction_ratio_move(now.instruction_ratio, stored, tol)
        beyond = f" beyond the {tol.instruction_percent:g}% tolerance"
        verdicts.append(
            Verdict(
                "instruction-ratio-baseline",
                Status.FAIL if move is Move.FELL else Status.PASS,
                f"SME2 instruction ratio {ratio:.2f}× "
                + {
                    Move.FELL: f"fell below the baseline {stored:g}×{beyond} for {case_name(m)}",
                    Move.WITHIN: f"vs the baseline {stored:g}×",
                    Move.ROSE: f"rose above the baseline {stored:g}×{beyond}: {RECORD_IT}",
                }[move],
            )
        )
    return verdicts


#: What a verdict says of a move in the good direction: news for the baseline, not a failure.
def _instructions(
    m: Measurement, now: Baseline, baseline: Baseline, tol: Tolerances
) -> list[Verdict]:
    """Instructions per steady-state inference against the baseline, per variant.

    Exact and repeatable under emulation, so judged without an interval or a re-measure: a model
    that does 2 % more work with the same operators fails, which neither the on/off ratio (a
    uniform increase leaves it unchanged) nor structure can see. Fewer instructions pass as news.
    """
    verdicts = []
    for variant, vm in m.variants.items():
        stored = baseline.variants.get(str(variant))
        measured = now.variants[str(variant)].instructions
        if measured is None or stored is None or not stored.instructions:
            continue
        change = measured / stored.instructions
        counts = (
            f"{stored.instructions:,} → {measured:,} per inference ({100 * (change - 1):+.2f}%)"
        )
        gate = f"instructions[{variant}]"
        move = instructions_move(measured, stored.instructions, tol)
        if move is Move.ROSE:
            grew = _operators_grown(stored.operator_instructions, vm.profile, tol)
            verdicts.append(
                Verdict(
                    gate,
                    Status.FAIL,
                    f"instructions of {case_name(m)} ({variant}) rose {counts}, beyond the "
                    f"{tol.instruction_percent:g}% tolerance"
                    + (f"; grew: {', '.join(g.split(':')[0] for g in grew)}" if grew else ""),
                    tuple(grew),
                )
            )
        elif move is Move.FELL:
            verdicts.append(
                Verdict(
                    gate,
                    Status.PASS,
                    f"fewer instructions ({variant}): {counts} — a new kernel? {RECORD_IT}",
                )
            )
        else:
            verdicts.append(Verdict(gate, Status.PASS, f"instructions ({variant}) {counts}"))
    return verdicts


def _operators_grown(stored: Mapping[str, int], prof: Profile, tol: Tolerances) -> list[str]:
    """The operator kinds whose instructions per inference rose beyond the tolerance (new kinds
    too), most added instructions first, as "name: a → b (+x%)"."""
    if not stored or not prof.counts_instructions:
        return []
    now = operator_instructions(prof)
    grown = [
        (count - stored.get(name, 0), name, stored.get(name, 0), count)
        for name, count in now.items()
        if instructions_move(count, stored.get(name, 0), tol) is Move.ROSE
    ]
    return [
        f"{name}: {old:,} → {new:,}" + (f" (+{100 * (new / old - 1):.1f}%)" if old else " (new)")
        for _, name, old, new in sorted(grown, reverse=True)
    ]


def _instruction_shares(
    m: Measurement, now: Baseline, baseline: Baseline, tol: Tolerances
) -> list[Verdict]:
    """Category shares of instructions against the baseline, per variant, where the device
    splits its exact count between operators (qemu-sme2): the deterministic twin of the time
    shares, judged on every machine. [] where there is nothing to judge."""
    return [
        shares_verdict(
            m,
            variant,
            now.variants[str(variant)].instruction_shares,
            stored.instruction_shares,
            tol,
            "instruction share",
            "instruction-shares",
        )
        for variant, vm in m.variants.items()
        if (stored := baseline.variants.get(str(variant))) is not None
        and stored.instruction_shares
        and vm.profile.counts_instructions
    ]


def _structure(m: Measurement, now: Baseline, baseline: Baseline) -> list[Verdict]:
    verdicts = []
    for variant in m.variants:
        gate = f"structure[{variant}]"
        stored = baseline.variants.get(str(variant))
        if stored is None:
            message = f"the baseline has no {variant} variant for {case_name(m)}; update it"
            verdicts.append(Verdict(gate, Status.FAIL, message))
            continue
        measured = now.variants[str(variant)]
        diff = structure_diff(stored, measured)
        if diff:
            message = f"operator structure of {case_name(m)} ({variant}) changed from the baseline"
            verdicts.append(Verdict(gate, Status.FAIL, message, tuple(diff)))
        else:
            message = f"{len(measured.operators)} operator kinds as in the baseline"
            verdicts.append(Verdict(gate, Status.PASS, message))
    return verdicts


def _kernel_selection(
    m: Measurement, now: Baseline, baseline: Baseline, exp: Expectations
) -> list[Verdict]:
    """The SME2 kernels of each operator kind with SME2 on, against the baseline's: a change of
    kernel selection (a library update replacing an SME2 kernel) is reported by name; an
    operator kind that no longer runs any SME2 kernel fails under ``require_sme2_kernels``.
    Judged where both the baseline and the measurement have kernels per operator."""
    gate = "kernel-selection"
    on, stored = m.variants.get(Variant.ON), baseline.variants.get(str(Variant.ON))
    evidence = on.evidence if on is not None else None
    if stored is None or not stored.operator_sme2_kernels:
        return []  # a baseline written before kernels per operator were recorded
    if evidence is None or not evidence.operator_kernels:
        return []
    lines, gone = kernel_selection_diff(stored, now.variants[str(Variant.ON)])
    if gone and exp.require_sme2_kernels:
        message = (
            f"SME2 kernels gone from {len(gone)} operator kind(s) of {case_name(m)}: "
            f"{', '.join(gone)} (require_sme2_kernels)"
        )
        return [Verdict(gate, Status.FAIL, message, tuple(lines))]
    if lines:
        message = (
            f"the SME2 kernel selection of {case_name(m)} changed from the baseline: {RECORD_IT}"
        )
        return [Verdict(gate, Status.PASS, message, tuple(lines))]
    kinds = len(stored.operator_sme2_kernels)
    return [Verdict(gate, Status.PASS, f"{kinds} operator kind(s) run the baseline's SME2 kernels")]
