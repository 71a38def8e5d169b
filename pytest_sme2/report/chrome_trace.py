"""Trace → Chrome Trace Event Format JSON (opens in ui.perfetto.dev and chrome://tracing).

One complete event (``"ph": "X"``) per ETDump event, on one thread track, so the nesting
``Method::execute`` ⊃ ``DELEGATE_CALL`` ⊃ XNNPACK operators shows as a flame per run.

Two adjustments make the nesting valid for a viewer, both recorded in the slice's ``args``:

* XNNPACK operator start times are synthetic (laid back to back from the call's start) and its
  1 µs durations are rounded, so the operators of a call can add up to more than the call. Each
  child is placed no earlier than its previous sibling's end and clipped to its parent's end
  (``args.clipped``; ``args.duration_ms`` keeps the measured duration).
* Times sit on a 0.125 µs grid (floored): such values are exact binary fractions, so viewers
  that parse ``ts``/``dur`` as doubles and multiply back to ns get exactly the nesting laid out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_sme2.analysis.categories import Classifier
from pytest_sme2.analysis.trace import EXECUTE, Event, Trace

#: Time grid in ns (0.125 µs): multiples of it are exact in binary floating point as µs.
GRID_NS = 125
PID = 1
TID = 1


def _layout(events: Sequence[Event]) -> list[tuple[int, int, bool]]:
    """(start_ns, end_ns, clipped) per event such that children nest inside parents and
    siblings do not overlap; events are in pre-order with parent indices into ``events``."""
    placed: list[tuple[int, int, bool]] = []
    sibling_end: dict[int, int] = {}
    for event in events:
        start, end = event.start_ns, event.end_ns
        clipped = False
        if event.parent >= 0:
            parent_start, parent_end, _ = placed[event.parent]
            floor = max(parent_start, sibling_end.get(event.parent, parent_start))
            if start < floor:
                start, end = floor, floor + (end - start)
            if end > parent_end:
                start, end, clipped = min(start, parent_end), parent_end, True
        else:
            floor = sibling_end.get(-1, start)
            if start < floor:
                start, end = floor, floor + (end - start)
        sibling_end[event.parent] = end
        placed.append((start, end, clipped))
    return placed


def _grid(ns: int) -> int:
    return ns - ns % GRID_NS


def _slices(
    events: Sequence[Event],
    origin_ns: int,
    classifier: Classifier,
    extra_args: dict[str, Any],
) -> list[dict[str, Any]]:
    out = []
    for event, (start, end, clipped) in zip(events, _layout(events), strict=True):
        ts = _grid(start - origin_ns)
        dur = _grid(end - origin_ns) - ts
        args: dict[str, Any] = {
            **extra_args,
            "duration_ms": event.duration_ms,
            "depth": event.depth,
        }
        if classifier.is_leaf(event.name):
            args["category"] = classifier.classify(event.name)
        if event.delegated:
            args["delegated"] = True
            args["delegate_debug_id"] = event.delegate_debug_id
        if event.instruction_id >= 0:
            args["instruction_id"] = event.instruction_id
        if clipped:
            args["clipped"] = True
        out.append(
            {
                "name": event.name,
                "cat": args.get("category", "framework"),
                "ph": "X",
                "ts": ts / 1000,
                "dur": dur / 1000,
                "pid": PID,
                "tid": TID,
                "args": args,
            }
        )
    return out


def chrome_trace(
    trace: Trace, *, warmup: int, title: str, classifier: Classifier | None = None
) -> dict[str, Any]:
    """The Trace Event Format document of ``trace``: setup events, then every run (the first
    ``warmup`` runs marked ``args.warmup``), times in µs from the trace's first event."""
    classifier = classifier or Classifier()
    starts = [r.events[0].start_ns for r in trace.runs] + [e.start_ns for e in trace.setup_events]
    origin = min(starts)
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": PID, "tid": TID, "args": {"name": title}},
        {"name": "thread_name", "ph": "M", "pid": PID, "tid": TID, "args": {"name": "runner"}},
    ]
    events += _slices(trace.setup_events, origin, classifier, {"setup": True})
    for run in trace.runs:
        events += _slices(
            run.events, origin, classifier, {"run": run.index, "warmup": run.index < warmup}
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "title": title,
            "source": str(trace.path) if trace.path else "",
            "runs": len(trace.runs),
            "warmup_runs": warmup,
            "root": EXECUTE,
        },
    }


def write_chrome_trace(
    path: Path, trace: Trace, *, warmup: int, title: str, classifier: Classifier | None = None
) -> Path:
    path.write_text(
        json.dumps(chrome_trace(trace, warmup=warmup, title=title, classifier=classifier))
    )
    return path
