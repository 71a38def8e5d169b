"""The tolerances program outputs are judged by: what a tolerance is (:class:`Tolerance`), the
built-in dtypes' (:data:`TOLERANCES`, with how they were calibrated) and the one lookup that
answers for any dtype or program label (:func:`tolerance_for`).

Apart from :mod:`pytest_sme2.analysis.numerics`, which compares outputs and judges the errors by
these: what is allowed, and why, reads on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


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
#:   its weights negated after lowering at 2 and 255 steps: tests/export/test_export.py), with a
#:   floor of 3 steps for outputs that use few steps (MobileViT at 128 px: spread 2.6 steps, RMS
#:   1.2). Outputs computed in float after their last dequantize have no step: rel 0.35 (measured
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
