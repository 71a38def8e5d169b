"""The thread sweep without a runner: the knee and gains (``analysis.scaling``), the marker's
per-thread floors and the thread-gain gate (``judge.thread_gates``), the emulated thread counts
not judged, and the view in every report (``report.scaling_view``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sme2.analysis.scaling import ThreadFigure, knee, scaling, thread_gain
from pytest_sme2.errors import ConfigError
from pytest_sme2.judge.baseline import Tolerances, from_measurement
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gates import judge
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.outcome import CaseOutcome
from pytest_sme2.records.verdict import Status
from pytest_sme2.report.html import scaling_html
from pytest_sme2.report.markdown import session_markdown
from pytest_sme2.report.scaling_view import case_view, scaling_table, scaling_views
from pytest_sme2.report.session_report import build_session_report
from pytest_sme2.report.terminal import scaling_lines
from tests.measurements import HOST, SME2_DEVICE, counted_measurement, measurement

OFF, ON = str(Variant.OFF), str(Variant.ON)


def by_gate(verdicts):
    return {v.gate: v for v in verdicts}


def test_the_knee_is_the_last_count_before_a_step_that_cuts_e2e_by_less_than_ten_percent():
    found = knee(ON, [(1, 10.0), (2, 5.2), (4, 5.0), (8, 2.0)])
    assert (found.threads, found.stops) == (2, True)
    assert found.sentence == (
        "sme2-on stops gaining after 2 threads: 2→4 threads cut E2E by only 4% "
        "(a step must cut ≥ 10%)."
    )


def test_a_variant_gaining_at_every_step_is_still_gaining_at_the_largest_count():
    found = knee(OFF, [(1, 10.0), (2, 5.5), (4, 3.0)])
    assert (found.threads, found.stops) == (4, False)
    assert found.sentence.startswith("sme2-off is still gaining at 4 threads, the largest measured")


def test_a_slower_step_is_said_as_slower_and_one_count_has_no_knee():
    assert "1→2 threads made E2E 20% slower" in knee(OFF, [(1, 1.0), (2, 1.2)]).sentence
    lone = knee(OFF, [(1, 1.0)], skipped="2 threads not judged: emulated threads")
    assert lone.threads is None
    assert lone.sentence == (
        "sme2-off: no knee: fewer than two thread counts judged "
        "(2 threads not judged: emulated threads)."
    )


def test_gain_and_efficiency_are_against_the_fewest_threads_per_variant():
    sweep = scaling(
        [
            ThreadFigure(4, {OFF: 4.0, ON: 2.0}, 2.0),
            ThreadFigure(1, {OFF: 12.0, ON: 4.0}, 3.0),
            ThreadFigure(2, {OFF: 6.0, ON: 2.2}, 2.7),
        ]
    )
    assert [row.figure.threads for row in sweep.rows] == [1, 2, 4]
    assert sweep.rows[2].gain == {OFF: 3.0, ON: 2.0}
    assert sweep.rows[2].efficiency == {OFF: 0.75, ON: 0.5}
    assert [(k.variant, k.threads, k.stops) for k in sweep.knees] == [
        (OFF, 4, False),
        (ON, 2, True),
    ]
    with pytest.raises(ValueError, match="appears twice"):
        scaling([ThreadFigure(1, {OFF: 1.0}), ThreadFigure(1, {OFF: 1.0})])


def test_the_thread_gain_is_the_fastest_runs_ratio():
    assert thread_gain([2.0, 1.0, 3.0], [0.9, 0.5]) == 2.0


def test_floors_per_thread_count_are_read_from_the_marker():
    exp = Expectations.from_marker(
        {"speedup_floor": {1: 2.0, "4": 1.2}, "min_thread_gain": {2: 1.5}}
    )
    assert (exp.speedup_floor_at(1), exp.speedup_floor_at(2), exp.speedup_floor_at(4)) == (
        2.0,
        None,
        1.2,
    )
    assert (exp.thread_gain_floor(2), exp.thread_gain_floor(4)) == (1.5, None)
    assert Expectations(speedup_floor=1.5).speedup_floor_at(8) == 1.5


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"min_thread_gain": {1: 1.5}}, "min_thread_gain={1: 1.5}: '1' does not match"),
        ({"min_thread_gain": {2: 0}}, "min_thread_gain={2: 0}: 0 is less than or equal to"),
        ({"speedup_floor": {"two": 1.5}}, "speedup_floor={'two': 1.5}: 'two' does not match"),
    ],
)
def test_a_wrong_thread_count_or_floor_is_named(kwargs, said):
    with pytest.raises(ConfigError) as failure:
        Expectations.from_marker(kwargs)
    assert str(failure.value).startswith(said)


def at_threads(m: Measurement, threads: int, one_thread: dict | None = None) -> Measurement:
    return replace(m, threads=threads, one_thread_ms=one_thread or {})


def test_the_speedup_floor_of_the_case_thread_count_is_judged():
    m = at_threads(measurement(SME2_DEVICE), 4)  # 2.5× speedup
    exp = Expectations(speedup_floor={1: 3.0, 4: 2.0})
    verdict = by_gate(judge(m, None, exp, Tolerances()))["speedup-floor"]
    assert verdict.status is Status.PASS and "floor 2× at 4 threads" in verdict.message
    failed = by_gate(judge(at_threads(m, 1), None, exp, Tolerances()))["speedup-floor"]
    assert failed.status is Status.FAIL and "floor 3× at 1 threads" in failed.message


def test_the_thread_gain_gate_fails_a_model_that_stopped_scaling_and_passes_one_that_scales():
    exp = Expectations(min_thread_gain={2: 1.5})
    base = measurement(HOST, off_latencies=(6.0, 6.2, 6.1))
    scales = at_threads(base, 2, {Variant.OFF: (10.0, 10.4, 10.2)})
    stopped = at_threads(base, 2, {Variant.OFF: (7.0, 7.3, 7.1)})
    passed = by_gate(judge(scales, None, exp, Tolerances()))["thread-gain[sme2-off]"]
    assert passed.status is Status.PASS
    assert passed.message == "sme2-off gains 1.67× from 1 to 2 threads ≥ floor 1.5×"
    failed = by_gate(judge(stopped, None, exp, Tolerances()))["thread-gain[sme2-off]"]
    assert failed.status is Status.FAIL
    assert failed.message == (
        "sme2-off of toy[fp32] on host, 2 threads gains 1.17× from 1 to 2 threads, below the "
        "floor 1.5× (min_thread_gain)"
    )
    assert failed.details == (
        "fastest of 3 runs at 1 thread 7 ms, of 3 at 2 threads 6 ms, timed in the same rounds",
    )
    # a case at another thread count has no gain floor; one measured without 1-thread runs says so
    assert "thread-gain[sme2-off]" not in by_gate(
        judge(at_threads(base, 4), None, exp, Tolerances())
    )
    unpaired = by_gate(judge(at_threads(base, 2), None, exp, Tolerances()))["thread-gain"]
    assert unpaired.status is Status.SKIP and "no 1-thread runs" in unpaired.message


def test_a_multithreaded_emulated_case_judges_no_instruction_count_and_stores_none():
    m = at_threads(counted_measurement(), 2)
    stored = from_measurement(counted_measurement(), Tolerances())  # a 1-thread-like record
    exp = Expectations(instruction_ratio_floor=1.5, min_thread_gain={2: 1.5})
    verdicts = by_gate(judge(m, stored, exp, Tolerances()))
    assert not [gate for gate in verdicts if gate.startswith(("instructions[", "instruction-"))]
    skip = verdicts["emulated-threads"]
    assert skip.status is Status.SKIP and "not judged: emulated threads" in skip.message
    assert verdicts["thread-gain"].status is Status.SKIP
    assert "not judged: emulated threads" in verdicts["thread-gain"].message
    written = from_measurement(m, Tolerances())
    assert written.figures["instruction_ratio"] is None
    assert all(
        v.instructions is None and not v.instruction_shares and "init_instructions" not in v.figures
        for v in written.variants.values()
    )
    # one thread is judged as ever
    one = by_gate(judge(counted_measurement(), stored, exp, Tolerances()))
    assert one["instructions[sme2-on]"].status is Status.PASS
    assert "emulated-threads" not in one


def host_sweep() -> list[Measurement]:
    base = measurement(HOST)
    return [
        at_threads(
            replace(
                base, variants={Variant.OFF: replace(base.variants[Variant.OFF], latencies_ms=ms)}
            ),
            t,
        )
        for t, ms in ((1, (10.0, 10.5)), (2, (5.4, 6.0)), (4, (5.2, 5.9)))
    ]


def test_the_session_view_of_a_host_sweep_in_every_report(tmp_path: Path):
    sweep = host_sweep()
    (view,) = scaling_views([*sweep, measurement(HOST)])  # a 1-thread re-run counts once
    table = scaling_table(view)
    assert table.headers == (
        "threads",
        "sme2-off fastest E2E ms",
        "sme2-off gain",
        "sme2-off efficiency",
    )
    assert table.rows[1] == ("2", "5.400", "1.85×", "92.6%")
    knee_line = "sme2-off stops gaining after 2 threads: 2→4 threads cut E2E by only 4%"
    lines = scaling_lines([view])
    assert lines[0] == "toy[fp32] on host:" and any(knee_line in line for line in lines)
    outcomes = [CaseOutcome(f"t{m.threads}", "host", m.model, m.dtype, m.threads, m) for m in sweep]
    report = session_markdown(build_session_report(outcomes, here=tmp_path))
    assert "## Thread scaling: toy[fp32] on host" in report and knee_line in report
    page = scaling_html([view])
    assert 'data-chart="scaling"' in page and knee_line in page
    assert scaling_views(sweep[:1]) == []  # one thread count: no sweep


def test_an_emulated_sweep_says_not_judged_beyond_one_thread():
    one = counted_measurement()
    (view,) = scaling_views([one, at_threads(one, 2)])
    rows = scaling_table(view).rows
    assert rows[0][:2] == ("1", "9,000,000")  # SME2-off's counted inference
    assert rows[1][1:] == ("—",) * 6 + ("—", "not judged: emulated threads")
    assert all("no knee" in knee.sentence for knee in view.scaling.knees)
    assert "2 threads not judged: emulated threads" in view.scaling.knees[0].sentence


def test_a_case_that_timed_its_one_thread_runs_shows_its_own_view():
    m = at_threads(measurement(HOST, off_latencies=(6.0, 6.5)), 2, {Variant.OFF: (10.0, 11.0)})
    view = case_view(m)
    assert view is not None and scaling_table(view).rows[1][:3] == ("2", "6.000", "1.67×")
    assert case_view(measurement(HOST)) is None
    assert Measurement.from_json(m.to_json(Path.cwd()), Path.cwd()) == m
