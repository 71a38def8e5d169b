"""What a remote worker ships with a test's report, on its objects: a run directory packed on
one side and laid out on the other, where the outcome's and the measurement's paths and a
history record then point; the payload survives JSON, as it crosses xdist as JSON. A real
worker on another gateway is tests/e2e/test_lab.py."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from pytest_sme2.judge.history import GitState, HistoryRecord
from pytest_sme2.lab.shipping import Shipment, moved, pack, relocate, relocated_record, unpack
from pytest_sme2.records.device import Variant
from pytest_sme2.records.outcome import CaseOutcome
from tests.measurements import SME2_DEVICE, measurement

CASE = "qemu-sme2@worker=lab/toy-fp32"


def _measured_there(root: Path) -> CaseOutcome:
    """A measured test's outcome on the worker: its run directory under ``root``, each
    variant's ETDump in a folder of its own, the program copied beside them."""
    run_dir = root / CASE
    m = measurement(SME2_DEVICE)
    variants = {}
    for v, vm in m.variants.items():
        etdump = run_dir / f"toy_{v.value}" / "toy.etdump"
        etdump.parent.mkdir(parents=True)
        etdump.write_bytes(f"etdump of {v.value}".encode())
        variants[v] = replace(vm, etdump=etdump)
    (run_dir / "sme2_report.md").write_text("# toy\n")
    (run_dir / "toy.pte").write_bytes(b"program")
    return CaseOutcome(
        "t.py::test_model[qemu-sme2:worker=lab-toy-fp32]",
        "qemu-sme2:worker=lab",
        "toy",
        "fp32",
        1,
        replace(m, variants=variants),
        run_dir=run_dir,
        case_report=run_dir / "sme2_report.md",
        pte=run_dir / "toy.pte",
        baseline=Path("/lab/checkout/baselines/qemu-sme2/toy-fp32.json"),
    )


def test_a_run_directory_packed_there_is_laid_out_here_and_the_outcome_points_at_it(
    tmp_path: Path,
) -> None:
    there, here = tmp_path / "lab" / "artifacts", tmp_path / "controller" / "sme2-run"
    outcome = _measured_there(there)
    shipment = pack(outcome, there, "lab", ["{}"])
    crossed = Shipment.from_json(json.loads(json.dumps(shipment.to_json())))
    assert crossed == shipment
    unpack(crossed, here)
    moved_outcome = relocate(outcome, there, here)
    assert moved_outcome.run_dir == here / CASE
    assert moved_outcome.case_report is not None and moved_outcome.case_report.read_text() == (
        "# toy\n"
    )
    assert moved_outcome.pte is not None and moved_outcome.pte.read_bytes() == b"program"
    assert moved_outcome.measurement is not None
    for v, vm in moved_outcome.measurement.variants.items():
        assert vm.etdump.read_bytes() == f"etdump of {v.value}".encode()
    assert Variant.ON in moved_outcome.measurement.variants
    # what is not in the worker's artifacts stays as it was: its baseline is its checkout's
    assert moved_outcome.baseline == outcome.baseline
    assert moved(Path("/elsewhere/x"), there, here) == Path("/elsewhere/x")


def test_a_history_record_made_there_points_at_the_run_directory_here(tmp_path: Path) -> None:
    there, here = tmp_path / "lab" / "artifacts", tmp_path / "controller" / "sme2-run"
    outcome = _measured_there(there)
    assert outcome.measurement is not None and outcome.run_dir is not None
    record = HistoryRecord(
        outcome.measurement,
        (),
        GitState(commit="abc123"),
        datetime(2026, 12, 7, tzinfo=UTC),
        outcome.device,
        outcome.nodeid,
        outcome.run_dir,
    )
    unpack(pack(outcome, there, "lab", []), here)
    kept = relocated_record(json.dumps(record.to_json()), there, here)
    assert kept.artifacts == here / CASE and kept.git.commit == "abc123"
    for vm in kept.measurement.variants.values():
        assert vm.etdump.is_file() and vm.etdump.is_relative_to(here)
