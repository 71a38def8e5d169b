"""Every run proves its label: a variant whose runner saw the opposite of what it is called fails.

"sme2-on" and "sme2-off" are what the session asked for; what ran is what the runner process saw
of the CPU (:class:`pytest_sme2.records.evidence.CpuSeen`), asked the way XNNPACK and KleidiAI ask.
An "on" run must see SME2; an "off" run must see neither SME2 nor SME (an "off" that hides SME2
but not SME still runs SME1 kernels on an M4, and iOS turns user-mode SME off on some chips, so
an "on" can see nothing). A mislabelled run would otherwise be judged, and its speedup stored, as
if it were right.
"""

from __future__ import annotations

from pytest_sme2.judge.gate import Judging
from pytest_sme2.judge.wording import case_name
from pytest_sme2.records.device import Variant
from pytest_sme2.records.evidence import CpuSeen
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status, Verdict


class Label:
    """One verdict per variant: what its runner saw against its label; "not judged" where the
    runner reported nothing (built before it did, or elsewhere)."""

    name = "label"

    def check(self, judging: Judging) -> list[Verdict]:
        m = judging.measurement
        return [self._verdict(m, variant, vm.seen) for variant, vm in m.variants.items()]

    def _verdict(self, m: Measurement, variant: Variant, seen: CpuSeen | None) -> Verdict:
        name = f"{self.name}[{variant}]"
        if seen is None:
            return Verdict(
                name,
                Status.SKIP,
                f"{variant} label not proven: the runner did not report what it saw of the "
                "CPU (a runner built elsewhere)",
            )
        said = f"{seen.describe()}, by {seen.source}"
        if variant is Variant.ON and not seen.sme2:
            wrong = "saw no SME2"
        elif variant is Variant.OFF and (seen.sme or seen.sme2):
            wrong = "saw " + ("SME2" if seen.sme2 else "SME")
        else:
            return Verdict(name, Status.PASS, f"{variant} runner saw {said}")
        return Verdict(
            name,
            Status.FAIL,
            f"{variant} run of {case_name(m)} {wrong}: it is not the run its label says "
            f"(the runner saw {said})",
        )


LABEL = Label()
