"""``--sme2-update-baselines``: a new measurement merged into the stored baseline, each quantity by
its own spec — the stored value kept while within tolerance (the gates' own "moved" rule), the new
one where it moved — so ``git diff baselines/`` shows only what really moved, and one line per
change says what did.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, replace
from typing import Any, Protocol

from pytest_sme2.judge.baseline_model import Baseline, Figures, TimeRecord, notes_diff
from pytest_sme2.judge.moves import Tolerances
from pytest_sme2.judge.quantities import (
    BUILTIN,
    RECORD_PARTS,
    TIME_PARTS,
    VARIANT_PARTS,
    Quantities,
)
from pytest_sme2.judge.scalar import Place, ScalarSpec
from pytest_sme2.records.device import describe_class


class _Part(Protocol):
    def merge(self, old: Any, new: Any, tol: Tolerances) -> tuple[dict[str, Any], list[str]]: ...


def merge(
    old: Baseline | None, new: Baseline, tol: Tolerances, quantities: Quantities = BUILTIN
) -> tuple[Baseline, tuple[str, ...]]:
    """``new``, keeping every value still within tolerance ``tol`` of ``old``; and the changes.

    Only the time record of ``new``'s machine class is touched: every other class's record is
    kept as it was, to the byte. Returns the baseline to store and one line per change.
    """
    if old is None:
        return new, ("new baseline",)
    changes: list[str] = []
    variants = dict(new.variants)
    for name, nv in new.variants.items():
        ov = old.variants.get(name)
        if ov is None:
            changes.append(f"{name}: new variant")
            continue
        variants[name], lines = _merged(ov, nv, tol, VARIANT_PARTS, quantities.at(Place.VARIANT))
        changes += [f"{name} {line}" for line in lines]
    changes += [
        f"{name}: variant no longer measured" for name in old.variants if name not in new.variants
    ]
    figures, lines = _figures(old.figures, new.figures, tol, quantities.at(Place.CASE))
    changes += lines
    machines = dict(old.machines)
    for class_id, record in new.machines.items():
        machines[class_id], lines = _merge_record(
            old.machines.get(class_id), record, tol, quantities
        )
        changes += [f"[{class_id}] {line}" for line in lines]
    merged = replace(
        new, variants=variants, figures=figures, machines=machines, tolerances=asdict(tol)
    )
    return merged, tuple(changes)


def _merge_record(
    old: TimeRecord | None, new: TimeRecord, tol: Tolerances, quantities: Quantities
) -> tuple[TimeRecord, list[str]]:
    """One machine class's record, updated where a quantity moved beyond its tolerance (the
    record's own: its calibration applied); the notes follow the times (they say what the machine
    was when the kept times were taken)."""
    if old is None:
        return new, [f"new time record: {describe_class(new.machine_class)}"]
    own = replace(tol, latency_percent=old.latency_percent(tol))
    changes: list[str] = []
    variants = {}
    for name, nv in new.variants.items():
        ov = old.variants.get(name)
        if ov is None:
            changes.append(f"{name}: new variant")
            variants[name] = nv
            continue
        variants[name], lines = _merged(ov, nv, own, TIME_PARTS, quantities.at(Place.TIME))
        changes += [f"{name} {line}" for line in lines]
    fields: dict[str, Any] = {}
    for part in RECORD_PARTS:
        kept, lines = part.merge(old, new, own)
        fields.update(kept)
        changes += lines
    notes = old.notes
    if changes:
        changes += [f"note {line}" for line in notes_diff(old.notes, new.notes)]
        notes = new.notes
    return replace(new, notes=notes, variants=variants, **fields), changes


def _merged(
    old: Any, new: Any, tol: Tolerances, parts: Iterable[_Part], scalars: Iterable[ScalarSpec]
) -> tuple[Any, list[str]]:
    """A variant's portable part or times: each compound part merged by its spec, then each
    scalar quantity."""
    fields: dict[str, Any] = {}
    changes: list[str] = []
    for part in parts:
        kept, lines = part.merge(old, new, tol)
        fields.update(kept)
        changes += lines
    figures, lines = _figures(old.figures, new.figures, tol, scalars)
    return replace(new, **fields, figures=figures), changes + lines


def _figures(
    old: Figures, new: Figures, tol: Tolerances, scalars: Iterable[ScalarSpec]
) -> tuple[Mapping[str, float | None], list[str]]:
    figures: dict[str, float | None] = {}
    changes = []
    for spec in scalars:
        kept, line = spec.merge(old, new, tol)
        figures.update(kept)
        changes += [line] if line else []
    return figures, changes
