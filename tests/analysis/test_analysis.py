"""Analysis over hand-built traces: E2E from Method::execute, Other as residual, warm-up, shares."""

from __future__ import annotations

import pytest

from pytest_sme2.analysis.categories import CATEGORIES
from pytest_sme2.analysis.profile import compare, profile
from pytest_sme2.analysis.trace import Event, Run, Trace
from pytest_sme2.errors import TraceError

MS = 1_000_000  # ns


def ev(
    name: str, start_ms: float, end_ms: float, parent: int, depth: int, delegated=False
) -> Event:
    return Event(
        name=name,
        start_ns=int(start_ms * MS),
        end_ns=int(end_ms * MS),
        parent=parent,
        depth=depth,
        delegated=delegated,
        delegate_debug_id="1" if delegated else None,
        instruction_id=-1,
    )


def make_run(index: int, scale: float = 1.0) -> Run:
    """10 ms execute: a 7 ms delegate call (conv 3, gemm 2, transpose 1) and a 2 ms native mean."""
    s = scale
    events = (
        ev("Method::execute", 0, 10 * s, -1, 0),
        ev("DELEGATE_CALL", 0.5 * s, 7.5 * s, 0, 1),
        ev("Convolution (NHWC, F32) IGEMM #1", 0.5 * s, 3.5 * s, 1, 2, True),
        ev("Fully Connected (NC, F32) GEMM #1", 3.5 * s, 5.5 * s, 1, 2, True),
        ev("Transpose (ND, X32) #1", 5.5 * s, 6.5 * s, 1, 2, True),
        ev("OPERATOR_CALL", 7.5 * s, 9.5 * s, 0, 1),
        ev("native_call_mean.out", 7.6 * s, 9.4 * s, 5, 2),
    )
    return Run(index=index, e2e_ns=events[0].end_ns - events[0].start_ns, events=events)


def test_e2e_is_method_execute_and_categories_sum_to_it():
    trace = Trace(path=None, runs=(make_run(0), make_run(1)), setup_events=())
    prof = profile(trace)
    assert prof.e2e_ms == pytest.approx((10.0, 10.0))
    assert sum(prof.categories_ms.values()) == pytest.approx(prof.latency.mean_ms)
    assert prof.categories_ms["Convolution"] == pytest.approx(3.0)
    assert prof.categories_ms["GEMM"] == pytest.approx(2.0)
    assert prof.categories_ms["Data Movement"] == pytest.approx(1.0)
    # Other is the residual: 10 − (3 + 2 + 1 + whatever category the native mean kernel has).
    named = sum(v for c, v in prof.categories_ms.items() if c != "Other")
    assert prof.categories_ms["Other"] == pytest.approx(10.0 - named)
    assert list(prof.categories_ms) == list(CATEGORIES)


def test_wrappers_are_not_counted_as_operators():
    prof = profile(Trace(path=None, runs=(make_run(0),), setup_events=()))
    names = {op.name for op in prof.operators}
    assert "DELEGATE_CALL" not in names and "OPERATOR_CALL" not in names
    assert "Method::execute" not in names
    assert "Convolution (NHWC, F32) IGEMM" in names  # instance number stripped
    assert prof.delegated_ms == pytest.approx(7.0)
    assert prof.non_delegated_ms == pytest.approx(2.0)


def test_operator_share_is_of_e2e_not_of_a_sum_of_rows():
    prof = profile(Trace(path=None, runs=(make_run(0),), setup_events=()))
    conv = next(op for op in prof.operators if op.category == "Convolution")
    assert conv.share == pytest.approx(0.3)
    assert conv.delegated
    mean = next(op for op in prof.operators if op.name == "native_call_mean.out")
    assert not mean.delegated


def test_warmup_runs_are_dropped():
    cold, warm = make_run(0, scale=5.0), make_run(1)
    prof = profile(Trace(path=None, runs=(cold, warm), setup_events=()), warmup=1)
    assert prof.e2e_ms == pytest.approx((10.0,))
    assert prof.warmup == 1


def test_warmup_that_leaves_nothing_is_a_clear_error():
    with pytest.raises(TraceError, match="nothing left after dropping 3 warm-up"):
        profile(Trace(path=None, runs=(make_run(0),), setup_events=()), warmup=3)


def test_comparison_speedup_is_off_over_on_medians():
    fast = profile(Trace(path=None, runs=(make_run(0, 0.5),), setup_events=()))
    slow = profile(Trace(path=None, runs=(make_run(0),), setup_events=()))
    comparison = compare(
        fast,
        slow,
        on_latencies_ms=[5.0, 5.1, 4.9],
        off_latencies_ms=[10.0, 10.2, 9.8],
        interleaved=True,
    )
    assert comparison.speedup.value == pytest.approx(2.0)
    assert comparison.speedup.low <= 2.0 <= comparison.speedup.high
    assert comparison.category_speedups["Convolution"] == pytest.approx(2.0)
    assert comparison.operator_speedups["Transpose (ND, X32)"] == pytest.approx(2.0)


def test_operator_speedups_pair_packed_sme2_on_names_with_their_sme2_off_twins():
    from tests.measurements import SME2_DEVICE, measurement

    comparison = measurement(SME2_DEVICE).comparison
    speedups = comparison.operator_speedups
    assert speedups["Convolution (NHWC, F32) IGEMM"] == pytest.approx(4.0)
    assert speedups["Fully Connected (NC, F32) GEMM"] == pytest.approx(3.0)
    assert speedups["Transpose (ND, X32)"] == pytest.approx(1.0)
