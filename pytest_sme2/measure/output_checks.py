"""What a measurement checks of the outputs its runs wrote: that they fit the program (count and
shapes of the export's eager outputs), and that SME2-on computes what SME2-off does (parity).

Values are judged where the program is exported (against eager PyTorch) and, where both variants
run, by their parity; these checks are what the device's runs add.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from pytest_sme2.analysis.numerics import (
    MismatchError,
    Numerics,
    compare_outputs,
    degenerate,
)
from pytest_sme2.analysis.tolerances import Tolerance, tolerance_for
from pytest_sme2.errors import RunnerError
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import VariantMeasurement
from pytest_sme2.runner.invoke import RunResult
from pytest_sme2.runner.tensors import read_tensors


def check_outputs(run: RunResult, expected: Sequence[np.ndarray] | None) -> None:
    """RunnerError unless the run's outputs have the program's count and shapes (``expected``'s;
    None: nothing to check against).

    A runtime that returns the wrong tensors (a broken build, a truncated output file) would
    otherwise pass every gate, which judge time and structure only; on a device that runs one
    variant, there is no SME2-off to compare with either.
    """
    if expected is None or run.outputs is None:
        return
    try:
        compare_outputs(read_tensors(run.outputs), expected, what="eager PyTorch")
    except MismatchError as err:
        raise RunnerError(f"{run.outputs}: the outputs do not fit the program: {err}") from None


def parity(
    measured: Mapping[Variant, VariantMeasurement],
    model: str,
    dtype: str,
    tolerance: Tolerance | None = None,
) -> Numerics | None:
    """SME2-on outputs judged against SME2-off outputs within ``tolerance`` (a registered
    program's), else the ``dtype`` label's (:func:`~pytest_sme2.analysis.tolerances.tolerance_for`).

    The same program on the same inputs must compute the same thing whichever kernels ran; a
    broken SME2 kernel would show here even where eager PyTorch is not at hand. Vacuous when
    the SME2-off outputs are degenerate (all zero, denormal, constant, non-finite): any kernel
    matches those.
    """
    runs = [measured[v].outputs if v in measured else None for v in (Variant.ON, Variant.OFF)]
    if None in runs:
        return None
    on, off = (read_tensors(path) for path in runs)
    try:
        errors = compare_outputs(on, off, what="SME2-off")
    except MismatchError as err:
        raise RunnerError(
            f"SME2-on and SME2-off outputs of {model}[{dtype}] differ: {err}"
        ) from None
    return Numerics.judge(
        errors,
        tolerance or tolerance_for(dtype),
        reference=str(Variant.OFF),
        vacuous=degenerate(off),
    )
