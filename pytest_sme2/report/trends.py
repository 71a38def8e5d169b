"""Trends over commits: every quantity a case is judged on, as a series per case and device in
commit order, and the steps in it, each named by the commit that moved it (or reverted it).

Apart from :mod:`pytest_sme2.judge.history` (the records and their files) because this is analysis
(pure functions of the records: no file is written here), and the page and ``sme2 history``
are its only readers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_sme2.judge.history import HistoryRecord, commit_ranks, read_history
from pytest_sme2.records.measurement import Measurement, VariantMeasurement

if TYPE_CHECKING:
    from pytest_sme2.analysis.profile import Profile
    from pytest_sme2.judge.moves import Tolerances
    from pytest_sme2.judge.scalar import ScalarSpec


@dataclass(frozen=True)
class Point:
    """One commit of one case on one device: every record taken there (several sessions, or a
    re-run), summarised by the median of each quantity."""

    label: str  # the short commit SHA ("+dirty" when the tree was), or the record time
    commit: str | None
    records: tuple[HistoryRecord, ...]

    @property
    def last(self) -> HistoryRecord:
        return max(self.records, key=lambda r: r.time)


@dataclass(frozen=True)
class Quantity:
    """A number drawn over commits, and the smallest move of it that counts as a step."""

    key: str
    #: what it is, for a sentence: "instructions (sme2-on)", "Convolution share"
    label: str
    value: Callable[[Measurement], float | None]
    #: True: steps are relative (a fraction of the level before); False: absolute points
    relative: bool
    floor: float
    #: the variant whose categories explain a step, where one does
    variant: str | None = None


@dataclass(frozen=True)
class Step:
    """Where a quantity moved beyond its noise: the first commit at its new level."""

    case: str  # "small fp32"
    device: str
    quantity: Quantity
    index: int  # the point where the new level starts
    at: str
    before: float
    after: float
    cause: str = ""
    reverted_at: str | None = None
    #: the point where the revert starts
    reverted_index: int | None = None

    @property
    def change(self) -> float:
        """Relative change (fraction) or points, as the quantity measures it."""
        return (
            (self.after / self.before - 1.0) if self.quantity.relative else self.after - self.before
        )

    def sentence(self) -> str:
        amount = (
            f"{100 * self.change:+.1f} %"
            if self.quantity.relative
            else f"{self.change:+.1f} points"
        )
        text = f"{self.case} on {self.device}: {self.quantity.label} {amount} at {self.at}"
        if self.cause:
            text += f" ({self.cause})"
        if self.reverted_at:
            text += f", reverted at {self.reverted_at}"
        return text


def _variant(m: Measurement, variant: str) -> VariantMeasurement | None:
    return next((vm for v, vm in m.variants.items() if str(v) == variant), None)


def _instructions(variant: str) -> Callable[[Measurement], float | None]:
    def value(m: Measurement) -> float | None:
        vm = _variant(m, variant)
        evidence = vm.evidence if vm is not None else None
        return float(evidence.instructions) if evidence and evidence.instructions else None

    return value


def _e2e(variant: str) -> Callable[[Measurement], float | None]:
    import statistics

    def value(m: Measurement) -> float | None:
        vm = _variant(m, variant)
        if vm is None or not m.device.time_meaningful or not vm.latencies_ms:
            return None
        return statistics.median(vm.latencies_ms)

    return value


def _speedup(m: Measurement) -> float | None:
    """off ÷ on: the median latency ratio where time means something, else the instruction
    ratio (emulation: time is no signal, the work done is)."""
    if m.device.time_meaningful:
        return m.comparison.speedup.value if m.comparison is not None else None
    return m.instruction_ratio


def _share(category: str) -> Callable[[Measurement], float | None]:
    def value(m: Measurement) -> float | None:
        return 100.0 * m.variants[m.headline].profile.shares[category]

    return value


def quantities(tolerances: Tolerances | None = None) -> tuple[Quantity, ...]:
    """Everything the page draws and finds steps in, each with the gate's tolerance as the floor
    of a step: a move the gate lets pass is not a step either (``baseline.Tolerances``)."""
    from pytest_sme2.analysis.categories import CATEGORIES
    from pytest_sme2.judge.moves import Tolerances

    t = tolerances or Tolerances()
    found = [q for variant in VARIANTS for q in _work_quantities(variant, t)]
    found += [q for variant in VARIANTS for q in _load_quantities(variant, t)]
    found.append(Quantity("speedup", "speedup", _speedup, True, t.speedup_percent / 100))
    found += [
        Quantity(f"share {c}", f"{c} share", _share(c), False, t.share_points, None)
        for c in CATEGORIES
    ]
    return tuple(found)


#: The variants whose quantities the page draws, in its order.
VARIANTS = ("sme2-on", "sme2-off")


def _work_quantities(variant: str, t: Tolerances) -> list[Quantity]:
    """A variant's inference: E2E time and instructions, with their gates' tolerances."""
    return [
        Quantity(
            f"e2e {variant}",
            f"E2E median ({variant})",
            _e2e(variant),
            True,
            t.latency_percent / 100,
            variant,
        ),
        Quantity(
            f"instructions {variant}",
            f"instructions ({variant})",
            _instructions(variant),
            True,
            t.instruction_percent / 100,
            variant,
        ),
    ]


def _load_quantities(variant: str, t: Tolerances) -> list[Quantity]:
    """A variant's load and memory: each scalar quantity the history page draws, with its gate's
    tolerance (``judge.scalars``): method init timed where time means something, counted where
    the device counts instructions (never both)."""
    from pytest_sme2.judge.quantities import BUILTIN

    return [
        Quantity(
            f"{spec.trend.key} {variant}",
            f"{spec.trend.label} ({variant})",
            _scalar(spec, variant),
            True,
            spec.tolerance(t) / 100,
        )
        for spec in BUILTIN.scalars
        if spec.trend is not None
    ]


def _scalar(spec: ScalarSpec, variant: str) -> Callable[[Measurement], float | None]:
    """A variant's value of ``spec`` (in the page's unit), None where the record has none (a
    record written before it was measured, a runner that reports none)."""
    assert spec.trend is not None
    scale = spec.trend.scale

    def value(m: Measurement) -> float | None:
        vm = _variant(m, variant)
        found = spec.read(vm) if vm is not None else None
        return None if found is None else float(found) * scale

    return value


@dataclass(frozen=True)
class Series:
    """One case on one device over commits, in commit order."""

    case: str
    device: str
    points: tuple[Point, ...]

    @property
    def anchor(self) -> str:
        """The series' id in the page, which the pytest-html report links to."""
        return series_anchor(self.case, self.device)

    def values(self, quantity: Quantity) -> list[float | None]:
        import statistics

        out: list[float | None] = []
        for point in self.points:
            found = [v for r in point.records if (v := quantity.value(r.measurement)) is not None]
            out.append(statistics.median(found) if found else None)
        return out

    @property
    def counts_instructions(self) -> bool:
        return not self.points[-1].last.measurement.device.time_meaningful

    def named(self, quantity: Quantity) -> Quantity:
        """``quantity`` as this series calls it: its speedup is the instruction ratio where time
        is emulated."""
        if quantity.key == "speedup" and self.counts_instructions:
            return replace(quantity, label="instruction ratio")
        return quantity


def series_anchor(case: str, device: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in f"{case}-{device}")


def case_name(m: Measurement) -> str:
    threads = "" if m.threads == 1 else f" ×{m.threads} threads"
    return f"{m.model} {m.dtype}{threads}"


def build_series(
    records: Sequence[HistoryRecord], ranks: Mapping[str, float]
) -> tuple[Series, ...]:
    """Records grouped by case × device, one point per commit (a dirty tree apart from its
    commit), in commit order; records without a commit are points of their own, by time."""
    groups: dict[tuple[str, str], dict[str, list[HistoryRecord]]] = {}
    for record in records:
        key = (case_name(record.measurement), record.device)
        if record.git.commit is not None:
            label = record.git.commit[:7] + ("+dirty" if record.git.dirty else "")
        else:
            label = f"{record.time:%Y-%m-%d %H:%M:%S}"
        groups.setdefault(key, {}).setdefault(label, []).append(record)

    def order(point: Point) -> tuple[float, datetime]:
        first = min(r.time for r in point.records)
        rank = ranks.get(point.commit, float("inf")) if point.commit else float("inf")
        return (rank + (0.25 if point.label.endswith("+dirty") else 0.0), first)

    series = []
    for (case, device), by_label in sorted(groups.items()):
        points = [Point(label, rs[0].git.commit, tuple(rs)) for label, rs in by_label.items()]
        series.append(Series(case, device, tuple(sorted(points, key=order))))
    return tuple(series)


def _noise(values: Sequence[float]) -> float:
    """The series' noise: the median absolute difference of neighbours, as a standard deviation
    (robust: a step is one large difference among small ones)."""
    import numpy as np

    if len(values) < 3:
        return 0.0
    diffs = np.abs(np.diff(np.asarray(values)))
    return float(np.median(diffs)) / (0.6745 * np.sqrt(2.0))


def find_steps(series: Series, quantity: Quantity) -> list[Step]:
    """The steps of one quantity of one series, found by PELT (``ruptures``) on the series' values.

    The penalty is derived from the series' noise (``2 σ² ln n``, the BIC of a shift in mean).
    Exact instruction counts have no noise at all, and then any difference would be a step: σ is
    therefore never taken below a third of the gate's tolerance (1 % for instructions, 3 % for
    time, 5 points for shares), and a step found is reported only when the levels on either side
    differ by at least that tolerance — a move the gate lets pass is no step either.
    """
    import numpy as np
    import ruptures

    quantity = series.named(quantity)
    raw = series.values(quantity)
    known = [(i, v) for i, v in enumerate(raw) if v is not None]
    if len(known) < 2:
        return []
    positions = [i for i, _ in known]
    values = np.array([v for _, v in known], dtype=float)
    scale = float(np.median(values)) if quantity.relative else 1.0
    if quantity.relative and scale <= 0:
        return []
    y = values / scale
    floor = quantity.floor if quantity.relative else quantity.floor / scale
    sigma = max(_noise(y), floor / 3)
    penalty = 2 * sigma**2 * np.log(len(y))
    ends = ruptures.Pelt(model="l2", min_size=1, jump=1).fit(y.reshape(-1, 1)).predict(pen=penalty)
    starts = [0, *ends[:-1]]
    levels = [float(np.median(values[s:e])) for s, e in zip(starts, ends, strict=True)]
    steps: list[Step] = []
    for k in range(1, len(levels)):
        before, after = levels[k - 1], levels[k]
        moved = abs(after / before - 1) if quantity.relative and before else abs(after - before)
        if moved < quantity.floor:
            continue
        at = positions[starts[k]]
        steps.append(
            Step(
                case=series.case,
                device=series.device,
                quantity=quantity,
                index=at,
                at=series.points[at].label,
                before=before,
                after=after,
                cause=_cause(
                    series, quantity, positions[starts[k - 1]], at, positions[ends[k] - 1]
                ),
            )
        )
    return _mark_reverts(steps, quantity)


def _mark_reverts(steps: list[Step], quantity: Quantity) -> list[Step]:
    """A step that a later one takes back (the level returns to within the floor of where it
    was) is shown once, "reverted at" the later commit."""
    kept: list[Step] = []
    for step in steps:
        undone = next(
            (
                i
                for i, earlier in enumerate(kept)
                if earlier.reverted_at is None
                and (earlier.after - earlier.before) * (step.after - step.before) < 0
                and _close(earlier.before, step.after, quantity)
            ),
            None,
        )
        if undone is None:
            kept.append(step)
        else:
            kept[undone] = replace(kept[undone], reverted_at=step.at, reverted_index=step.index)
    return kept


def _close(a: float, b: float, quantity: Quantity) -> bool:
    if quantity.relative:
        return abs(b / a - 1) < quantity.floor if a else a == b
    return abs(b - a) < quantity.floor


def _cause(series: Series, quantity: Quantity, first: int, at: int, last: int) -> str:
    """What moved with a step: the category (and operator) of the variant's profile that grew or
    shrank most from the commit before the step to the step's commit."""
    if quantity.variant is None:
        return ""
    before = _variant_profile(series.points[at - 1], quantity.variant)
    after = _variant_profile(series.points[at], quantity.variant)
    if before is None or after is None:
        return ""
    change = {
        c: after.categories_ms[c] - before.categories_ms.get(c, 0.0) for c in after.categories_ms
    }
    rising = sum(change.values()) >= 0
    category = max(change, key=lambda c: change[c] if rising else -change[c])
    ops_before = {op.name: op.per_run_ms for op in before.operators}
    op_change = {
        op.name: op.per_run_ms - ops_before.get(op.name, 0.0)
        for op in after.operators
        if op.category == category
    }
    text = f"{category} {'grew' if rising else 'shrank'}"
    if op_change:
        op = max(op_change, key=lambda name: op_change[name] if rising else -op_change[name])
        text += f", most in {op}"
    return text


def _variant_profile(point: Point, variant: str) -> Profile | None:
    vm = _variant(point.last.measurement, variant)
    return vm.profile if vm is not None else None


@dataclass(frozen=True)
class Trends:
    """What ``sme2 history`` shows: every series, its steps, and what could not be read."""

    series: tuple[Series, ...]
    steps: tuple[Step, ...]
    problems: tuple[str, ...]
    records: int


def trends(directory: Path, repo: Path | None, tolerances: Tolerances | None = None) -> Trends:
    """A history directory → series per case × device in commit order, with their steps."""
    history = read_history(directory)
    ranks, order_problems = commit_ranks(history.records, repo)
    series = build_series(history.records, ranks)
    steps = [
        step
        for s in series
        for quantity in quantities(tolerances)
        for step in find_steps(s, quantity)
    ]
    return Trends(series, tuple(steps), history.problems + order_problems, len(history.records))
