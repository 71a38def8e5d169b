"""measure(): interleaved rounds, traced runs, and on/off parity of the outputs — on the host
device with a real export (one variant) and, for parity, on real tensor files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import models  # noqa: F401  (registers toy_cnn)
from pytest_sme2.devices.base import Variant
from pytest_sme2.devices.host import HostDevice
from pytest_sme2.errors import ConfigError, RunnerError
from pytest_sme2.export import export_model
from pytest_sme2.measure import MeasurePlan, _parity, measure
from pytest_sme2.models import get_model
from pytest_sme2.tensors import write_tensors
from tests.measurements import OFF_OPS, ON_OPS, variant


def test_runs_are_split_evenly_over_rounds():
    assert MeasurePlan(runs=10, rounds=4).runs_per_round() == [3, 3, 2, 2]
    assert MeasurePlan(runs=2, rounds=4).runs_per_round() == [1, 1]
    with pytest.raises(ConfigError, match="--sme2-runs must be ≥ 1"):
        MeasurePlan(runs=0)


def test_host_measurement_of_a_real_model(tmp_path: Path):
    artifact = export_model(get_model("toy_cnn"), "fp32")
    device = HostDevice()
    device.prepare()
    plan = MeasurePlan(runs=6, warmup=1, rounds=3, traced_runs=2)
    m = measure(
        device,
        model="toy_cnn",
        dtype="fp32",
        pte=artifact.pte,
        inputs=artifact.inputs,
        plan=plan,
        workdir=tmp_path,
    )
    assert list(m.variants) == [Variant.OFF]  # x86: no SME2
    off = m.variants[Variant.OFF]
    assert len(off.latencies_ms) == 6 and len(off.timing_runs) == 3
    assert off.profile.runs == 2 and off.profile.warmup == 1
    assert m.comparison is None and m.parity is None and m.instruction_ratio is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "sme2-off-round0",
        "sme2-off-round1",
        "sme2-off-round2",
        "sme2-off-traced",
    ]


def with_outputs(v: Variant, path: Path, arrays):
    write_tensors(path, arrays)
    vm = variant(v, ON_OPS if v is Variant.ON else OFF_OPS, [1.0])
    return replace(vm, traced=replace(vm.traced, outputs=path))


def test_parity_judges_on_against_off_with_the_dtype_tolerance(tmp_path: Path):
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    same = {
        Variant.ON: with_outputs(Variant.ON, tmp_path / "on", [x + 1e-7]),
        Variant.OFF: with_outputs(Variant.OFF, tmp_path / "off", [x]),
    }
    assert _parity(same, "toy", "fp32").ok
    broken = {**same, Variant.ON: with_outputs(Variant.ON, tmp_path / "on2", [x * 1.5])}
    numerics = _parity(broken, "toy", "fp32")
    assert not numerics.ok and numerics.max_abs == pytest.approx(0.5)
    assert _parity({Variant.OFF: same[Variant.OFF]}, "toy", "fp32") is None
    odd = {**same, Variant.ON: with_outputs(Variant.ON, tmp_path / "on3", [x[:2]])}
    with pytest.raises(RunnerError, match=r"outputs of toy\[fp32\] differ: output 0 has shape"):
        _parity(odd, "toy", "fp32")
