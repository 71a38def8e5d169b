"""The thread-scaling view: the cases of one model × dtype on one device at several thread counts
(``--sme2-threads=1,2,4``), as one table with each variant's knee in a sentence.

The cases are separate tests, possibly on different xdist workers, so the view is built at the
session's end from every measurement (they cross xdist losslessly), for the terminal, the session
report.md and the HTML summary alike; a case that timed its own 1-thread runs (a thread-gain
floor) shows its own two-count view too. The numbers are computed by
:mod:`pytest_sme2.analysis.scaling`; this module only picks each case's figure:

* where time is judged, each variant's fastest timing-only run (the undisturbed time, which the
  latency gate judges: a thread pool on a shared machine loses a core first, and the median then
  measures the neighbour) and the case's SME2 speedup (median ÷ median, the one formula);
* on an emulator, the instructions of one inference and their off ÷ on ratio at 1 thread; with
  more threads the count includes the pool's spin-wait and varies run to run, so the thread
  count says "not judged: emulated threads" instead of a number.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pytest_sme2.analysis.scaling import STEP_GAIN, Scaling, ThreadFigure, scaling
from pytest_sme2.judge.thread_gates import NOT_JUDGED
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.report.format import Table, pct

#: What a table's E2E column is, by unit.
E2E_WORDS = {"ms": "fastest E2E ms", "instructions": "instructions per inference"}


#: The note of a thread count whose runs lost the CPU (the case's verdicts say how much).
BUSY = "busy machine: other work took the CPU"


@dataclass(frozen=True)
class ScalingView:
    """One model × dtype on one device across thread counts."""

    title: str
    #: "ms" (fastest timing-only run) or "instructions" (an emulator's count)
    unit: str
    scaling: Scaling


def thread_figure(m: Measurement) -> ThreadFigure:
    """A case's figure at its thread count (see the module's docstring)."""
    if m.device.time_meaningful:
        busy = m.disturbance is not None and m.disturbance.reason is not None
        return ThreadFigure(
            m.threads,
            {str(v): min(vm.latencies_ms) for v, vm in m.variants.items()},
            m.comparison.speedup.value if m.comparison is not None else None,
            note=BUSY if busy else None,
        )
    if m.emulated_threads:
        return ThreadFigure(m.threads, {}, not_judged=NOT_JUDGED)
    counts = {str(v): vm.evidence.instructions for v, vm in m.variants.items() if vm.evidence}
    if not counts:
        return ThreadFigure(m.threads, {}, not_judged=f"not judged: {m.device.name} counts none")
    return ThreadFigure(m.threads, counts, m.instruction_ratio)


def _unit(m: Measurement) -> str:
    return "ms" if m.device.time_meaningful else "instructions"


def scaling_views(measurements: Iterable[Measurement]) -> list[ScalingView]:
    """A view per model × dtype × device measured at two or more thread counts, in the order
    first measured; a thread count measured twice (a re-run) counts once, its first case."""
    groups: dict[tuple[str, str, str], dict[int, Measurement]] = {}
    for m in measurements:
        groups.setdefault((m.model, m.dtype, m.device.name), {}).setdefault(m.threads, m)
    return [
        ScalingView(
            f"{model}[{dtype}] on {device}",
            _unit(next(iter(cases.values()))),
            scaling([thread_figure(m) for m in cases.values()]),
        )
        for (model, dtype, device), cases in groups.items()
        if len(cases) > 1
    ]


def case_view(m: Measurement) -> ScalingView | None:
    """The case's own 1-thread and N-thread figures, where it timed both in the same rounds (a
    thread-gain floor); None otherwise."""
    if not m.one_thread_ms:
        return None
    one = {str(v): min(ms) for v, ms in m.one_thread_ms.items()}
    figures = [ThreadFigure(1, one), ThreadFigure(m.threads, thread_figure(m).e2e)]
    title = f"{m.model}[{m.dtype}] on {m.device.name}, 1 and {m.threads} threads"
    return ScalingView(title, "ms", scaling(figures))


def scaling_table(view: ScalingView) -> Table:
    """Per thread count: each variant's E2E, gain and parallel efficiency, the SME2 speedup
    where both variants ran, and why a count has no figure."""
    variants = _ordered(view.scaling.variants)
    rows = view.scaling.rows
    speedup = any(row.figure.speedup is not None for row in rows)
    notes = any(row.figure.not_judged or row.figure.note for row in rows)
    headers = ["threads"]
    for v in variants:
        headers += [f"{v} {E2E_WORDS[view.unit]}", f"{v} gain", f"{v} efficiency"]
    headers += ["SME2 speedup"] if speedup else []
    headers += ["note"] if notes else []
    body = []
    for row in rows:
        figure = row.figure
        cells = [str(figure.threads)]
        for v in variants:
            e2e = figure.e2e.get(v)
            cells += [
                "—" if e2e is None else _e2e(e2e, view.unit),
                f"{row.gain[v]:.2f}×" if v in row.gain else "—",
                pct(row.efficiency[v]) if v in row.efficiency else "—",
            ]
        cells += [f"{figure.speedup:.2f}×" if figure.speedup else "—"] if speedup else []
        cells += [figure.not_judged or figure.note or ""] if notes else []
        body.append(tuple(cells))
    return Table(tuple(headers), tuple(body))


def knee_lines(view: ScalingView) -> tuple[str, ...]:
    """Each variant's knee, one sentence each, SME2-off first."""
    knees = {knee.variant: knee.sentence for knee in view.scaling.knees}
    return tuple(knees[v] for v in _ordered(list(knees)))


#: What the view's numbers are, said once under a table.
DEFINITIONS = (
    "Gain: E2E at the fewest threads ÷ E2E here; efficiency: the gain ÷ the ideal gain. The knee "
    f"is the thread count after which a step to more threads cuts E2E by less than "
    f"{STEP_GAIN:.0%}. Where time is judged, E2E is the fastest timing-only run and the SME2 "
    "speedup the median ratio."
)


def _e2e(value: float, unit: str) -> str:
    return f"{value:.3f}" if unit == "ms" else f"{value:,.0f}"


def _ordered(variants: Sequence[str]) -> list[str]:
    """SME2-off first, as every table of the report shows the variants."""
    order = [str(Variant.OFF), str(Variant.ON)]
    return sorted(variants, key=lambda v: order.index(v) if v in order else len(order))
