"""How far one set of program outputs is from another, judged by a per-dtype tolerance.

Used twice: at export (the program against eager PyTorch — ExecuTorch can return silently wrong
numbers, e.g. 1.5.1's fp16 LayerNorm) and after a measurement (SME2-on against SME2-off outputs:
the same program must compute the same thing whichever kernels ran).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    """An output passes when every element's error ≤ ``abs + rel × max |reference|``.

    Relative to the output's largest magnitude, not element-wise: elements near zero would turn
    harmless rounding into huge element-wise relative errors.
    """

    abs: float
    rel: float


#: Per dtype, about 3× the worst error measured on the example models against eager fp32 (see
#: tests/test_export.py), and far below what a broken program gives (ViT fp16's wrong LayerNorm:
#: relative error ≈ 1). fp32 differs from eager only by summation order (measured ≤ 2.2e-6). fp16
#: includes fp16 rounding of weights and activations (≤ 1.5e-2). Static int8 on these randomly
#: initialised models loses ≤ 0.15 of the output range — random weights quantize worse than
#: trained ones — and dynamic int8 ≤ 0.05.
TOLERANCES: Mapping[str, Tolerance] = {
    "fp32": Tolerance(abs=1e-5, rel=1e-4),
    "fp16": Tolerance(abs=1e-3, rel=5e-2),
    "int8": Tolerance(abs=1e-2, rel=0.35),
    "int8-dynamic": Tolerance(abs=1e-2, rel=0.15),
}


@dataclass(frozen=True)
class OutputError:
    """How one output differs from its reference: what an export manifest stores per output."""

    max_abs: float  # max |output − reference|; inf when the output has NaN/inf
    scale: float  # max |reference|: what relative errors are relative to

    @property
    def max_rel(self) -> float:
        if math.isinf(self.max_abs):
            return math.inf
        if self.scale > 0:
            return self.max_abs / self.scale
        return 0.0 if self.max_abs == 0 else math.inf

    def to_json(self) -> dict[str, float | None]:
        """Plain JSON: a non-finite error is stored as null (JSON has no inf)."""
        return {
            "max_abs": self.max_abs if math.isfinite(self.max_abs) else None,
            "scale": self.scale,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, float | None]) -> OutputError:
        max_abs = data["max_abs"]
        return cls(max_abs=math.inf if max_abs is None else max_abs, scale=float(data["scale"]))

    def within(self, tolerance: Tolerance) -> bool:
        """Finite and within tolerance: NaN/inf fails whatever the tolerance."""
        return math.isfinite(self.max_abs) and (
            self.max_abs <= tolerance.abs + tolerance.rel * self.scale
        )


@dataclass(frozen=True)
class Numerics:
    """Outputs against their reference, judged by a tolerance.

    ``max_abs``/``max_rel`` are the worst over all outputs; inf means NaN/inf in an output,
    which always fails.
    """

    max_abs: float
    max_rel: float
    tolerance_abs: float
    tolerance_rel: float
    ok: bool

    @classmethod
    def judge(cls, errors: Sequence[OutputError], tolerance: Tolerance) -> Numerics:
        return cls(
            max_abs=max(e.max_abs for e in errors),
            max_rel=max(e.max_rel for e in errors),
            tolerance_abs=tolerance.abs,
            tolerance_rel=tolerance.rel,
            ok=all(e.within(tolerance) for e in errors),
        )

    def describe(self) -> str:
        """One line, e.g. ``max abs err 3.1e-05, max rel err 2.0e-04 (tolerance abs 1e-05 +
        rel 1e-04 of the output range)``."""
        limits = (
            f"tolerance abs {self.tolerance_abs:g} + rel {self.tolerance_rel:g} of the output range"
        )
        if math.isinf(self.max_abs) or math.isnan(self.max_abs):
            return f"outputs contain NaN/inf ({limits})"
        return f"max abs err {self.max_abs:.1e}, max rel err {self.max_rel:.1e} ({limits})"


class MismatchError(ValueError):
    """The two sets of outputs cannot be compared (count or shape differs); the message says how."""


def compare_outputs(
    outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray], *, what: str = "reference"
) -> list[OutputError]:
    """Per-output errors of ``outputs`` against ``reference`` (compared in float64)."""
    if len(outputs) != len(reference):
        raise MismatchError(f"program gave {len(outputs)} outputs, {what} {len(reference)}")
    errors = []
    for index, (got, want) in enumerate(zip(outputs, reference, strict=True)):
        if got.shape != want.shape:
            raise MismatchError(f"output {index} has shape {got.shape}, {what}'s is {want.shape}")
        got64, want64 = got.astype(np.float64), want.astype(np.float64)
        scale = float(np.abs(want64).max(initial=0.0))
        if not np.isfinite(got64).all():
            errors.append(OutputError(max_abs=math.inf, scale=scale))
        else:
            diff = float(np.abs(got64 - want64).max(initial=0.0))
            errors.append(OutputError(max_abs=diff, scale=scale))
    return errors
