"""Output comparison and its per-dtype judgement (export vs eager, SME2-on vs SME2-off)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pytest_sme2.analysis.numerics import (
    Deviation,
    ExportNumerics,
    MismatchError,
    Numerics,
    OutputError,
    compare_outputs,
    degenerate,
)
from pytest_sme2.analysis.tolerances import TOLERANCES, Tolerance


def test_numerics_pass_within_tolerance_of_the_output_range() -> None:
    tolerance = Tolerance(abs=1e-3, rel=1e-2)
    numerics = Numerics.judge([OutputError(max_abs=0.05, scale=10.0)], tolerance)
    assert numerics.ok
    assert numerics.max_rel == pytest.approx(0.005)
    assert numerics.describe() == (
        "max abs err 5.0e-02, max rel err 5.0e-03 "
        "(tolerance abs 0.001 + rel 0.01 of the output range)"
    )


def test_numerics_fail_when_any_output_is_beyond_tolerance() -> None:
    tolerance = Tolerance(abs=1e-3, rel=1e-2)
    good, bad = OutputError(max_abs=1e-4, scale=1.0), OutputError(max_abs=0.5, scale=1.0)
    assert not Numerics.judge([good, bad], tolerance).ok


def test_nan_and_inf_always_fail() -> None:
    expected = [np.ones((2, 3), dtype=np.float32)]
    for poison in (np.nan, np.inf, -np.inf):
        got = expected[0].copy()
        got[1, 2] = poison
        errors = compare_outputs([got], expected)
        numerics = Numerics.judge(errors, Tolerance(abs=math.inf, rel=math.inf))
        assert not numerics.ok
        assert "NaN/inf" in numerics.describe()
        stored = json.dumps([error.to_json() for error in errors], allow_nan=False)
        assert [OutputError.from_json(item) for item in json.loads(stored)] == errors


def test_fp16_program_outputs_compare_in_full_precision() -> None:
    want = np.array([[1.0, -2.0, 3.0]], dtype=np.float32)
    got = want.astype(np.float16)
    (error,) = compare_outputs([got], [want])
    assert error.max_abs == 0.0 and error.scale == 3.0


def test_shape_and_count_mismatches_say_which_output() -> None:
    with pytest.raises(MismatchError, match=r"output 0 has shape \(1, 2\), eager's is \(1, 3\)"):
        compare_outputs([np.zeros((1, 2))], [np.zeros((1, 3))], what="eager")
    with pytest.raises(MismatchError, match="program gave 2 outputs, reference 1"):
        compare_outputs([np.zeros(1), np.zeros(1)], [np.zeros(1)])


def test_int8_outputs_are_judged_in_their_quantization_steps() -> None:
    tolerance = Tolerance(abs=0.0, rel=0.05, steps=3.0)
    near = OutputError(max_abs=0.02, scale=1.0, step=0.01)  # 2 steps
    far = OutputError(max_abs=0.04, scale=1.0, step=0.01)  # 4 steps, yet 4 % of the range
    assert near.within(tolerance) and not far.within(tolerance)
    # an output without a step (computed in float after its last dequantize) falls back to rel
    assert OutputError(max_abs=0.04, scale=1.0).within(tolerance)
    numerics = Numerics.judge([near], tolerance, reference="the converted int8 model")
    assert numerics.max_steps == pytest.approx(2.0)
    assert numerics.describe() == (
        "max abs err 2.0e-02 = 2.0 output steps, max rel err 2.0e-02 "
        "(against the converted int8 model; tolerance 3 output quantization steps)"
    )
    stored = json.loads(json.dumps(near.to_json()))
    assert OutputError.from_json(stored) == near


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [
        ([np.zeros((1, 10), np.float32)], "output 0 is all zero"),
        ([np.full((1, 10), 3e-40, np.float32)], "output 0 is denormal (max |x| 3.0e-40)"),
        (
            [np.linspace(-1, 1, 10, dtype=np.float32), np.full((2, 2), 0.5, np.float32)],
            "output 1 is constant (0.5 everywhere)",
        ),
        ([np.array([1.0, np.nan], np.float32)], "output 0 is non-finite (NaN/inf)"),
        ([np.linspace(-1, 1, 10, dtype=np.float32)], None),
        ([np.array([[0.25]], np.float32)], None),  # a single value is not "constant"
    ],
)
def test_degenerate_outputs_are_named(outputs: list[np.ndarray], expected: str | None) -> None:
    assert degenerate(outputs) == expected


def test_a_vacuous_verdict_says_so_first() -> None:
    zeros = [np.zeros((1, 4), np.float32)]
    numerics = Numerics.judge(
        compare_outputs(zeros, zeros), Tolerance(abs=1e-5, rel=1e-4), vacuous=degenerate(zeros)
    )
    assert numerics.ok
    assert numerics.describe().startswith("vacuous (output 0 is all zero): max abs err 0.0e+00")


def test_export_numerics_survive_json_with_nan_outputs() -> None:
    program = Numerics.judge(
        [OutputError(max_abs=math.inf, scale=1.0, step=0.1)],
        Tolerance(abs=0.0, rel=0.05, steps=3.0),
        reference="the converted int8 model",
    )
    numerics = ExportNumerics(
        program, Deviation(0.1, 0.01, "converted vs eager fp32"), "output 0 is all zero"
    )
    stored = json.dumps(numerics.to_json(), allow_nan=False)
    assert ExportNumerics.from_json(json.loads(stored)) == numerics
    assert "NaN/inf" in numerics.describe() and "quantization error" in numerics.describe()


def test_static_int8_judges_the_rms_against_the_outputs_spread() -> None:
    """Drift (zero-mean, a fraction of the spread) passes even with elements tens of steps off;
    a program that computes something else fails on its RMS while no element is past 64 steps."""
    int8 = TOLERANCES["int8"]
    step = 0.01
    rng = np.random.default_rng(0)
    reference = rng.integers(-30, 31, (1, 1000)) * step  # spread ~17.6 steps
    drift = reference + np.round(rng.normal(0.0, 5.3, reference.shape)) * step  # RMS 0.3 spread
    (honest,) = compare_outputs([drift], [reference], steps=[step])
    assert honest.max_steps is not None and honest.max_steps > 15  # the worst element strays far
    assert honest.rms_spread == pytest.approx(0.3, abs=0.03)
    assert honest.within(int8)
    other = rng.permutation(reference.ravel()).reshape(reference.shape)  # uncorrelated
    (wrong,) = compare_outputs([other], [reference], steps=[step])
    assert wrong.max_steps is not None and wrong.max_steps <= int8.steps
    assert wrong.rms_spread is not None and wrong.rms_spread > 1.2
    assert not wrong.within(int8)
    numerics = Numerics.judge([wrong], int8, reference="the converted int8 model")
    assert not numerics.ok and numerics.rms_spread == wrong.rms_spread
    assert (
        f"RMS {numerics.rms_steps:.1f} steps = {wrong.rms_spread:.2f} of the output's spread"
        in (numerics.describe())
    )
    assert "RMS 0.5 of the spread or 3 steps" in numerics.describe()
    headline = (
        f"{wrong.max_steps:.1f} steps, RMS {numerics.rms_steps:.1f} steps = "
        f"{wrong.rms_spread:.2f} of spread"
    )
    assert numerics.headline() == headline


def test_a_near_constant_int8_output_may_flip_a_few_steps() -> None:
    """An output whose spread is under a step fails on no single rounding flip: the RMS floor."""
    step = 0.01
    reference = np.zeros((1, 100))
    reference[0, 0] = step
    flipped = reference.copy()
    flipped[0, 1:3] = step
    (error,) = compare_outputs([flipped], [reference], steps=[step])
    assert error.rms_spread is not None and error.rms_spread > TOLERANCES["int8"].rms_spread
    assert error.within(TOLERANCES["int8"])


def test_records_made_before_the_rms_was_kept_still_load() -> None:
    """An export manifest's output record from before: no ``rms_abs``: judged by its worst
    element, and written back as it was."""
    stored = {"max_abs": 0.2, "scale": 1.0, "step": 0.01}
    old = OutputError.from_json(stored)
    assert old.rms_abs is None and old.rms_spread is None
    assert old.within(TOLERANCES["int8"]) and old.to_json() == stored
    nan = OutputError(max_abs=math.inf, scale=1.0, step=0.01, rms_abs=math.inf, spread=0.3)
    assert OutputError.from_json(json.loads(json.dumps(nan.to_json()))) == nan
