"""The gates of a case's outputs: the export's numerics and the SME2-on outputs against SME2-off
(parity). Judged on the measurement alone; vacuous — passed, and saying so first — where the
outputs are degenerate, since any program matches them then.
"""

from __future__ import annotations

from pytest_sme2.analysis.numerics import DEGENERATE_ADVICE, NO_REFERENCE
from pytest_sme2.judge.gate import Judging
from pytest_sme2.judge.wording import case_name
from pytest_sme2.records.verdict import Status, Verdict


class NumericsGate:
    """The export's numerics, as judged when the program was exported (a program that failed
    them was never measured): the program error and, beside it, the quantization error."""

    name = "numerics"

    def check(self, judging: Judging) -> list[Verdict]:
        m = judging.measurement
        numerics = m.numerics
        if numerics is None:
            return []
        if numerics.program is None:  # a registered program given no expected outputs
            return [Verdict(self.name, Status.SKIP, f"{case_name(m)}: {NO_REFERENCE}")]
        if numerics.program.vacuous:
            message = (
                f"vacuous: the outputs of {m.model}[{m.dtype}] are degenerate "
                f"({numerics.program.vacuous}), any program matches them; {DEGENERATE_ADVICE}"
            )
            return [Verdict(self.name, Status.PASS, message, (numerics.describe(),))]
        return [Verdict(self.name, Status.PASS, numerics.describe())]


class Parity:
    """SME2-on outputs against SME2-off outputs: the same program on the same inputs."""

    name = "parity"

    def check(self, judging: Judging) -> list[Verdict]:
        m = judging.measurement
        parity = m.parity
        if parity is None:
            return []
        if parity.ok and parity.vacuous:
            message = (
                f"vacuous: SME2-on outputs match SME2-off trivially, {parity.vacuous}; "
                + DEGENERATE_ADVICE
            )
            return [Verdict(self.name, Status.PASS, message, (parity.describe(),))]
        if parity.ok:
            message = f"SME2-on outputs match SME2-off: {parity.describe()}"
            return [Verdict(self.name, Status.PASS, message)]
        message = f"SME2-on outputs of {case_name(m)} differ from SME2-off: {parity.describe()}"
        return [Verdict(self.name, Status.FAIL, message)]


NUMERICS = NumericsGate()
PARITY = Parity()
