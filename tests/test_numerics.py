"""Output comparison and its per-dtype judgement (export vs eager, SME2-on vs SME2-off)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pytest_sme2.numerics import MismatchError, Numerics, OutputError, Tolerance, compare_outputs


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
