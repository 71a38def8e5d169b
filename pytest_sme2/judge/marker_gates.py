"""The gates of the ``sme2`` marker's limits, judged on the measurement alone (nothing stored):
category share limits, operator counts, a ceiling on method init, a floor on the instruction
ratio. Each judges nothing where the marker does not ask for it.
"""

from __future__ import annotations

from pytest_sme2.analysis.profile import Profile
from pytest_sme2.judge.gate import Judging
from pytest_sme2.judge.wording import case_name, time_meaningless
from pytest_sme2.records.verdict import Status, Verdict


def _share_word(prof: Profile) -> str:
    """What a share is of: time, or — where the profile counts instructions — instructions."""
    return "instruction share" if prof.counts_instructions else "share"


class ShareLimits:
    """``max_share`` / ``min_share``: the headline variant's category shares within limits (of
    instructions where the profile counts them, else of time)."""

    name = "share-limits"
    wall_clock = True

    def check(self, judging: Judging) -> list[Verdict]:
        m, exp = judging.measurement, judging.expectations
        if not exp.max_share and not exp.min_share:
            return []
        variant = m.headline
        prof = m.variants[variant].profile
        if not prof.counts_instructions and (skipped := time_meaningless(m, self.name)):
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
            message = f"{'; '.join(broken)} for {case_name(m)} ({variant})"
            return [Verdict(self.name, Status.FAIL, message)]
        message = f"category {share}s within the marker's limits ({variant})"
        return [Verdict(self.name, Status.PASS, message)]


class OpCounts:
    """``op_counts``: occurrences per run of named operators in the headline variant."""

    name = "op-counts"

    def check(self, judging: Judging) -> list[Verdict]:
        m, exp = judging.measurement, judging.expectations
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
            message = f"operator counts differ for {case_name(m)} ({variant})"
            return [Verdict(self.name, Status.FAIL, message, tuple(wrong))]
        return [Verdict(self.name, Status.PASS, "operator counts as expected")]


class MaxInit:
    """``max_init_ms``: each variant's fastest method init under the ceiling, where time means
    something; skipped, saying why, where it does not."""

    name = "max-init"
    wall_clock = True

    def check(self, judging: Judging) -> list[Verdict]:
        m, ceiling = judging.measurement, judging.expectations.max_init_ms
        if ceiling is None:
            return []
        if not m.device.time_meaningful:
            reason = m.device.limits.get("latency", f"{m.device.name}'s time is not meaningful")
            return [Verdict(self.name, Status.SKIP, f"max_init_ms not judged: {reason}")]
        verdicts = []
        for variant, vm in m.variants.items():
            init = vm.load.method_init_ms if vm.load else None
            if init is None:
                continue
            ok = init <= ceiling
            verdicts.append(
                Verdict(
                    f"{self.name}[{variant}]",
                    Status.PASS if ok else Status.FAIL,
                    f"method init of {case_name(m)} ({variant}) {init:.3f} ms "
                    f"{'≤' if ok else '>'} max_init_ms {ceiling:g}",
                )
            )
        return verdicts


class InstructionRatioFloor:
    """``instruction_ratio_floor``: instructions off ÷ on at least the floor, where the device
    counts them (deterministic under emulation, so judged without an interval)."""

    name = "instruction-ratio"
    counted = True

    def check(self, judging: Judging) -> list[Verdict]:
        m, floor = judging.measurement, judging.expectations.instruction_ratio_floor
        if floor is None:
            return []
        ratio = m.instruction_ratio
        if ratio is None:
            reason = f"{m.device.name} does not count instructions"
            return [Verdict(self.name, Status.SKIP, reason)]
        ok = ratio >= floor
        message = (
            f"SME2 instruction ratio {ratio:.2f}× (instructions off ÷ on) is "
            + ("at least" if ok else "below")
            + f" the floor {floor:g}× for {case_name(m)}"
        )
        return [Verdict(f"{self.name}-floor", Status.PASS if ok else Status.FAIL, message)]


SHARE_LIMITS = ShareLimits()
OP_COUNTS = OpCounts()
MAX_INIT = MaxInit()
INSTRUCTION_RATIO_FLOOR = InstructionRatioFloor()
