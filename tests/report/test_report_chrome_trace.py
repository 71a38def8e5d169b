"""Chrome Trace Event Format: one complete slice per ETDump event, valid nesting, µs units."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_sme2.analysis.trace import EXECUTE, Event, Run, Trace, read_etdump
from pytest_sme2.report.chrome_trace import GRID_NS, chrome_trace, write_chrome_trace

DATA = Path(__file__).parents[1] / "data"
REAL_TRACES = sorted(DATA.glob("*.etdp"))
MS = 1_000_000


def slices(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def end(s: dict) -> float:
    return s["ts"] + s["dur"]


def assert_valid_nesting(track: list[dict]) -> None:
    """Slices on one track must nest like a call stack (Perfetto and chrome://tracing need it):
    any two are disjoint or one contains the other."""
    stack: list[dict] = []
    for s in sorted(track, key=lambda s: (s["ts"], -s["dur"])):
        while stack and end(stack[-1]) <= s["ts"]:
            stack.pop()
        if stack:
            assert end(s) <= end(stack[-1]), (s["name"], "overlaps", stack[-1]["name"])
        stack.append(s)


def assert_inside_parents(trace: Trace, xs: list[dict]) -> None:
    """Each event's slice lies inside its parent event's slice."""
    offset = len(trace.setup_events)
    for run in trace.runs:
        mine = xs[offset : offset + len(run.events)]
        for event, s in zip(run.events, mine, strict=True):
            if event.parent >= 0:
                parent = mine[event.parent]
                assert parent["ts"] <= s["ts"] and end(s) <= end(parent), (
                    s["name"],
                    parent["name"],
                )
        offset += len(run.events)


@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.name)
def test_real_trace_has_one_complete_slice_per_event(path: Path):
    trace = read_etdump(path)
    doc = json.loads(json.dumps(chrome_trace(trace, warmup=1, title="t")))
    xs = slices(doc)
    assert len(xs) == sum(len(r.events) for r in trace.runs) + len(trace.setup_events)
    for s in xs:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(s)
        assert isinstance(s["ts"], float | int) and s["dur"] >= 0
    names = [s["name"] for s in xs]
    assert names == [e.name for e in trace.setup_events] + [
        e.name for r in trace.runs for e in r.events
    ]
    assert [s["args"]["warmup"] for s in xs if s["name"] == EXECUTE] == [
        r.index < 1 for r in trace.runs
    ]


@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.name)
def test_every_slice_lies_inside_its_runs_execute_slice(path: Path):
    trace = read_etdump(path)
    xs = slices(chrome_trace(trace, warmup=0, title="t"))
    executes = {s["args"]["run"]: s for s in xs if s["name"] == EXECUTE}
    assert sorted(executes) == [r.index for r in trace.runs]
    delegated = 0
    for s in xs:
        if "run" not in s["args"] or s["name"] == EXECUTE:
            continue
        root = executes[s["args"]["run"]]
        assert root["ts"] <= s["ts"] and end(s) <= end(root), s["name"]
        delegated += bool(s["args"].get("delegated"))
    assert delegated > 0  # the real traces hold XNNPACK operator events
    assert_valid_nesting(xs)
    assert_inside_parents(trace, xs)


@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.name)
def test_durations_stay_real_unless_clipped(path: Path):
    trace = read_etdump(path)
    xs = slices(chrome_trace(trace, warmup=0, title="t"))
    events = list(trace.setup_events) + [e for r in trace.runs for e in r.events]
    for s, event in zip(xs, events, strict=True):
        assert s["args"]["duration_ms"] == event.duration_ms
        if not s["args"].get("clipped"):
            # whole slice moved at most onto the grid: duration within one grid step
            assert abs(s["dur"] * 1000 - (event.end_ns - event.start_ns)) <= GRID_NS


def ev(
    name: str, start_ms: float, end_ms: float, parent: int, depth: int, delegated=False
) -> Event:
    return Event(
        name,
        int(start_ms * MS),
        int(end_ms * MS),
        parent,
        depth,
        delegated,
        "7" if delegated else None,
        -1,
    )


def test_synthetic_delegate_starts_are_laid_inside_the_call():
    """XNNPACK operators add up to more than their call (rounded µs) and start at the call's
    start: they are laid back to back, the last one clipped to the call's end."""
    events = (
        ev("Method::execute", 0, 10, -1, 0),
        ev("DELEGATE_CALL", 1, 5, 0, 1),
        ev("Convolution (NHWC, F32) IGEMM #1", 1, 3.5, 1, 2, True),
        ev("Transpose (ND, X32) #1", 1, 3.0, 1, 2, True),  # synthetic start, overlaps sibling
        ev("OPERATOR_CALL", 6, 9, 0, 1),
        ev("native_call_mean.out", 6.5, 8.5, 4, 2),
    )
    trace = Trace(path=None, runs=(Run(0, 10 * MS, events),), setup_events=())
    xs = slices(chrome_trace(trace, warmup=0, title="t"))
    by_name = {s["name"]: s for s in xs}
    conv, transpose = by_name["Convolution (NHWC, F32) IGEMM #1"], by_name["Transpose (ND, X32) #1"]
    assert conv["ts"] == 1000 and conv["dur"] == 2500
    assert transpose["ts"] == end(conv)  # after its sibling, not on top of it
    assert end(transpose) == end(by_name["DELEGATE_CALL"])  # clipped to the call
    assert transpose["args"]["clipped"] and transpose["args"]["duration_ms"] == 2.0
    assert by_name["native_call_mean.out"]["ts"] == 6500  # real times are kept
    assert_valid_nesting(xs)
    assert_inside_parents(trace, xs)


def test_times_are_exact_binary_fractions_of_a_microsecond():
    events = (ev("Method::execute", 0, 1.0000013, -1, 0), ev("DELEGATE_CALL", 0.0000007, 1, 0, 1))
    trace = Trace(path=None, runs=(Run(0, events[0].end_ns, events),), setup_events=())
    for s in slices(chrome_trace(trace, warmup=0, title="t")):
        for value in (s["ts"], s["dur"], end(s)):
            assert (value * 1000) % GRID_NS == 0  # multiplies back to whole ns exactly


def test_written_file_is_trace_event_json(tmp_path: Path):
    trace = read_etdump(REAL_TRACES[0])
    path = write_chrome_trace(tmp_path / "t.json", trace, warmup=1, title="cnn sme2-off")
    doc = json.loads(path.read_text())
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    assert {e["name"] for e in meta} == {"process_name", "thread_name"}
    assert doc["otherData"]["title"] == "cnn sme2-off"
    assert doc["displayTimeUnit"] == "ms"
