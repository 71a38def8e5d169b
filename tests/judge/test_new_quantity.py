"""A gated quantity added in one place: a :class:`ScalarSpec` defined here — SME instructions per
inference, a figure every counted measurement already has — and given to the judge as
``BUILTIN.adding(...)``, with no module of the package edited. It is stored in the baseline file
(under its key, validated by its schema fragment), read back, judged (passing, and failing with its
sentence), merged by an update (kept within tolerance, replaced beyond it, the line saying so) and
left unjudged where the count is not repeatable."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sme2.judge.baseline import Tolerances, from_measurement
from pytest_sme2.judge.baseline_file import InvalidBaseline, Stored, load, save
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gates import Judge
from pytest_sme2.judge.lifecycle import decide
from pytest_sme2.judge.moves import Move
from pytest_sme2.judge.policy import Policy
from pytest_sme2.judge.quantities import BUILTIN
from pytest_sme2.judge.scalar import Place, ScalarSpec, Sentences
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status
from tests.measurements import counted_measurement

#: The whole of the new quantity.
SME_INSTRUCTIONS = ScalarSpec(
    name="sme-instructions",
    key="sme_instructions",
    place=Place.VARIANT,
    schema={
        "sme_instructions": {
            "description": "SME instructions per inference, where counted",
            "type": "integer",
            "minimum": 0,
        }
    },
    read=lambda vm: vm.evidence.sme_instructions if vm.evidence else None,
    tolerance=lambda t: t.instruction_percent,
    change="SME instructions {before} → {after}",
    sentences=Sentences(
        numbers=lambda then, now: f"{then:,} → {now:,}",
        worse="SME instructions of {case} ({variant}) fell {numbers}, beyond the {percent:g}% "
        "tolerance",
        better="more SME instructions ({variant}): {numbers}: {record_it}",
        same="SME instructions ({variant}) {numbers}",
    ),
    worse=Move.FELL,
    counted=True,
)
QUANTITIES = BUILTIN.adding(SME_INSTRUCTIONS)
TOL = Tolerances()
GATE = "sme-instructions[sme2-on]"


def with_sme(count: int, threads: int = 1) -> Measurement:
    """The emulator's counted measurement, its SME2-on inference running ``count`` SME
    instructions."""
    m = counted_measurement()
    on = m.variants[Variant.ON]
    assert on.evidence is not None
    on = replace(on, evidence=replace(on.evidence, sme_instructions=count))
    return replace(m, variants={**m.variants, Variant.ON: on}, threads=threads)


def test_a_quantity_defined_in_one_place_is_stored_judged_merged_and_read_back(
    tmp_path: Path,
) -> None:
    path = tmp_path / "emulator" / "toy-fp32.json"
    policy = Policy(quantities=QUANTITIES)

    # stored: a missing baseline is written with it, under its key
    first = decide(with_sme(13_000), Stored(None), path, Expectations(), policy, remeasure=None)
    assert first.baseline is not None and first.failure is not None  # "no baseline …: wrote"
    save(path, first.baseline, QUANTITIES)
    assert '"sme_instructions": 13000' in path.read_text()
    stored = load(path, QUANTITIES)
    assert stored == first.baseline
    with pytest.raises(InvalidBaseline, match="'sme_instructions' was unexpected"):
        load(path)  # the built-in schema knows no such key: the fragment is the spec's

    # judged, in its place's gates, with its sentences
    judge = Judge(policy, stored, Expectations())
    same = {v.gate: v for v in judge(with_sme(13_050))}[GATE]
    assert (same.status, same.message) == (
        Status.PASS,
        "SME instructions (sme2-on) 13,000 → 13,050",
    )
    fell = {v.gate: v for v in judge(with_sme(12_000))}[GATE]
    assert fell.status is Status.FAIL
    assert fell.message == (
        "SME instructions of toy[fp32] on emulator (sme2-on) fell 13,000 → 12,000, beyond the "
        "1% tolerance"
    )
    more = {v.gate: v for v in judge(with_sme(14_000))}[GATE]
    assert more.status is Status.PASS and "record it with --sme2-update-baselines" in more.message

    # merged by an update: kept within its tolerance, replaced beyond it, and said
    update = Policy(update=True, quantities=QUANTITIES)
    kept = decide(with_sme(13_050), Stored(stored), path, Expectations(), update, remeasure=None)
    assert kept.changes == () and kept.baseline is None
    moved = decide(with_sme(12_000), Stored(stored), path, Expectations(), update, remeasure=None)
    assert moved.changes == ("sme2-on SME instructions 13000 → 12000",)
    assert moved.baseline is not None
    save(path, moved.baseline, QUANTITIES)
    read_back = load(path, QUANTITIES)
    assert read_back is not None and read_back.variants["sme2-on"].figures["sme_instructions"] == (
        12_000
    )

    # a count the emulator's thread pool made is neither stored nor judged, as every count
    pooled = with_sme(12_000, threads=2)
    assert (
        "sme_instructions"
        not in from_measurement(pooled, TOL, QUANTITIES).variants["sme2-on"].figures
    )
    assert GATE not in {v.gate for v in Judge(policy, stored, Expectations())(pooled)}
