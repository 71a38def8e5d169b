"""How far one set of program outputs is from another, judged by a per-dtype tolerance.

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
  the export. For static int8 the tolerance is counted in output quantization steps.

And either is *vacuous* when the reference outputs are degenerate (:func:`degenerate`): all
zero, denormal, constant or non-finite, which any program matches trivially.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    """An output passes when every element's error ≤ ``abs + steps × step`` where the output has
    a quantization step (static int8) and the tolerance counts ``steps``, else
    ``abs + rel × max |reference|``.

    Relative to the output's largest magnitude, not element-wise: elements near zero would turn
    harmless rounding into huge element-wise relative errors. In steps where there are steps:
    an int8 program's output is on a grid of that step, and a program that computes the
    quantized graph right lands on the reference's grid point or a few beside it, whatever the
    output's range.
    """

    abs: float
    rel: float
    steps: float = 0.0

    def limit(self, scale: float, step: float | None) -> float:
        """The largest error allowed on an output of ``max |reference|`` ``scale`` and
        quantization ``step`` (None: not statically quantized)."""
        if self.steps and step is not None:
            return self.abs + self.steps * step
        return self.abs + self.rel * scale


#: The program error allowed per dtype: the program against the eager model it was lowered from
#: (fp32: eager fp32; fp16: eager fp16; int8: the converted PT2E model), on the example inputs.
#: Calibrated (native host runner, x86, executorch 1.5.1) on the four example models and five
#: throwaway realistic architectures with calibrated batch-norm statistics or ViT-style trunc-normal
#: init (MobileNetV2-, EfficientNet-B0- (squeeze-excite), ResNet-18-, ConvNeXt- and ViT-style;
#: 128×128, random weights). Worst program errors measured, and what broken programs give:
#:
#: - fp32: ≤ 2.4e-6 of the output range (summation order) on those; the corpus of real
#:   architectures (benchmarks/corpus.py, transformers configs) reaches 1.3e-4 on LeViT-128S,
#:   whose attention logits reach ~580: rel 1e-3, 8× that and far below a wrong operator (≈ 1).
#: - fp16: ≤ 3.0e-2 of the range against eager fp16 (MobileNetV2-style; mobilenet_v3_small
#:   2.3e-2, the others ≤ 1.2e-2; PyTorch's CPU fp16 keeps fp32 inside ops, XNNPACK does not):
#:   rel 0.08. ExecuTorch 1.5.1's fp16 LayerNorm (vit_tiny) is off by 1.02 of the range.
#: - int8 (static), in output quantization steps: toy_cnn and the ConvNeXt 0, squeezesam_like 2,
#:   ResNet- and ViT-style 4, mobilenet_v3_small 6, vit_tiny 11, EfficientNet-style 17,
#:   MobileNetV2-style 20 (median 4, RMS 5 steps over its 1000 outputs, of a 130-step range).
#:   Not a few rounding flips: on inverted-residual nets the program strays from the converted
#:   model about as far as that model strays from fp32 (MobileNetV2's first 6 blocks: 0.13 of
#:   the range vs 0.11; its first 3: 1 step), so the tolerance is 32 steps (1/8 of int8's 256);
#:   a program whose weights were negated after lowering is off by 255 (tests/test_export.py).
#:   Outputs computed in float after their last dequantize have no step: rel 0.35 (measured
#:   ≤ 0.03), also SME2-on/off parity's tolerance for int8, as before.
#: - int8-dynamic: XNNPACK chooses activation scales per row where the converted model does per
#:   tensor, so the program strays from it by the order of the quantization error itself:
#:   ≤ 0.16 of the range (MobileNetV2-style, whose quantization error is 0.22; the others
#:   ≤ 0.05): rel 0.3.
TOLERANCES: Mapping[str, Tolerance] = {
    "fp32": Tolerance(abs=1e-5, rel=1e-3),
    "fp16": Tolerance(abs=1e-3, rel=0.08),
    "int8": Tolerance(abs=0.0, rel=0.35, steps=32.0),
    "int8-dynamic": Tolerance(abs=1e-3, rel=0.3),
}


@dataclass(frozen=True)
class OutputError:
    """How one output differs from its reference: what an export manifest stores per output."""

    max_abs: float  # max |output − reference|; inf when the output has NaN/inf
    scale: float  # max |reference|: what relative errors are relative to
    #: the output's quantization step (the scale of the dequantize that produces it), if any
    step: float | None = None

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

    def to_json(self) -> dict[str, float | None]:
        """Plain JSON: a non-finite error is stored as null (JSON has no inf)."""
        return {
            "max_abs": self.max_abs if math.isfinite(self.max_abs) else None,
            "scale": self.scale,
            "step": self.step,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, float | None]) -> OutputError:
        max_abs, step = data["max_abs"], data.get("step")
        return cls(
            max_abs=math.inf if max_abs is None else max_abs,
            scale=float(data["scale"]),  # type: ignore[arg-type]
            step=None if step is None else float(step),
        )

    def within(self, tolerance: Tolerance) -> bool:
        """Finite and within tolerance: NaN/inf fails whatever the tolerance."""
        return math.isfinite(self.max_abs) and (
            self.max_abs <= tolerance.limit(self.scale, self.step)
        )


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
    outputs have steps. ``vacuous`` says why the verdict means nothing when the reference
    outputs are degenerate (:func:`degenerate`): it still passes or fails by its numbers.
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
        )

    def describe(self) -> str:
        """One line, e.g. ``max abs err 3.1e-05, max rel err 2.0e-04 (tolerance abs 1e-05 +
        rel 1e-04 of the output range)`` or, in quantization steps, ``max abs err 2.7e-03 =
        1.0 output steps (tolerance 3 steps)``; prefixed with why it is vacuous, if it is."""
        if self.max_steps is not None:
            limits = f"tolerance {self.tolerance_abs:g} + {self.tolerance_steps:g} output steps"
            if self.tolerance_abs == 0:
                limits = f"tolerance {self.tolerance_steps:g} output quantization steps"
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
            text = (
                f"max abs err {self.max_abs:.1e} = {self.max_steps:.1f} output steps, "
                f"max rel err {self.max_rel:.1e} ({limits})"
            )
        else:
            text = f"max abs err {self.max_abs:.1e}, max rel err {self.max_rel:.1e} ({limits})"
        return f"vacuous ({self.vacuous}): {text}" if self.vacuous else text


@dataclass(frozen=True)
class ExportNumerics:
    """What an export found of its numbers, as the case record carries it into the report: the
    program error (judged), the quantization error (recorded; None for fp32) and why the eager
    outputs are degenerate (None when they are not)."""

    program: Numerics
    quantization: Deviation | None = None
    degenerate: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: a NaN/inf error (NaN/inf outputs) is stored as the string ``"inf"``."""
        return {
            "program": _plain_floats(asdict(self.program)),
            "quantization": None
            if self.quantization is None
            else _plain_floats(asdict(self.quantization)),
            "degenerate": self.degenerate,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExportNumerics:
        quantization = data["quantization"]
        return cls(
            program=Numerics(**_read_floats(data["program"])),
            quantization=None if quantization is None else Deviation(**_read_floats(quantization)),
            degenerate=data["degenerate"],
        )

    def describe(self) -> str:
        """One line: the program error, then the quantization error where there is one."""
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
        if not np.isfinite(got64).all():
            errors.append(OutputError(max_abs=math.inf, scale=scale, step=step))
        else:
            diff = float(np.abs(got64 - want64).max(initial=0.0))
            errors.append(OutputError(max_abs=diff, scale=scale, step=step))
    return errors
