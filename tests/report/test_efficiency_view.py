"""The 'Work and efficiency' section and the roofline chart on real measurements: a real export on
qemu-sme2 (multiply-adds per SME instruction against a full-tile outer product at its SVL), the
mac device told it is an M4 (GFLOP/s against the M4's published peak, or --sme2-peak's) and a
phone behind the adb double (peak unknown). The GFLOP/s are checked against the times the
traced runs recorded."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sme2.analysis.categories import is_leaf
from pytest_sme2.analysis.work import OperatorWork
from pytest_sme2.devices import mac
from pytest_sme2.devices.android import AndroidDevice
from pytest_sme2.devices.mac import MacDevice
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.measure.plan import MeasurePlan
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.report.charts import render_charts
from pytest_sme2.report.content import coverage_text
from pytest_sme2.report.efficiency_view import WORK_TITLE, efficiency_view
from pytest_sme2.report.markdown import section_markdown
from pytest_sme2.report.sections import View, case_sections
from pytest_sme2.runner.build import build_runner
from tests.adb_double import install
from tests.devices.test_device_android import _FEATURES, NO_SME2_PHONE, SERIAL, cpuinfo
from tests.devices.test_device_mac import M4_SYSCTL
from tests.judge.host_case import measure_case
from tests.judge.small_model import small_model

#: the small model's one convolution: 3 → 16 channels, 3×3, on 16×16
CONV_SHAPE = "conv 3×3 M=256 N=16 K=27"
CONV_MACS = 256 * 16 * 27
TIMED = MeasurePlan(runs=2, rounds=1, warmup=1, traced_runs=3)


def _section(m: Measurement, view: View = View.FULL) -> str:
    (section,) = [s for s in case_sections(m, (), view) if s.title == WORK_TITLE]
    return section_markdown(section)


def test_qemu_sme2_shows_multiply_adds_per_sme_instruction_against_its_svl(
    stored_qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    plan = MeasurePlan(runs=1, rounds=1, warmup=1, traced_runs=1)
    m = measure_case(stored_qemu_device, small_model("work_small"), tmp_path, plan)
    for variant in (Variant.ON, Variant.OFF):
        (op,) = m.variants[variant].work
        assert (op.shape, op.macs, op.m) == (CONV_SHAPE, CONV_MACS, 256)
    view = efficiency_view(m)
    assert view is not None and view.counted and view.svl_bytes == 64
    (on,) = view.variants[Variant.ON]
    (off,) = view.variants[Variant.OFF]
    assert on.family == "SME2 MOPA" and on.ideal == 256
    assert on.sme_instructions and 0 < on.sme_instructions < on.instructions  # type: ignore[operator]
    assert off.sme_instructions == 0 and off.macs_per_sme is None
    # SME2 does the same work in fewer instructions
    assert on.macs_per_instruction > off.macs_per_instruction  # type: ignore[operator]
    text = _section(m)
    assert "0.11 M multiply-adds per inference in 1 GEMM and convolution operator(s)" in text
    assert "of the ideal (one full-tile outer product per SME instruction at SVL 512: 256" in text
    assert f"| {CONV_SHAPE} | 0.111 | SME2 MOPA |" in text
    assert on.ideal_share is not None and f"{100 * on.ideal_share:.1f}%" in text
    assert "roofline" in render_charts(m)
    # the record keeps the work and the SME instructions per function across processes
    assert Measurement.from_json(m.to_json(tmp_path), tmp_path) == m
    assert m.variants[Variant.ON].evidence.sme_functions  # type: ignore[union-attr]


def _fastest_ms(m: Measurement, variant: Variant, op: OperatorWork) -> float:
    """The operator's fastest kept traced run, as the ETDump recorded it."""
    vm = m.variants[variant]
    times = []
    for run in vm.parsed_trace().runs[vm.profile.warmup :]:
        leaves = [event for event in run.events if is_leaf(event.name)]
        times.append(leaves[op.position].duration_ms)
    return min(times)


def _gflops_rows_match_the_trace(m: Measurement) -> None:
    view = efficiency_view(m)
    assert view is not None and not view.counted
    for variant, found in view.variants.items():
        (work,) = m.variants[variant].work
        (op,) = found
        ms = _fastest_ms(m, variant, work)
        assert op.ms == pytest.approx(ms)
        assert op.gflops == pytest.approx(2 * CONV_MACS / (ms * 1e6))


def test_a_mac_m4_shows_gflops_against_its_published_peak_or_the_given_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(mac, "_on_a_mac", lambda: True)
    monkeypatch.setattr(mac, "_sysctl", lambda *keys: M4_SYSCTL)
    runner = build_runner("host")
    device = MacDevice(runner_on=runner, runner_off=runner)
    device.prepare()
    m = replace(measure_case(device, small_model("work_small"), tmp_path, TIMED), disturbance=None)
    assert m.peak is not None and m.peak.gflops == 2000.0
    assert "arXiv 2409.18779" in m.peak.source
    assert Measurement.from_json(m.to_json(tmp_path), tmp_path).peak == m.peak
    _gflops_rows_match_the_trace(m)
    text = _section(m)
    assert "of the peak 2,000 GFLOP/s" in text and "Peak: Apple M4 P-cluster SME" in text
    (on,) = efficiency_view(m).variants[Variant.ON]  # type: ignore[union-attr]
    assert on.peak_share == pytest.approx(on.gflops / 2000.0)  # type: ignore[operator]
    assert f"{100 * on.peak_share:.1f}%" in text  # type: ignore[operator]
    assert "roofline" in render_charts(m)
    # coverage by name where no kernels per operator are shown: the host runner standing in for
    # the Mac's SME2-on runs its convolution unpacked, so none of the work is SME2's
    assert coverage_text(m) == "0.0%"
    given = replace(TIMED, peak_gflops=50.0)
    m = measure_case(device, small_model("work_small"), tmp_path / "given", given)
    assert m.peak is not None and (m.peak.gflops, m.peak.source) == (50.0, "--sme2-peak=50")
    assert "of the peak 50 GFLOP/s" in _section(m, View.BRIEF)


def test_a_phone_without_a_published_peak_says_peak_unknown(tmp_path: Path) -> None:
    adb = install(
        tmp_path / "phone",
        serial=SERIAL,
        cpuinfo=cpuinfo(8, _FEATURES),
        properties=NO_SME2_PHONE,
    )
    runner = build_runner("host")
    device = AndroidDevice.from_options({"sme2_adb": str(adb), "sme2_runner_on": str(runner)}.get)
    device.prepare()
    m = measure_case(device, small_model("work_small"), tmp_path / "work", TIMED)
    assert m.peak is not None and m.peak.gflops is None
    assert m.peak.source == "peak unknown for GS201 at 32-bit operands"
    _gflops_rows_match_the_trace(m)
    text = _section(m)
    assert "Peak: peak unknown for GS201" in text and "% of the peak" not in text
