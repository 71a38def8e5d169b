"""A scalar quantity, gated: one :class:`ScalarSpec` says everything about it in one place — how
it is read from a measurement, where the baseline keeps it and under which JSON key (and its
JSON-schema fragment), its tolerance and "moved" rule, how an update merges it and the line that
says so, whether it is wall-clock time, and its sentences. The built-in ones are
:mod:`pytest_sme2.judge.scalars`; adding one is one more entry there.

Judged by :class:`ScalarGates`, one per place, variant by variant (the figures of a variant are
read together), against the stored value by the spec's own rule: a move for the worse fails, one
for the better passes as news (``RECORD_IT``); where the stored file predates the quantity it is
not judged, and an update records it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pytest_sme2.judge.baseline_model import Baseline, Figures, VariantBaseline, VariantTimes
from pytest_sme2.judge.gate import Judging
from pytest_sme2.judge.moves import Move, Tolerances, relative_move, stable
from pytest_sme2.judge.wording import RECORD_IT, case_name
from pytest_sme2.records.verdict import Status, Verdict

_T = TypeVar("_T")


class Place(enum.Enum):
    """Where a baseline keeps a scalar quantity."""

    #: the case's portable part, read from the :class:`~pytest_sme2.records.measurement.
    #: Measurement` (``instruction_ratio``)
    CASE = "case"
    #: a variant's portable part, read from its ``VariantMeasurement``
    VARIANT = "variant"
    #: a variant's times in its machine class's record (where the device's time means
    #: something), read from its ``VariantMeasurement``
    TIME = "time"


@dataclass(frozen=True)
class Sentences:
    """What a gate says of a quantity against its stored value: a template for a move for the
    worse (the failure), one for the better (news, to record) and one for no move. Their fields:
    ``case``, ``variant``, ``numbers`` (``numbers(stored, now)``), ``measured`` (as measured),
    ``stored``, ``percent`` (the tolerance) and ``record_it``."""

    numbers: Callable[[float, float], str]
    worse: str
    better: str
    same: str

    def say(self, move: Move, worse: Move, **fields: Any) -> tuple[Status, str]:
        """The status and sentence of ``move``, a move towards ``worse`` failing."""
        numbers = self.numbers(fields["stored"], fields["now"])
        template = (
            self.same if move is Move.WITHIN else self.worse if move is worse else self.better
        )
        status = Status.FAIL if move is worse else Status.PASS
        return status, template.format(numbers=numbers, record_it=RECORD_IT, **fields)


def percent_change(then: float, now: float, digits: int = 1) -> str:
    """`` (+12.5%)``: the change from ``then``; "" where ``then`` is 0."""
    return f" ({100 * (now / then - 1):+.{digits}f}%)" if then else ""


@dataclass(frozen=True)
class Trend:
    """How the history page draws a quantity over commits (:mod:`pytest_sme2.report.trends`)."""

    key: str
    label: str
    #: the drawn value per measured unit (1/MiB: bytes drawn in MiB)
    scale: float = 1.0


@dataclass(frozen=True)
class ScalarSpec:
    """One scalar quantity a baseline keeps and a gate judges (see the module's docstring)."""

    #: its verdicts' gate name: ``name[variant]`` (per variant) or ``name`` (per case)
    name: str
    #: its JSON key, and the schema of the value (and of any older key the file may hold)
    key: str
    place: Place
    schema: Mapping[str, Mapping[str, Any]] = field(hash=False)
    #: the value as measured, from a variant's measurement (or the case's, ``Place.CASE``);
    #: None where it was not measured
    read: Callable[[Any], float | None]
    tolerance: Callable[[Tolerances], float]
    #: the line an update writes when it replaces the value: fields ``before`` and ``after``
    change: str
    #: None: stored and merged, but not judged
    sentences: Sentences | None = None
    #: ``moved(now, stored, percent)``: whether the value moved beyond the tolerance
    moved: Callable[[float, float, float], Move] = relative_move
    #: the direction that fails the gate
    worse: Move = Move.ROSE
    #: an update replaces any change (an exact quantity), not only a move beyond the tolerance
    exact_update: bool = False
    #: stored rounded (:func:`stable`)
    rounded: bool = False
    #: a count of instructions: not stored where a thread pool was counted under emulation
    #: (``Measurement.emulated_threads``), and not judged there (``thread_gates``)
    counted: bool = False
    #: wall-clock time: confirmed by fresh measurements, not judged when disturbed
    wall_clock: bool = False
    #: written as null where not measured (the files of schema 2 always hold the key)
    keep_null: bool = False
    #: what a time record written before the quantity was kept lacks, said once as "not judged"
    #: (None: nothing is said)
    unrecorded: str | None = None
    trend: Trend | None = None

    def measured(self, source: Any, *, counts: bool) -> Figures:
        """The quantity in its baseline form, as ``{key: value}`` ({} where not measured);
        ``counts``: the measurement's instruction counts are repeatable."""
        value = self.read(source)
        if value is None or (self.counted and not counts):
            return {self.key: None} if self.keep_null else {}
        return {self.key: stable(value) if self.rounded else value}

    def stored(self, figures: Figures) -> float | None:
        return figures.get(self.key)

    def move(self, now: float, stored: float, tol: Tolerances) -> Move:
        return self.moved(now, stored, self.tolerance(tol))

    def merge(self, old: Figures, new: Figures, tol: Tolerances) -> tuple[Figures, str | None]:
        """The value an update keeps: the stored one while within tolerance, else the new one;
        and the line saying it changed (None where it did not)."""
        before, after = old.get(self.key), new.get(self.key)
        if before is None or after is None or self.exact_update:
            replaced = before != after
        else:
            replaced = self.move(after, before, tol) is not Move.WITHIN
        if not replaced:
            return ({self.key: before} if self.key in old else {}), None
        kept = {self.key: after} if self.key in new else {}
        return kept, self.change.format(before=before, after=after)

    def verdict(self, judging: Judging, variant: str | None, now: float, stored: float) -> Verdict:
        """This quantity of ``variant`` (or of the case) against its stored value."""
        assert self.sentences is not None
        m = judging.measurement
        source = m if variant is None else next(v for k, v in m.variants.items() if k == variant)
        status, message = self.sentences.say(
            self.move(now, stored, judging.tolerances),
            self.worse,
            case=case_name(m),
            variant=variant,
            measured=self.read(source),
            now=now,
            stored=stored,
            percent=self.tolerance(judging.tolerances),
        )
        return Verdict(self.name if variant is None else f"{self.name}[{variant}]", status, message)


@dataclass(frozen=True)
class ScalarGates:
    """The gates of the judged scalar quantities of one place, variant by variant."""

    place: Place
    specs: tuple[ScalarSpec, ...]

    @property
    def name(self) -> str:
        return f"{self.place.value} figures"

    @property
    def parts(self) -> tuple[ScalarSpec, ...]:
        """The gates it judges with: one per quantity (``wall_clock``, ``counted`` are theirs)."""
        return self.specs

    def check(self, judging: Judging) -> list[Verdict]:
        specs = [spec for spec in self.specs if spec.sentences is not None]
        if not specs or judging.stored is None:
            return []
        if self.place is Place.CASE:
            return list(self._judged(judging, None, judging.now, judging.stored, specs))
        if self.place is Place.VARIANT:
            return [
                verdict
                for variant, now, stored in _pairs(judging.now.variants, judging.stored.variants)
                for verdict in self._judged(judging, variant, now, stored, specs)
            ]
        return self._timed(judging, specs)

    def _judged(
        self,
        judging: Judging,
        variant: str | None,
        now: Baseline | VariantBaseline | VariantTimes,
        stored: Baseline | VariantBaseline | VariantTimes,
        specs: list[ScalarSpec],
    ) -> Iterator[Verdict]:
        for spec in specs:
            measured, kept = spec.stored(now.figures), spec.stored(stored.figures)
            if measured is not None and kept is not None:
                yield spec.verdict(judging, variant, measured, kept)

    def _timed(self, judging: Judging, specs: list[ScalarSpec]) -> list[Verdict]:
        """Against the time record of the measuring machine's class (none where it has none: the
        time gates say they were not judged), and one "not judged" verdict per quantity the
        record was written without."""
        record, measured = judging.record, judging.measured_record
        if record is None or measured is None:
            return []
        verdicts = []
        unrecorded: dict[str, str] = {}
        for variant, now, stored in _pairs(measured.variants, record.variants):
            verdicts += self._judged(judging, variant, now, stored, specs)
            for spec in specs:
                recorded = spec.stored(stored.figures) is not None
                if spec.unrecorded and not recorded and spec.stored(now.figures) is not None:
                    unrecorded[spec.name] = spec.unrecorded
        case = case_name(judging.measurement)
        return verdicts + [
            Verdict(
                name,
                Status.SKIP,
                f"{what} of {case} not judged: the time record has no {what}; "
                "--sme2-update-baselines records it",
            )
            for name, what in unrecorded.items()
        ]


def _pairs(now: Mapping[str, _T], stored: Mapping[str, _T]) -> Iterator[tuple[str, _T, _T]]:
    """Each measured variant with its stored counterpart, where the baseline has one."""
    for variant, measured in now.items():
        if variant in stored:
            yield variant, measured, stored[variant]
