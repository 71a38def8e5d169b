"""Splitting a counted inference's instructions between its ETDump events, on hand-built runs.

The layout is the one a real traced inference under qemu shows
(tests/devices/test_qemu_attribution.py checks it on real runs): the tracer stamps non-delegated
events with a clock read each at start and end; inside a delegate call come the profiler's start
(the first operator event's start), XNNPACK's start, one read after each operator, then the call's
end.
"""

from __future__ import annotations

import json

import pytest

from pytest_sme2.analysis.attribution import ClockRead, instruction_run, instruction_trace
from pytest_sme2.analysis.profile import INSTRUCTIONS, NAMED_CATEGORIES, OTHER, Profile, profile
from pytest_sme2.analysis.trace import Event, Run, Trace
from pytest_sme2.errors import TraceError

ORIGIN = 1_000_000  # the ETDump's times are the reads less a per-process origin


def _event(name: str, start: int, end: int, parent: int, depth: int, delegated=False) -> Event:
    return Event(name, start, end, parent, depth, delegated, "1" if delegated else None, 0)


def _run() -> tuple[Run, list[ClockRead]]:
    """execute ⊃ (delegate ⊃ transpose, conv) + (operator call ⊃ native mean): the reads'
    values (ETDump time + ORIGIN) and the instructions executed when each returned."""
    reads = [
        (100, 0),  # Method::execute start
        (110, 40),  # DELEGATE_CALL start
        (120, 90),  # profiler start = first operator event's start
        (125, 100),  # XNNPACK start
        (140, 1_100),  # after the transpose
        (190, 9_100),  # after the convolution
        (200, 9_200),  # DELEGATE_CALL end
        (210, 9_300),  # OPERATOR_CALL start
        (215, 9_320),  # native_call start
        (260, 12_320),  # native_call end
        (265, 12_340),  # OPERATOR_CALL end
        (300, 12_500),  # Method::execute end
        (305, 12_520),  # the caller's clock read after the call
    ]
    events = (
        _event("Method::execute", 100, 300, -1, 0),
        _event("DELEGATE_CALL", 110, 200, 0, 1),
        # synthetic: back to back from the profiler's start, in whole microseconds
        _event("Transpose (ND, X32) #1", 120, 135, 1, 2, delegated=True),
        _event("Convolution (NHWC, PF32) IGEMM #1", 135, 185, 1, 2, delegated=True),
        _event("OPERATOR_CALL", 210, 265, 0, 1),
        _event("native_call_mean.out", 215, 260, 4, 2),
    )
    run = Run(index=1, e2e_ns=200, events=events)
    return run, [ClockRead(ns + ORIGIN, count) for ns, count in reads]


def test_events_take_the_instructions_between_their_reads() -> None:
    run, reads = _run()
    counted = instruction_run(run, reads, "t.etdump")
    spans = {e.name: e.end_ns - e.start_ns for e in counted.events}
    assert spans == {
        "Method::execute": 12_500,
        "DELEGATE_CALL": 9_160,
        "Transpose (ND, X32) #1": 1_000,  # XNNPACK's start → after the first operator
        "Convolution (NHWC, PF32) IGEMM #1": 8_000,
        "OPERATOR_CALL": 3_040,
        "native_call_mean.out": 3_000,
    }
    assert counted.events[0].start_ns == 0 and counted.e2e_ns == 12_500
    assert [e.parent for e in counted.events] == [e.parent for e in run.events]


def test_the_profile_of_counted_events_is_in_instructions_with_other_the_residual() -> None:
    run, reads = _run()
    trace = instruction_trace(Trace(path=None, runs=(run, run), setup_events=()), 1, reads)
    prof = profile(trace, unit=INSTRUCTIONS)
    assert prof.counts_instructions and prof.runs == 1
    per_op = {op.name: round(op.per_run_ms * 1e6) for op in prof.operators}
    assert per_op == {
        "Convolution (NHWC, PF32) IGEMM": 8_000,
        "Transpose (ND, X32)": 1_000,
        "native_call_mean.out": 3_000,
    }
    assert sum(per_op.values()) <= 12_500
    named = sum(prof.categories_ms[c] for c in NAMED_CATEGORIES)
    assert prof.categories_ms[OTHER] == pytest.approx(12_500e-6 - named)
    assert prof.shares["Data Movement"] == pytest.approx(1_000 / 12_500)


def test_an_instruction_profile_names_its_unit_in_every_json_key() -> None:
    """A reader that takes ``*_ms`` for time (the reference kit's tools) never gets
    instructions; the record reads back equal, and so does one written before the keys said so."""
    run, reads = _run()
    trace = instruction_trace(Trace(path=None, runs=(run, run), setup_events=()), 1, reads)
    prof = profile(trace, unit=INSTRUCTIONS)
    text = json.dumps(prof.to_json())
    assert "_ms" not in text and '"e2e_minstr": [0.0125]' in text
    assert Profile.from_json(json.loads(text)) == prof
    older = json.loads(text.replace("_minstr", "_ms"))
    assert Profile.from_json(older) == prof


def test_reads_of_another_run_are_refused() -> None:
    run, reads = _run()
    shifted = [ClockRead(r.ns + 7 if r.ns else None, r.instructions) for r in reads[1:]]
    with pytest.raises(TraceError, match="not of the same run"):
        instruction_run(run, shifted, "t.etdump")


def test_operator_reads_that_do_not_match_the_events_are_refused() -> None:
    """XNNPACK reads once per operator object: an extra read means the operators cannot be told
    apart, which must fail loudly rather than shift every count by one operator."""
    run, reads = _run()
    extra = [*reads[:5], ClockRead(None, 5_000), *reads[5:]]
    with pytest.raises(TraceError, match="after 3 operator"):
        instruction_run(run, extra, "t.etdump")


def test_an_operator_run_as_two_objects_takes_both_reads() -> None:
    """XNNPACK runs a copy as two operator objects, each followed by a read; the copy's event
    lasts the sum of their elapsed times floored to microseconds (108 + 1222 = 1330 µs, as in
    a real vit_tiny trace), which tells the split."""
    us = 1000
    reads = [
        (0, 0),  # Method::execute start
        (10 * us, 10),  # DELEGATE_CALL start
        (20 * us, 20),  # profiler start
        (21 * us, 30),  # XNNPACK start
        (21 * us + 2_268_342, 5_030),  # after the transpose: 2268 µs
        (21 * us + 2_376_822, 5_530),  # copy, first object: 108.48 µs
        (21 * us + 3_599_775, 9_530),  # copy, second object: 1222.953 µs
        (21 * us + 3_644_051, 9_630),  # after the add: 44 µs
        (3_700 * us, 9_700),  # DELEGATE_CALL end
        (3_800 * us, 9_800),  # Method::execute end
    ]
    start = 20 * us
    events = (
        _event("Method::execute", 0, 3_800 * us, -1, 0),
        _event("DELEGATE_CALL", 10 * us, 3_700 * us, 0, 1),
        _event("Transpose (ND, X32) #1", start, start + 2268 * us, 1, 2, delegated=True),
        _event("Copy (NC, X32) #1", start + 2268 * us, start + 3598 * us, 1, 2, delegated=True),
        _event("Add (ND) #1", start + 3598 * us, start + 3642 * us, 1, 2, delegated=True),
    )
    run = Run(index=0, e2e_ns=3_800 * us, events=events)
    counted = instruction_run(run, [ClockRead(ns + ORIGIN, n) for ns, n in reads], "t.etdump")
    spans = {e.name: e.end_ns - e.start_ns for e in counted.events}
    assert spans["Transpose (ND, X32) #1"] == 5_000
    assert spans["Copy (NC, X32) #1"] == 4_500  # both objects
    assert spans["Add (ND) #1"] == 100
