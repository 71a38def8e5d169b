"""A case's baseline: where its file is, and the baseline a measurement would store — each spec's
part of it (:mod:`pytest_sme2.judge.quantities`), rounded as stored, so that judging a measurement
compares like with like (the values are :mod:`pytest_sme2.judge.baseline_model`'s).

The JSON is for people first: sorted keys, two-space indent, floats rounded to 4 significant
digits. Updating keeps every value that is still within tolerance and every other machine class's
record as it was, so ``git diff baselines/`` shows what really moved, and reports each change
(:mod:`pytest_sme2.judge.baseline_update`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pytest_sme2.judge.baseline_model import (
    Baseline,
    Figures,
    TimeRecord,
    VariantBaseline,
    VariantTimes,
)
from pytest_sme2.judge.moves import Tolerances
from pytest_sme2.judge.quantities import (
    BUILTIN,
    RECORD_PARTS,
    TIME_PARTS,
    VARIANT_PARTS,
    Quantities,
)
from pytest_sme2.judge.scalar import Place, ScalarSpec
from pytest_sme2.records.measurement import Measurement


def baseline_path(directory: Path, device: str, model: str, dtype: str, threads: int) -> Path:
    suffix = "" if threads == 1 else f"-t{threads}"
    return directory / device / f"{model}-{dtype}{suffix}.json"


def from_measurement(
    m: Measurement, tolerances: Tolerances, quantities: Quantities = BUILTIN
) -> Baseline:
    """The baseline a measurement would store: its portable part, and a time record for its
    machine class where the device's time means something; no instruction counts where an
    emulator counted a thread pool (``Measurement.emulated_threads``: they vary run to run)."""
    counts = not m.emulated_threads
    variants = {}
    for v, vm in m.variants.items():
        fields: dict[str, Any] = {}
        for part in VARIANT_PARTS:
            fields.update(part.measured(m, vm, counts))
        figures = _figures(quantities.at(Place.VARIANT), vm, counts)
        variants[str(v)] = VariantBaseline(**fields, figures=figures)
    return Baseline(
        model=m.model,
        dtype=m.dtype,
        device=m.device.name,
        threads=m.threads,
        variants=variants,
        machines={m.device.class_id: _time_record(m, quantities)}
        if m.device.time_meaningful
        else {},
        tolerances=asdict(tolerances),
        figures=_figures(quantities.at(Place.CASE), m, counts),
    )


def _time_record(m: Measurement, quantities: Quantities) -> TimeRecord:
    variants = {}
    for v, vm in m.variants.items():
        fields: dict[str, Any] = {}
        for part in TIME_PARTS:
            fields.update(part.measured(m, vm, True))
        variants[str(v)] = VariantTimes(
            **fields, figures=_figures(quantities.at(Place.TIME), vm, True)
        )
    fields = {}
    for record_part in RECORD_PARTS:
        fields.update(record_part.measured(m))
    return TimeRecord(
        machine_class=dict(m.device.machine_class),
        notes=m.device.notes,
        variants=variants,
        **fields,
    )


def _figures(specs: Iterable[ScalarSpec], source: Any, counts: bool) -> Figures:
    """The scalar quantities ``specs`` of ``source`` (a measurement, or one of its variants)."""
    figures: dict[str, float | None] = {}
    for spec in specs:
        figures.update(spec.measured(source, counts=counts))
    return figures
