"""The example cases ExecuTorch 1.5.1 cannot export, each with its stage and cause.

Tests over every example model × dtype parametrize through :func:`example_cases`: a listed case
is an ``xfail(strict=True)`` that must fail at its stage with its cause (``expect_known``), so any
other failure of any case fails the test, and a listed case that starts to export is an XPASS
that fails too (remove it from the list, and record its baselines).
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from pytest_sme2.errors import ExportError
from pytest_sme2.export.model_spec import ModelSpec, registered_models

#: (model, dtype) → (the stage it fails at, text its cause contains)
KNOWN_EXPORT_FAILURES: dict[tuple[str, str], tuple[str, str]] = {
    # XNNPACK's dynamic-int8 quantizer leaves a convolution half quantized
    ("squeezesam_like", "int8-dynamic"): ("lower", "Weight and Input should both be quantized"),
    # the portable fp16 LayerNorm computes wrong numbers from width 256 (ViT's 192 × 2)
    ("vit_tiny", "fp16"): ("numerics", "against eager fp16 PyTorch"),
}


def example_cases(specs: Iterable[ModelSpec] | None = None) -> list:
    """``pytest.param(spec, dtype)`` for every model × dtype of ``specs`` (default: every
    registered model), each known failure a strict xfail that must raise ExportError."""
    params = []
    for spec in registered_models() if specs is None else specs:
        for dtype in spec.dtypes:
            known = KNOWN_EXPORT_FAILURES.get((spec.name, dtype))
            marks = (
                [pytest.mark.xfail(strict=True, raises=ExportError, reason=f"fails at {known[0]}")]
                if known
                else []
            )
            params.append(pytest.param(spec, dtype, id=f"{spec.name}-{dtype}", marks=marks))
    return params


def expect_known(err: ExportError) -> ExportError:
    """``err`` if it is its case's known failure (stage and cause as listed), for the caller to
    raise into the strict xfail; an AssertionError naming the difference otherwise."""
    known = KNOWN_EXPORT_FAILURES.get((err.model, err.dtype))
    assert known is not None, f"an example stopped exporting: {err}"
    stage, cause = known
    assert err.stage == stage and cause in str(err), (
        f"{err.model}[{err.dtype}] fails otherwise than known ({stage}: {cause!r}): {err}"
    )
    return err
