"""How far one set of program outputs is from another, judged by a per-dtype tolerance
(:mod:`pytest_sme2.analysis.tolerances`).

Used twice: at export (the program against the eager PyTorch model it was lowered from —
ExecuTorch can return silently wrong numbers, e.g. 1.5.1's fp16 LayerNorm) and after a
measurement (SME2-on against SME2-off outputs: the same program must compute the same thing
whichever kernels ran).

An export of a reduced precision has two numbers with two meanings:

* the *quantization error* (:class:`Deviation`): the reduced-precision eager model (int8: the
  converted, fake-quantized PT2E model; fp16: ``model.half()``) against eager fp32. A property of
  the model the user chose and of its weights; recorded and shown, never judged.
* the *program error* (:class:`Numerics`): the ExecuTorch program against that reduced-precision
  eager model on the same inputs. What ExecuTorch/XNNPACK adds; judged, and a failure refuses
  the export. For static int8 the tolerance is counted in output quantization steps and in the
  output's spread (:class:`Tolerance`).

And either is *vacuous* when the reference outputs are degenerate (:func:`degenerate`): all
zero, denormal, constant or non-finite, which any program matches trivially.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from pytest_sme2.analysis.tolerances import Tolerance


@dataclass(frozen=True)
class OutputError:
    """How one output differs from its reference: what an export manifest stores per output."""

    max_abs: float  # max |output − reference|; inf when the output has NaN/inf
    scale: float  # max |reference|: what relative errors are relative to
    #: the output's quantization step (the scale of the dequantize that produces it), if any
    step: float | None = None
    #: RMS of output − reference (inf with NaN/inf); None in records made before it was kept
    rms_abs: float | None = None
    spread: float | None = None  # the reference's standard deviation; None as ``rms_abs``

    @property
    def max_rel(self) -> float:
        if math.isinf(self.max_abs):
            return math.inf
        if self.scale > 0:
            return self.max_abs / self.scale
        return 0.0 if self.max_abs == 0 else math.inf

    @property
    def max_steps(self) -> float | None:
        """The error in output quantization steps; None where the output has none."""
        if self.step is None or self.step <= 0:
            return None
        return self.max_abs / self.step

    @property
    def rms_steps(self) -> float | None:
        """The RMS error in output quantization steps; None where the output has none."""
        if self.step is None or self.step <= 0 or self.rms_abs is None:
            return None
        return self.rms_abs / self.step

    @property
    def rms_spread(self) -> float | None:
        """The RMS error as a share of the reference's spread (its standard deviation)."""
        if self.rms_abs is None or self.spread is None:
            return None
        if self.spread > 0:
            return self.rms_abs / self.spread
        return 0.0 if self.rms_abs == 0 else math.inf

    def to_json(self) -> dict[str, float | None]:
        """Plain JSON: a non-finite error is stored as null (JSON has no inf); an RMS not kept
        is left out, as records made before it leave it out."""
        data = {
            "max_abs": _finite_or_none(self.max_abs),
            "scale": self.scale,
            "step": self.step,
        }
        if self.rms_abs is not None:
            data |= {"rms_abs": _finite_or_none(self.rms_abs), "spread": self.spread}
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, float | None]) -> OutputError:
        max_abs, step, spread = data["max_abs"], data.get("step"), data.get("spread")
        kept_rms = "rms_abs" in data
        rms_abs = data.get("rms_abs")
        return cls(
            max_abs=math.inf if max_abs is None else max_abs,
            scale=float(data["scale"]),  # type: ignore[arg-type]
            step=None if step is None else float(step),
            rms_abs=(math.inf if rms_abs is None else float(rms_abs)) if kept_rms else None,
            spread=None if spread is None else float(spread),
        )

    def within(self, tolerance: Tolerance) -> bool:
        """Finite and within tolerance: NaN/inf fails whatever the tolerance. Where the RMS is
        judged but this record has none (made before it was kept), the worst element alone is
        judged: :func:`pytest_sme2.export.exporter.export_model` re-checks such records."""
        if not math.isfinite(self.max_abs) or self.max_abs > tolerance.limit(self.scale, self.step):
            return False
        rms_limit = None if self.spread is None else tolerance.rms_limit(self.spread, self.step)
        return rms_limit is None or self.rms_abs is None or self.rms_abs <= rms_limit


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _worst(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


@dataclass(frozen=True)
class Deviation:
    """How far a reduced-precision eager model is from eager fp32: the quantization error.

    Recorded and shown, never judged: it is a property of the model and its weights (random
    weights quantize worse than trained ones), which the user chose.
    """

    max_abs: float
    max_rel: float
    reference: str  # what was compared with what, e.g. "converted int8 model vs eager fp32"

    @classmethod
    def of(cls, errors: Sequence[OutputError], reference: str) -> Deviation:
        return cls(
            max_abs=max(e.max_abs for e in errors),
            max_rel=max(e.max_rel for e in errors),
            reference=reference,
        )

    def describe(self) -> str:
        """One line, e.g. ``max abs err 4.5e+00, max rel err 7.4e-01 (converted int8 model vs
        eager fp32)``."""
        if not math.isfinite(self.max_abs):
            return f"outputs contain NaN/inf ({self.reference})"
        return f"max abs err {self.max_abs:.1e}, max rel err {self.max_rel:.1e} ({self.reference})"


@dataclass(frozen=True)
class Numerics:
    """Outputs against their reference, judged by a tolerance.

    ``max_abs``/``max_rel`` are the worst over all outputs; inf means NaN/inf in an output,
    which always fails. ``max_steps`` is the worst error in output quantization steps where the
    outputs have steps, and ``rms_steps``/``rms_spread`` the worst RMS error in steps and as a
    share of the output's spread where the tolerance judges it. ``vacuous`` says why the verdict
    means nothing when the reference outputs are degenerate (:func:`degenerate`): it still
    passes or fails by its numbers.
    """

    max_abs: float
    max_rel: float
    tolerance_abs: float
    tolerance_rel: float
    ok: bool
    max_steps: float | None = None
    tolerance_steps: float = 0.0
    reference: str = ""  # what the outputs were compared with, e.g. "SME2-off"
    vacuous: str | None = None
    rms_steps: float | None = None
    rms_spread: float | None = None
    tolerance_rms_spread: float = 0.0
    tolerance_rms_steps: float = 0.0

    @classmethod
    def judge(
        cls,
        errors: Sequence[OutputError],
        tolerance: Tolerance,
        *,
        reference: str = "",
        vacuous: str | None = None,
    ) -> Numerics:
        steps = _worst([e.max_steps for e in errors]) if tolerance.steps else None
        # the RMS shown is one output's, the worst for its spread: "RMS 10.2 steps = 0.32 of
        # spread" speaks of a single output, as the outputs' steps and spreads differ
        judged = [
            (e.rms_spread, e.rms_steps)
            for e in errors
            if tolerance.steps
            and tolerance.rms_spread
            and e.rms_steps is not None
            and e.rms_spread is not None
        ]
        rms_spread, rms_steps = max(judged) if judged else (None, None)
        return cls(
            max_abs=max(e.max_abs for e in errors),
            max_rel=max(e.max_rel for e in errors),
            tolerance_abs=tolerance.abs,
            tolerance_rel=tolerance.rel,
            ok=all(e.within(tolerance) for e in errors),
            max_steps=steps,
            tolerance_steps=tolerance.steps if steps is not None else 0.0,
            reference=reference,
            vacuous=vacuous,
            rms_steps=rms_steps,
            rms_spread=rms_spread,
            tolerance_rms_spread=tolerance.rms_spread if judged else 0.0,
            tolerance_rms_steps=tolerance.rms_steps if judged else 0.0,
        )

    def headline(self) -> str:
        """The judged size in a table cell: ``39.0 steps, RMS 10.2 steps = 0.32 of spread``
        where there are steps (the RMS where it is judged), else ``rel 1.4e-06`` of the output
        range."""
        if self.max_steps is None:
            return f"rel {self.max_rel:.2g}"
        if self.rms_steps is None or self.rms_spread is None:
            return f"{self.max_steps:.1f} steps"
        return (
            f"{self.max_steps:.1f} steps, "
            f"RMS {self.rms_steps:.1f} steps = {self.rms_spread:.2f} of spread"
        )

    def describe(self) -> str:
        """One line, e.g. ``max abs err 3.1e-05, max rel err 2.0e-04 (tolerance abs 1e-05 +
        rel 1e-04 of the output range)`` or, in quantization steps, ``max abs err 5.7e-01 =
        39.0 output steps, RMS 10.2 steps = 0.32 of the output's spread, max rel err 3.5e-01
        (…; tolerance 64 output quantization steps, RMS 0.5 of the spread or 3 steps)``;
        prefixed with why it is vacuous, if it is."""
        if self.max_steps is not None:
            limits = f"tolerance {self.tolerance_abs:g} + {self.tolerance_steps:g} output steps"
            if self.tolerance_abs == 0:
                limits = f"tolerance {self.tolerance_steps:g} output quantization steps"
            if self.rms_spread is not None:
                limits += (
                    f", RMS {self.tolerance_rms_spread:g} of the spread "
                    f"or {self.tolerance_rms_steps:g} steps"
                )
        else:
            limits = (
                f"tolerance abs {self.tolerance_abs:g} + rel {self.tolerance_rel:g} "
                "of the output range"
            )
        if self.reference:
            limits = f"against {self.reference}; {limits}"
        if math.isinf(self.max_abs) or math.isnan(self.max_abs):
            text = f"outputs contain NaN/inf ({limits})"
        elif self.max_steps is not None:
            rms = (
                f"RMS {self.rms_steps:.1f} steps = {self.rms_spread:.2f} of the output's spread, "
                if self.rms_steps is not None and self.rms_spread is not None
                else ""
            )
            text = (
                f"max abs err {self.max_abs:.1e} = {self.max_steps:.1f} output steps, {rms}"
                f"max rel err {self.max_rel:.1e} ({limits})"
            )
        else:
            text = f"max abs err {self.max_abs:.1e}, max rel err {self.max_rel:.1e} ({limits})"
        return f"vacuous ({self.vacuous}): {text}" if self.vacuous else text


#: Why a registered program's numbers are not judged when it was given nothing to match.
NO_REFERENCE = (
    "not judged: no reference (register_program(expected_outputs=...) gives the outputs the "
    "program must match)"
)


@dataclass(frozen=True)
class ExportNumerics:
    """What an export found of its numbers, as the case record carries it into the report: the
    program error (judged), the quantization error (recorded; None for fp32) and why the eager
    outputs are degenerate (None when they are not).

    A program registered as a file (``register_program``) has no eager model: ``registered``
    says so, as it has no quantization error to show, and without expected outputs it has no
    program error either (``program`` None: "not judged", never a silent pass).
    """

    program: Numerics | None
    quantization: Deviation | None = None
    degenerate: str | None = None
    registered: bool = False
    #: how the program was quantized ("" for a float one), and the linear layers the quantizer
    #: left in float with why (8da4w: ``in_features`` its group does not divide): a layer left
    #: behind silently is a known trap, so the report names them
    quantizer: str = ""
    skipped: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: a NaN/inf error (NaN/inf outputs) is stored as the string ``"inf"``."""
        data = {
            "program": None if self.program is None else _plain_floats(asdict(self.program)),
            "quantization": None
            if self.quantization is None
            else _plain_floats(asdict(self.quantization)),
            "degenerate": self.degenerate,
        }
        # each only when set: the records of models without them stay as they were
        if self.registered:
            data["registered"] = True
        if self.quantizer:
            data["quantizer"] = self.quantizer
        if self.skipped:
            data["skipped"] = list(self.skipped)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExportNumerics:
        program, quantization = data["program"], data["quantization"]
        return cls(
            program=None if program is None else Numerics(**_read_floats(program)),
            quantization=None if quantization is None else Deviation(**_read_floats(quantization)),
            degenerate=data["degenerate"],
            registered=bool(data.get("registered", False)),
            quantizer=data.get("quantizer", ""),
            skipped=tuple(data.get("skipped", ())),
        )

    def describe(self) -> str:
        """One line: the program error, then the quantization error where there is one."""
        if self.program is None:
            return f"program error {NO_REFERENCE}"
        text = f"program error {self.program.describe()}"
        if self.quantization is not None:
            text += f"; quantization error {self.quantization.describe()}"
        return text


def _plain_floats(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: "inf" if isinstance(v, float) and not math.isfinite(v) else v for k, v in fields.items()
    }


def _read_floats(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: math.inf if v == "inf" else v for k, v in fields.items()}


#: What to do about degenerate outputs, said with every warning about them.
DEGENERATE_ADVICE = (
    "initialise the weights at a realistic scale (as a trained network's) and calibrate "
    "batch-norm statistics (e.g. models/_seeding.py calibrate_batchnorm)"
)
#: The smallest normal float32: below it, values are denormal (slow paths, and flushed to zero
#: by some kernels).
FLOAT32_TINY = float(np.finfo(np.float32).tiny)


def degenerate(outputs: Sequence[np.ndarray]) -> str | None:
    """Why ``outputs`` make any comparison with them vacuous, or None when they do not.

    Degenerate: all zero, denormal (every |x| < float32 tiny, ~1.2e-38), constant (more than one
    element, all equal) or non-finite (any NaN/inf). A program matches zeros or denormals within
    any tolerance (and denormals time the CPU's slow paths), and a constant output says nothing
    about the layers before it. One clause per degenerate output, e.g. ``output 0 is denormal
    (max |x| 3.1e-40)``; "; "-joined.
    """
    found = []
    for index, output in enumerate(outputs):
        values = np.asarray(output).astype(np.float64)
        if values.size == 0:
            continue
        magnitude = float(np.abs(values).max())
        if not np.isfinite(values).all():
            found.append(f"output {index} is non-finite (NaN/inf)")
        elif magnitude == 0:
            found.append(f"output {index} is all zero")
        elif magnitude < FLOAT32_TINY:
            found.append(f"output {index} is denormal (max |x| {magnitude:.1e})")
        elif values.size > 1 and float(values.max()) == float(values.min()):
            found.append(f"output {index} is constant ({float(values.flat[0]):.4g} everywhere)")
    return "; ".join(found) or None


class DegenerateOutputWarning(UserWarning):
    """The model's eager outputs are degenerate: its numerics and parity verdicts are vacuous."""


class MismatchError(ValueError):
    """The two sets of outputs cannot be compared (count or shape differs); the message says how."""


def compare_outputs(
    outputs: Sequence[np.ndarray],
    reference: Sequence[np.ndarray],
    *,
    what: str = "reference",
    steps: Sequence[float | None] | None = None,
) -> list[OutputError]:
    """Per-output errors of ``outputs`` against ``reference`` (compared in float64); ``steps``
    are the outputs' quantization steps, where they have them."""
    if len(outputs) != len(reference):
        raise MismatchError(f"program gave {len(outputs)} outputs, {what} {len(reference)}")
    if steps is None:
        steps = [None] * len(reference)
    errors = []
    for index, (got, want, step) in enumerate(zip(outputs, reference, steps, strict=True)):
        if got.shape != want.shape:
            raise MismatchError(f"output {index} has shape {got.shape}, {what}'s is {want.shape}")
        got64, want64 = got.astype(np.float64), want.astype(np.float64)
        scale = float(np.abs(want64).max(initial=0.0))
        spread = float(want64.std()) if want64.size else 0.0
        if not np.isfinite(got64).all():
            errors.append(
                OutputError(
                    max_abs=math.inf, scale=scale, step=step, rms_abs=math.inf, spread=spread
                )
            )
        else:
            diff = np.abs(got64 - want64)
            errors.append(
                OutputError(
                    max_abs=float(diff.max(initial=0.0)),
                    scale=scale,
                    step=step,
                    rms_abs=float(np.sqrt(np.mean(diff**2))) if diff.size else 0.0,
                    spread=spread,
                )
            )
    return errors
