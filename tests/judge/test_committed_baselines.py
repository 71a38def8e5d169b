"""The committed baselines (``baselines/``), as a release of pytest-sme2 meets them: each reads and
writes back the same file, byte for byte (its ``written_by`` aside: the writer stamps its own
version), and judging a measurement against each says what it said when the verdicts were recorded
(``data/committed_verdicts.json``, written by the judge before its gates became specs).

A change of a committed baseline, or of what a gate says, shows here as a diff of sentences; when
it is meant, ``PYTHONPATH=. python tests/judge/test_committed_baselines.py`` records the verdicts
anew.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sme2.judge.baseline import Baseline, Tolerances
from pytest_sme2.judge.baseline_file import load, to_json
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gates import judge
from pytest_sme2.records.measurement import LoadMeasurement, Measurement
from tests.measurements import HOST, counted_measurement, measurement

REPO = Path(__file__).resolve().parents[2]
COMMITTED = sorted((REPO / "baselines").glob("*/*.json"))
VERDICTS = Path(__file__).parent / "data" / "committed_verdicts.json"
#: What each case is judged with: every marker gate that reads the baseline's quantities too.
EXPECTATIONS = Expectations(require_sme2_kernels=True, instruction_ratio_floor=2.0)


def _name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _without_writer(text: str) -> str:
    """The file without its ``written_by`` line (the last key, when there is one)."""
    return re.sub(r',\n  "written_by": "[^"\n]*"(?=\n\}\n$)', "", text)


@pytest.mark.parametrize("path", COMMITTED, ids=_name)
def test_a_committed_baseline_reads_and_writes_back_the_same_file(path: Path) -> None:
    stored = load(path)
    assert stored is not None
    assert _without_writer(to_json(stored)) == _without_writer(path.read_text())


def measured_like(stored: Baseline) -> Measurement:
    """A measurement of the baseline's device kind (the host's, or an emulator's counted one)
    named as its case, with what loading cost (timed on the host, counted when emulated)."""
    host = stored.device == "host"
    m = measurement(HOST) if host else counted_measurement()
    timed = LoadMeasurement(458_816, 150 << 20, program_load_ms=0.4, method_init_ms=1.2)
    counted = LoadMeasurement(458_816, init_instructions=1_200_000)
    variants = {v: replace(vm, load=timed if host else counted) for v, vm in m.variants.items()}
    return replace(m, model=stored.model, dtype=stored.dtype, variants=variants)


def verdict_lines(path: Path) -> list[str]:
    """What judging :func:`measured_like` against the baseline at ``path`` says, one line per
    verdict and detail."""
    stored = load(path)
    assert stored is not None
    m = measured_like(stored)
    lines = []
    for v in judge(m, stored, EXPECTATIONS, Tolerances()):
        lines.append(f"{v.gate} {v.status}: {v.message}")
        lines += [f"    {detail}" for detail in v.details]
    return lines


def test_every_committed_baseline_has_its_recorded_verdicts() -> None:
    recorded = json.loads(VERDICTS.read_text())
    assert sorted(recorded) == [_name(path) for path in COMMITTED]


@pytest.mark.parametrize("path", COMMITTED, ids=_name)
def test_judging_against_a_committed_baseline_says_what_it_said(path: Path) -> None:
    assert verdict_lines(path) == json.loads(VERDICTS.read_text())[_name(path)]


if __name__ == "__main__":
    found = {_name(path): verdict_lines(path) for path in COMMITTED}
    VERDICTS.parent.mkdir(exist_ok=True)
    VERDICTS.write_text(json.dumps(found, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    print(f"recorded the verdicts of {len(found)} baselines in {VERDICTS}")
