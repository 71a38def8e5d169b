"""Instructions per ETDump event: an exact instruction count split at the clock reads that stamp
the events. Pure functions over data.

Why: under emulation time means nothing, but the guest's instruction count is exact and
repeatable (:mod:`pytest_sme2.devices.qemu_log`). What it lacked was *where* the instructions
went. Every boundary of a traced inference is a clock read the guest makes, and qemu logs each read
with the value it returned, in order with the instructions:

* ExecuTorch's event tracer stamps ``Method::execute``, ``DELEGATE_CALL``, ``OPERATOR_CALL`` and
  ``native_call_*`` with a read each at start and end; the ETDump stores those values, less a
  per-process origin, so each such boundary *is* one read (matched by value).
* XNNPACK's operator events have synthetic times (back to back from the profiler's start, in
  whole microseconds). But XNNPACK, profiling, reads the clock once before its first operator
  and once after each one; inside a delegate call the reads are: the call's start, the
  profiler's start (the first operator event's start value), XNNPACK's start, one read per
  operator object, the call's end. Operator ``i`` runs between XNNPACK reads ``i`` and
  ``i + 1`` — or, where an operator runs as several objects (a copy as two), over the reads
  whose elapsed times, floored to microseconds as XNNPACK sums them, add up to its duration.

:func:`instruction_run` rewrites a run's event times as instruction counts (1 "ns" = one
instruction), so :func:`pytest_sme2.analysis.profile.profile` gives operator and category
instruction counts, shares and an Other residual with the very rules it applies to time.
:func:`operator_kernels` gives each operator event the functions (microkernels, packing
routines, runtime) that executed between the same reads, summing to its instructions exactly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_sme2.analysis.categories import is_leaf
from pytest_sme2.analysis.profile import DELEGATE_CALL
from pytest_sme2.analysis.trace import Event, Run, Trace
from pytest_sme2.errors import TraceError


@dataclass(frozen=True)
class ClockRead:
    """One clock read of the guest inside a counted call: the time it returned, and the
    instructions the call had executed when it returned."""

    ns: int | None  # the time read, None when the log gave no value
    instructions: int


@dataclass(frozen=True)
class OperatorKernels:
    """One operator event of the counted inference and the functions that executed inside it.

    ``functions`` maps each function (a microkernel, a packing routine, runtime code; code no
    symbol names as ``[<library>]``) to its instructions, most first; they sum to
    ``instructions``, the event's instructions in the instruction-timed trace.
    """

    name: str  # the event's name, as in the ETDump (with its `` #n``)
    instructions: int
    functions: Mapping[str, int]

    def to_json(self) -> dict[str, Any]:
        # pairs, not an object: the order (most first) is part of the value
        return {
            "name": self.name,
            "instructions": self.instructions,
            "functions": [[name, count] for name, count in self.functions.items()],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OperatorKernels:
        return cls(
            name=data["name"],
            instructions=data["instructions"],
            functions={name: count for name, count in data["functions"]},
        )


def operator_kernels(
    run: Run,
    reads: Sequence[ClockRead],
    intervals: Sequence[Mapping[str, int]],
    where: Path | str,
) -> tuple[OperatorKernels, ...]:
    """Each leaf operator event of ``run`` (XNNPACK operators, ``native_call_*``) with the
    functions that executed in it: the sum of ``intervals`` (per read, the instructions per
    function since the read before it) over the reads its span covers, so its functions sum to
    exactly the instructions :func:`instruction_run` gives it."""
    if len(intervals) != len(reads):
        raise TraceError(
            where, f"{len(intervals)} function tallies for {len(reads)} clock reads: not one log"
        )
    spans = _read_spans(run, reads, where)
    at = [read.instructions for read in reads]
    kernels = []
    for event, span in zip(run.events, spans, strict=True):
        if span is None or not is_leaf(event.name):
            continue
        first, last = span
        functions: Counter[str] = Counter()
        for interval in intervals[first + 1 : last + 1]:
            functions.update(interval)
        kernels.append(
            OperatorKernels(event.name, at[last] - at[first], dict(functions.most_common()))
        )
    return tuple(kernels)


def instruction_trace(trace: Trace, run_index: int, reads: Sequence[ClockRead]) -> Trace:
    """``trace`` cut to its run ``run_index``, timed in instructions by ``reads`` (that run's
    clock reads, in order); raises TraceError, naming the trace, when they do not line up."""
    where = trace.path or "<etdump>"
    run = trace.runs[run_index]
    return Trace(path=trace.path, runs=(instruction_run(run, reads, where),), setup_events=())


def instruction_run(run: Run, reads: Sequence[ClockRead], where: Path | str) -> Run:
    """``run`` with every event's start and end as the instruction count at that moment,
    counted from the first read (see the module docstring for how events meet reads)."""
    at = [read.instructions for read in reads]
    times = [
        None if span is None else (at[span[0]], at[span[1]])
        for span in _read_spans(run, reads, where)
    ]
    origin = times[0][0] if times[0] else 0
    events = tuple(
        event._replace(start_ns=span[0] - origin, end_ns=span[1] - origin)
        for event, span in zip(run.events, times, strict=True)
        if span is not None
    )
    return Run(index=run.index, e2e_ns=events[0].end_ns - events[0].start_ns, events=events)


def _read_spans(
    run: Run, reads: Sequence[ClockRead], where: Path | str
) -> list[tuple[int, int] | None]:
    """Per event of ``run``, the indices of the reads at its start and its end (None for an
    event no read bounds)."""
    operators = _operators_by_call(run)
    index = _index_by_value(run, reads, operators, where)
    spans: list[tuple[int, int] | None] = [None] * len(run.events)
    for i, event in enumerate(run.events):
        if not _synthetic(run, event):
            spans[i] = (index[event.start_ns], index[event.end_ns])
    for call, ops in operators.items():
        first = index[run.events[ops[0]].start_ns]  # the profiler's start
        last = index[run.events[call].end_ns]
        for k, span in zip(
            ops, _operator_spans(run, ops, reads, first + 1, last, where), strict=True
        ):
            spans[k] = span
    return spans


def _operator_spans(
    run: Run, ops: list[int], reads: Sequence[ClockRead], start: int, end: int, where: Path | str
) -> list[tuple[int, int]]:
    """(first, last) read index of each operator event ``ops`` of one delegate call, whose
    XNNPACK reads are ``reads[start:end]`` (its start, then one after each operator object).

    An XNNPACK operator may run as several operator objects (a copy as two, say), each followed
    by a read, and its event's duration is the sum of its objects' elapsed times, each floored
    to whole microseconds. With one read per event the split is direct; otherwise each event
    takes the next objects until their floored sum is its duration, which must use every read.
    """
    objects = end - start - 1
    if objects == len(ops):
        return [(start + i, start + i + 1) for i in range(len(ops))]
    values = [read.ns for read in reads[start:end]]
    spans = []
    at = 0
    for k in ops:
        event = run.events[k]
        want = (event.end_ns - event.start_ns) // 1000
        first, total = at, 0
        while at < objects and (at == first or total < want):
            later, earlier = values[at + 1], values[at]
            if later is None or earlier is None:
                break
            total += (later - earlier) // 1000
            at += 1
        if total != want:
            break
        spans.append((start + first, start + at))
    if len(spans) != len(ops) or at != objects:
        raise TraceError(
            where,
            f"XNNPACK read the clock after {objects} operator object(s) in a delegate call that "
            f"logged {len(ops)} operator event(s), and their durations do not tell which "
            "objects belong to which event: instructions cannot be split between them",
        )
    return spans


def _synthetic(run: Run, event: Event) -> bool:
    """Whether ``event``'s times are synthetic: a delegated event inside a ``DELEGATE_CALL``."""
    return event.delegated and event.parent >= 0 and run.events[event.parent].name == DELEGATE_CALL


def _index_by_value(
    run: Run, reads: Sequence[ClockRead], operators: dict[int, list[int]], where: Path | str
) -> dict[int, int]:
    """ETDump time → index of the read that returned it, for the run's tracer-stamped times.

    The ETDump's times are the reads less a per-process origin: the origin is the one that makes
    ``Method::execute``'s start a read and every other tracer-stamped time a read too.
    """
    stamped = [
        t
        for event in run.events
        if not _synthetic(run, event)
        for t in (event.start_ns, event.end_ns)
    ] + [run.events[ops[0]].start_ns for ops in operators.values()]  # the profilers' starts
    values = [read.ns for read in reads]
    position = {ns: i for i, ns in reversed(list(enumerate(values))) if ns is not None}
    start = run.events[0].start_ns
    for ns in values:
        if ns is None:
            continue
        origin = ns - start
        if all(t + origin in position for t in stamped):
            return {t: position[t + origin] for t in stamped}
    raise TraceError(
        where,
        f"run {run.index}'s event times match none of the {len(reads)} clock reads of the "
        "counted inference: the trace and the instruction log are not of the same run",
    )


def _operators_by_call(run: Run) -> dict[int, list[int]]:
    """Index of each delegate call that logged operator events → those events' indices, in
    order (the first one's start is the profiler's own clock read)."""
    operators: dict[int, list[int]] = {}
    for k, event in enumerate(run.events):
        if _synthetic(run, event):
            operators.setdefault(event.parent, []).append(k)
    return operators
