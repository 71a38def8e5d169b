"""Every gated quantity and gate, in one place: what a baseline is made of (which specs fill a
variant's portable part, a variant's times, a time record, the case), and the order gates judge a
case in. :func:`pytest_sme2.judge.baseline.from_measurement`, the update's merge
(:mod:`pytest_sme2.judge.baseline_update`), the file (:mod:`pytest_sme2.judge.baseline_file`, its
schema included) and the judging (:mod:`pytest_sme2.judge.gates`) walk these lists and nothing
else.

The scalar quantities are a value (:class:`Quantities`), so that one more is one more
:class:`~pytest_sme2.judge.scalar.ScalarSpec` — in :data:`~pytest_sme2.judge.scalars.SCALARS`, or
given to :meth:`Quantities.adding` — and every walk above takes it in, with no other change: it is
measured, stored, merged, written, read back and judged in its place's gates.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pytest_sme2.judge.counted import COUNTED
from pytest_sme2.judge.gate import Gate
from pytest_sme2.judge.kernel_families import KERNEL_FAMILIES
from pytest_sme2.judge.kernel_selection import KERNEL_SELECTION
from pytest_sme2.judge.label_gate import LABEL
from pytest_sme2.judge.latency import CALIBRATION, LATENCY
from pytest_sme2.judge.marker_gates import (
    INSTRUCTION_RATIO_FLOOR,
    MAX_INIT,
    OP_COUNTS,
    SHARE_LIMITS,
)
from pytest_sme2.judge.output_gates import NUMERICS, PARITY
from pytest_sme2.judge.scalar import Place, ScalarGates, ScalarSpec
from pytest_sme2.judge.scalars import SCALARS
from pytest_sme2.judge.shares import SHARES
from pytest_sme2.judge.sme2_coverage import SME2_COVERAGE
from pytest_sme2.judge.sme2_gate import SME2_KERNELS
from pytest_sme2.judge.sme2_losses import SME2_LOSSES
from pytest_sme2.judge.speedup import SPEEDUP
from pytest_sme2.judge.structure import STRUCTURE
from pytest_sme2.judge.thread_gates import THREAD_GAIN_GATE
from pytest_sme2.judge.time_gates import AGAINST_TIME_RECORD

#: The compound parts of a variant's portable part, of a variant's times and of a time record,
#: in the order an update lists their changes.
VARIANT_PARTS = (STRUCTURE, KERNEL_SELECTION, KERNEL_FAMILIES, SME2_COVERAGE, COUNTED)
TIME_PARTS = (LATENCY, SHARES)
RECORD_PARTS = (SPEEDUP, CALIBRATION)


@dataclass(frozen=True)
class Quantities:
    """The scalar quantities a session gates and stores (the compound ones are fixed above)."""

    scalars: tuple[ScalarSpec, ...] = SCALARS

    def adding(self, *scalars: ScalarSpec) -> Quantities:
        """These quantities and ``scalars`` after them."""
        return Quantities((*self.scalars, *scalars))

    def at(self, place: Place) -> tuple[ScalarSpec, ...]:
        """The scalar quantities a baseline keeps at ``place``."""
        return tuple(spec for spec in self.scalars if spec.place is place)

    def gates(self) -> tuple[Gate, ...]:
        """The built-in gates, in the order a case's verdicts are listed (and reports show them):
        what the measurement alone shows first, then against the baseline, time last."""
        return (
            LABEL,
            SHARE_LIMITS,
            OP_COUNTS,
            SME2_KERNELS,
            SME2_LOSSES,
            SPEEDUP,
            THREAD_GAIN_GATE,
            INSTRUCTION_RATIO_FLOOR,
            ScalarGates(Place.CASE, self.at(Place.CASE)),
            COUNTED,
            MAX_INIT,
            ScalarGates(Place.VARIANT, self.at(Place.VARIANT)),
            ScalarGates(Place.TIME, self.at(Place.TIME)),
            NUMERICS,
            PARITY,
            STRUCTURE,
            KERNEL_SELECTION,
            KERNEL_FAMILIES,
            SME2_COVERAGE,
            AGAINST_TIME_RECORD,
        )


def gate_names(gates: Iterable[Gate], flag: str) -> tuple[str, ...]:
    """The names of ``gates`` (and of the gates they judge with, their ``parts``) whose ``flag``
    (``wall_clock``, ``counted``) is set: what their verdicts' gate names begin with."""
    return tuple(
        part.name
        for gate in gates
        for part in getattr(gate, "parts", (gate,))
        if getattr(part, flag, False)
    )


#: The quantities every session gates.
BUILTIN = Quantities()
