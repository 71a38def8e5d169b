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


@dataclass(frozen=True)
class Tolerance:
    """An output passes when every element's error ≤ ``abs + rel × max |reference|``, or, where
    the output has a quantization step (static int8) and the tolerance counts ``steps``:

    * every element's error ≤ ``abs + steps × step``, and
    * where ``rms_spread`` is set, the RMS error ≤ ``rms_spread × std(reference)`` or
      ``rms_steps × step``, whichever is larger.

    Relative to the output's largest magnitude, not element-wise: elements near zero would turn
    harmless rounding into huge element-wise relative errors. In steps where there are steps: an
    int8 program's output is on a grid of that step, so its error is a count of steps whatever
    the output's range. The RMS part is what tells drift from a wrong program: an honest int8
    program strays from the converted model by rounding that accumulates with depth — a
    zero-mean error, tens of steps at its worst element but a fraction of the output's spread
    overall — where a program that computes something else is off by the order of the spread
    everywhere (uncorrelated: √2 × the spread). The floor in steps keeps a near-constant output
    (spread ≈ a step) from failing on one rounding flip.
    """

    abs: float
    rel: float
    steps: float = 0.0
    rms_spread: float = 0.0
    rms_steps: float = 0.0

    def limit(self, scale: float, step: float | None) -> float:
        """The largest error allowed on any element of an output of ``max |reference|``
        ``scale`` and quantization ``step`` (None: not statically quantized)."""
        if self.steps and step is not None:
            return self.abs + self.steps * step
        return self.abs + self.rel * scale

    def rms_limit(self, spread: float, step: float | None) -> float | None:
        """The largest RMS error allowed on an output whose reference has standard deviation
        ``spread``; None where the RMS is not judged (no step, or no RMS tolerance)."""
        if not (self.steps and self.rms_spread) or step is None:
            return None
        return max(self.rms_spread * spread, self.rms_steps * step)


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
#: - int8 (static), in output quantization steps, worst element / RMS over the 1000 logits
#:   (``std`` the reference's, the output's spread): examples toy_cnn and squeezesam_like ≤ 5 / 3,
#:   mobilenet_v3_small 6 / 1.9, vit_tiny 11 / 3.1; the corpus's ten transformers architectures
#:   (benchmarks/corpus.py, host 224 px and the emulated sizes) ResNet-18 and ConvNeXt ≤ 6 / 1.8,
#:   MobileViT 7 / 1.7 (std 6.1: its logits use 36 of the 256 steps), ViT 15 / 4.7,
#:   EfficientNet-B0 22 / 6.3, LeViT 25 / 8.6, MobileNetV2 39 / 10.2 (96 px; std 31.5) and
#:   40 / 0.31 of its spread at width 0.35.
#:   Not a few rounding flips: on inverted-residual nets the program strays from the converted
#:   model about as far as that model strays from fp32 (MobileNetV2's first 6 blocks: 0.13 of
#:   the range vs 0.11; its first 3: 1 step). But it strays at random (mean error ≤ 0.6 steps)
#:   and by at most 0.32 of the spread in RMS (MobileNetV2; LeViT 0.24, MobileViT 0.29). So:
#:   worst element ≤ 64 steps (1/4 of int8's 256; 1.6× the worst honest, 40) and RMS ≤ 0.5 of the
#:   spread (1.6× the worst honest; a program uncorrelated with the model is at 1.41, one with
#:   its weights negated after lowering at 2 and 255 steps: tests/test_export.py), with a floor
#:   of 3 steps for outputs that use few steps (MobileViT at 128 px: spread 2.6 steps, RMS 1.2).
#:   Outputs computed in float after their last dequantize have no step: rel 0.35 (measured
#:   ≤ 0.03), also SME2-on/off parity's tolerance for int8, as before.
#: - int8-dynamic: XNNPACK chooses activation scales per row where the converted model does per
#:   tensor, so the program strays from it by the order of the quantization error itself:
#:   ≤ 0.16 of the range (MobileNetV2-style, whose quantization error is 0.22; the others
#:   ≤ 0.05): rel 0.3.
#: - 8da4w: the torchao model quantizes activations per token, asymmetrically, as XNNPACK's QP8
#:   kernels do, so the program stays close to it: ≤ 0.009 of the range (tiny_llama's prefill
#:   and decode, an MLP with a layer left in fp32: 0.005) while its quantization error is 0.07:
#:   rel 0.05.
TOLERANCES: Mapping[str, Tolerance] = {
    "fp32": Tolerance(abs=1e-5, rel=1e-3),
    "fp16": Tolerance(abs=1e-3, rel=0.08),
    "int8": Tolerance(abs=0.0, rel=0.35, steps=64.0, rms_spread=0.5, rms_steps=3.0),
    "int8-dynamic": Tolerance(abs=1e-3, rel=0.3),
    "8da4w": Tolerance(abs=1e-3, rel=0.05),
}

#: Labels other exporters give their programs (``register_program(dtype=...)``) → the built-in
#: dtype whose tolerance fits how they compute: optimum-executorch's ``8da8w`` (dynamically
#: quantized int8 activations, int8 weights) is XNNPACK's QP8/QD8 × QC8W path, our int8-dynamic.
LABEL_DTYPES: Mapping[str, str] = {
    "8da8w": "int8-dynamic",
    "int8-dynamic-activations": "int8-dynamic",
    "qd8": "int8-dynamic",
    "int8-static": "int8",
    "qint8": "int8",
    "pt2e": "int8",
    "4w": "8da4w",
    "int4": "8da4w",
    "float32": "fp32",
    "f32": "fp32",
    "float16": "fp16",
    "f16": "fp16",
    "half": "fp16",
    "bf16": "fp16",
}


def tolerance_for(label: str) -> Tolerance:
    """The tolerance of a dtype or program label, from the one lookup that always answers: the
    built-in dtype's, else that of the dtype the label is known to mean (case, ``_`` for ``-``
    and :data:`LABEL_DTYPES`), else fp32's — the strictest, so an unknown label can only be
    judged too closely, never let a wrong number pass. A registered tolerance wins over it
    (``register_program(tolerance=...)``)."""
    name = label.lower().replace("_", "-")
    dtype = name if name in TOLERANCES else LABEL_DTYPES.get(name, "fp32")
    return TOLERANCES[dtype]


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
