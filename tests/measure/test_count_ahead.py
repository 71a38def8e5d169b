"""Counting ahead (:mod:`pytest_sme2.measure.count_ahead`) on the real qemu-sme2 device: what it
counts, that each case then reads its count back, and that a count failing ahead is left to its
case rather than raised."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sme2.devices.base import evidence_request
from pytest_sme2.devices.host import HostDevice
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.export.exporter import export_model
from pytest_sme2.measure.count_ahead import CountProgram, count_ahead, count_jobs
from pytest_sme2.records.device import Variant
from tests.judge.small_model import small_model

#: two programs of one small convolution each (1.5 s a count), as the store's own tests count
FIRST, SECOND = small_model("ahead_a", 3), small_model("ahead_b", 4)


@pytest.fixture
def keeping(tmp_path: Path) -> QemuSme2Device:
    """qemu-sme2 (provisioned, cached) keeping its counts in this test's own store."""
    device = QemuSme2Device(count_store=tmp_path / "store")
    device.prepare()
    return device


def test_each_program_is_counted_once_per_variant_where_the_device_keeps_counts(
    keeping: QemuSme2Device, tmp_path: Path
) -> None:
    artifact = export_model(FIRST, "fp32")
    program = CountProgram(keeping, artifact.pte, artifact.inputs)
    jobs = count_jobs([program, program], tmp_path / "ahead")
    assert [job.variant for job in jobs] == [Variant.ON, Variant.OFF]
    assert jobs[0].weight > jobs[1].weight  # SME2-on is the longer run under qemu
    on_host = CountProgram(HostDevice(), artifact.pte, artifact.inputs)
    assert count_jobs([on_host], tmp_path / "ahead") == ()
    recounting = QemuSme2Device(count_store=tmp_path / "store", recount=True)
    recounted = CountProgram(recounting, artifact.pte, artifact.inputs)
    assert count_jobs([recounted], tmp_path / "ahead") == ()


def test_a_case_reads_back_what_was_counted_ahead_and_a_failed_count_is_left_to_it(
    keeping: QemuSme2Device, tmp_path: Path
) -> None:
    exported = [export_model(spec, "fp32") for spec in (FIRST, SECOND)]
    broken = tmp_path / "broken.pte"
    broken.write_bytes(b"not a program")
    programs = [CountProgram(keeping, a.pte, a.inputs) for a in exported]
    programs.append(CountProgram(keeping, broken, exported[0].inputs))
    assert count_ahead(count_jobs(programs, tmp_path / "ahead")) == 4  # the broken two failed
    for index, artifact in enumerate(exported):
        for variant in (Variant.ON, Variant.OFF):
            request = evidence_request(
                artifact.pte, artifact.inputs, tmp_path / f"case{index}-{variant}", variant=variant
            )
            assert keeping.counted_run(request).evidence.stored_count_at.endswith("UTC")


def test_a_run_counted_ahead_keeps_its_cases_deadline(
    keeping: QemuSme2Device, tmp_path: Path
) -> None:
    """A hung count ahead is killed at its case's deadline, not the device's hour."""
    artifact = export_model(FIRST, "fp32")
    hurried = CountProgram(keeping, artifact.pte, artifact.inputs, timeout_s=0.01)
    assert count_ahead(count_jobs([hurried], tmp_path / "ahead")) == 0
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())
