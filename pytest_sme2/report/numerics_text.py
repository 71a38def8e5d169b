"""The numerics a case report shows: the program error, the quantization error and the
SME2-on/off parity, each with what it means and whether it was judged, as a table (the case
report's section) and as one cell (the session table's column).

Apart from :mod:`pytest_sme2.report.content` because the numbers have their own vocabulary
(:mod:`pytest_sme2.analysis.numerics`) and both tables speak it.
"""

from __future__ import annotations

from pytest_sme2.analysis.numerics import DEGENERATE_ADVICE, NO_REFERENCE
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.report.format import Table


def numerics_table(m: Measurement) -> Table | None:
    """The case's numbers, each with its meaning: the program error (the program against the
    eager model it was lowered from; judged at export), the quantization error (that model
    against eager fp32; recorded, never judged), SME2-on/off parity, and the degenerate outputs
    that make them vacuous. None where the record has neither export numerics nor parity."""
    numerics, parity = m.numerics, m.parity
    if numerics is None and parity is None:
        return None
    rows = []
    if numerics is not None:
        if numerics.degenerate:
            rows.append(
                ("degenerate outputs", f"{numerics.degenerate}; {DEGENERATE_ADVICE}", "warning")
            )
        program = numerics.program
        rows.append(
            ("program error", NO_REFERENCE, "not judged")
            if program is None
            else (
                "program error",
                program.describe(),
                "vacuous" if program.vacuous else "pass" if program.ok else "FAIL",
            )
        )
        if numerics.quantizer:
            rows.append(("quantizer", numerics.quantizer, "recorded"))
        if numerics.skipped:
            count = len(numerics.skipped)
            rows.append(
                (
                    f"linear layers left in float ({count})",
                    "; ".join(numerics.skipped),
                    "warning: not quantized",
                )
            )
        if not numerics.registered:  # a registered program has no eager model to quantize
            rows.append(
                (
                    "quantization error",
                    numerics.quantization.describe()
                    if numerics.quantization is not None
                    else f"none: {m.dtype} is compared with eager {m.dtype}",
                    "recorded, not judged",
                )
            )
    if parity is not None:
        rows.append(
            (
                f"{Variant.ON} vs {Variant.OFF}",
                parity.describe(),
                "vacuous" if parity.vacuous else "pass" if parity.ok else "FAIL",
            )
        )
    return Table(("numbers", "measured", "judgement"), tuple(rows))


def numerics_text(m: Measurement) -> str:
    """The numerics in a table cell: the program error (in output steps where it has them) and
    the quantization error, relative to the output range; "vacuous" first where they are."""
    numerics = m.numerics
    if numerics is None:
        return "—"
    program = numerics.program
    if program is None:
        return "not judged: no reference"
    text = f"program err {program.headline()}"
    if numerics.quantization is not None:
        text += f", quantization err {numerics.quantization.max_rel:.1e} rel"
    vacuous = program.vacuous or (m.parity.vacuous if m.parity is not None else None)
    return f"vacuous ({text})" if vacuous else text
