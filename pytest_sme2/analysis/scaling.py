"""Thread scaling: one model × dtype measured at several thread counts → E2E per thread count
for each variant, the SME2 speedup at each, the gain and parallel efficiency, and the knee.

Pure functions of plain numbers (no measurement record, no torch): the report turns its cases
into :class:`ThreadFigure`\\ s (``report.scaling_view``) and the sweep is computed here once.

Definitions, as the report states them:

* **gain** at N threads: E2E at the smallest measured count (normally 1) ÷ E2E at N;
* **parallel efficiency** at N: the gain ÷ the ideal gain (N ÷ the smallest count), 100 %
  when doubling the threads halves E2E;
* **knee** of a variant: the largest thread count reached by steps that each still cut E2E by
  at least :data:`STEP_GAIN` (10 %), walking up the measured counts. The first step that cuts
  less ends the walk: beyond the knee the variant stops gaining (on Apple M4, SME2 stops after
  ~2 threads: one SME unit serves a cluster). When every step gains, the variant is "still
  gaining" at the largest count measured. Why the first weak step and not the last strong
  one: a later step that gains again after a flat one is noise or a second cluster, and
  "stops gaining after 2" is what a user choosing a thread count needs to read.

A thread count whose figure cannot be judged (an emulator's thread pool spinning: its
instruction count varies run to run) has no E2E here, only the reason: never a number that
varies from one session to the next.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: The least cut of E2E a step to more threads must make to count as still gaining.
STEP_GAIN = 0.10


@dataclass(frozen=True)
class ThreadFigure:
    """One thread count of a sweep: each variant's E2E (fastest timing-only run in ms, or the
    instructions of one inference) and the SME2 speedup there, or why it is not judged."""

    threads: int
    #: variant name → E2E; empty when :attr:`not_judged`
    e2e: Mapping[str, float]
    #: SME2-off ÷ SME2-on at this thread count, where both ran
    speedup: float | None = None
    #: why this thread count has no figure (e.g. "not judged: emulated threads")
    not_judged: str | None = None
    #: a remark on the figure that does not withhold it (a busy machine took the CPU)
    note: str | None = None


@dataclass(frozen=True)
class ScalingRow:
    """A thread count of the sweep with what it gains over the smallest count."""

    figure: ThreadFigure
    #: variant → E2E at the smallest judged count ÷ E2E here
    gain: Mapping[str, float]
    #: variant → gain ÷ (threads ÷ the smallest judged count)
    efficiency: Mapping[str, float]


@dataclass(frozen=True)
class Knee:
    """Where a variant stops gaining from more threads, in one sentence."""

    variant: str
    #: the knee's thread count; None where fewer than two counts were judged
    threads: int | None
    #: False when every step gained (the knee is the largest count measured)
    stops: bool
    sentence: str


@dataclass(frozen=True)
class Scaling:
    """A sweep: its rows by thread count, and each variant's knee."""

    rows: tuple[ScalingRow, ...]
    knees: tuple[Knee, ...]

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(knee.variant for knee in self.knees)


def scaling(figures: Sequence[ThreadFigure], step_gain: float = STEP_GAIN) -> Scaling:
    """The sweep of ``figures`` (one per thread count, any order; a count given twice is an
    error upstream), its gains against the smallest judged count and each variant's knee."""
    ordered = sorted(figures, key=lambda f: f.threads)
    counts = [f.threads for f in ordered]
    if len(set(counts)) != len(counts):
        raise ValueError(f"a thread count appears twice in the sweep: {counts}")
    variants = list(dict.fromkeys(v for f in ordered for v in f.e2e))
    rows = tuple(_row(figure, ordered) for figure in ordered)
    skipped = _skipped(ordered)
    knees = tuple(
        knee(v, [(f.threads, f.e2e[v]) for f in ordered if v in f.e2e], step_gain, skipped)
        for v in variants
    )
    return Scaling(rows, knees)


def _row(figure: ThreadFigure, ordered: Sequence[ThreadFigure]) -> ScalingRow:
    gain, efficiency = {}, {}
    for variant, e2e in figure.e2e.items():
        first = next(f for f in ordered if variant in f.e2e)
        if e2e > 0:
            gain[variant] = first.e2e[variant] / e2e
            efficiency[variant] = gain[variant] / (figure.threads / first.threads)
    return ScalingRow(figure, gain, efficiency)


def _skipped(ordered: Sequence[ThreadFigure]) -> str:
    """The thread counts not judged, and why, for a knee sentence ("" when none)."""
    found = [f"{f.threads} threads {f.not_judged}" for f in ordered if f.not_judged]
    return "; ".join(found)


def knee(
    variant: str,
    points: Sequence[tuple[int, float]],
    step_gain: float = STEP_GAIN,
    skipped: str = "",
) -> Knee:
    """The knee of ``variant`` over ``points`` ((threads, E2E), ascending threads) and its
    sentence; ``skipped`` names the counts without a figure."""
    aside = f" ({skipped})" if skipped else ""
    if len(points) < 2:
        return Knee(
            variant, None, False, f"{variant}: no knee: fewer than two thread counts judged{aside}."
        )
    for (low, before), (high, after) in itertools.pairwise(points):
        cut = 1 - after / before if before > 0 else 0.0
        if cut < step_gain:
            change = f"cut E2E by only {cut:.0%}" if cut >= 0 else f"made E2E {-cut:.0%} slower"
            return Knee(
                variant,
                low,
                True,
                f"{variant} stops gaining after {_count(low)}: {low}→{high} threads {change} "
                f"(a step must cut ≥ {step_gain:.0%}){aside}.",
            )
    largest = points[-1][0]
    return Knee(
        variant,
        largest,
        False,
        f"{variant} is still gaining at {_count(largest)}, the largest measured: every step "
        f"cut E2E by ≥ {step_gain:.0%}{aside}.",
    )


def _count(threads: int) -> str:
    return f"{threads} thread" + ("" if threads == 1 else "s")


def thread_gain(one_thread_ms: Sequence[float], threads_ms: Sequence[float]) -> float:
    """The gain a thread-gain floor judges: the fastest 1-thread run ÷ the fastest N-thread run,
    both timed in the same rounds of one measurement.

    The fastest run, not the median: a thread pool is what a neighbour on a shared machine hurts
    most (on 2 cores, one busy neighbour leaves a 2-thread run one core), so the median of
    N-thread runs measures the neighbour — seen here, 0.47 ms at 2 threads against 0.50 ms at
    1 with a load of 2–4, while the fastest runs kept the model's own 1.87× — and the fastest
    run is the undisturbed one the latency gate judges too."""
    if not one_thread_ms or not threads_ms:
        raise ValueError("a thread gain needs runs at 1 thread and at N threads")
    return min(one_thread_ms) / min(threads_ms)
