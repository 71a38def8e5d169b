"""The case record's JSON is lossless: a record built from real runs — on the host, and on
qemu-sme2 with its instruction counts, executed kernels and parity — comes back equal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import models  # noqa: F401  (registers toy_cnn)
from pytest_sme2.analysis.categories import Classifier
from pytest_sme2.devices.base import Device
from pytest_sme2.devices.host import HostDevice
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.model_spec import get_model
from pytest_sme2.measure.case import measure
from pytest_sme2.measure.plan import CaseProgram, MeasurePlan
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement


def measured(device: Device, dtype: str, workdir: Path) -> Measurement:
    artifact = export_model(get_model("toy_cnn"), dtype)
    # program and quantization error, as the plugin passes them
    program = CaseProgram(
        "toy_cnn",
        dtype,
        artifact.pte,
        artifact.inputs,
        artifact.etrecord,
        numerics=artifact.numerics,
    )
    return measure(
        device,
        program,
        MeasurePlan(runs=4, warmup=1, rounds=2, traced_runs=2),
        workdir,
        # an override the record must carry: the profiles were classified with it
        classifier=Classifier({"Transpose (ND, X32)": "Other"}),
    )


def round_trip(m: Measurement, base: Path) -> Measurement:
    """Through text, as a worker saves it and the xdist controller reads it back."""
    return Measurement.from_json(json.loads(json.dumps(m.to_json(base))), base)


@pytest.mark.parametrize("dtype", ["fp32", "int8"])
def test_a_host_record_round_trips_exactly(dtype: str, tmp_path: Path) -> None:
    device = HostDevice()
    device.prepare()
    m = measured(device, dtype, tmp_path / "work")
    assert m.reference_ms == () and m.overrides == {"transpose (nd, x32)": "Other"}
    assert m.numerics is not None and (m.numerics.quantization is None) == (dtype == "fp32")
    again = round_trip(m, tmp_path)
    assert again == m
    assert isinstance(again.variants[Variant.OFF].latencies_ms, tuple)
    assert again.variants[Variant.OFF].etdump.is_file()


@pytest.mark.parametrize("dtype", ["fp32", "int8"])
def test_a_qemu_record_round_trips_with_its_evidence(
    dtype: str, stored_qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    m = measured(stored_qemu_device, dtype, tmp_path / "work")
    on = m.variants[Variant.ON]
    assert on.evidence is not None and on.evidence.sme2_kernels and on.profile.counts_instructions
    assert m.parity is not None and m.instruction_ratio is not None and m.comparison is not None
    again = round_trip(m, tmp_path)
    assert again == m
    assert again.instruction_ratio == m.instruction_ratio
    assert again.comparison == m.comparison
