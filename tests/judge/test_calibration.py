"""The latency gate's statistic (the fastest run relative to the reference workload's) and its
A/A calibration: pure functions on hand-made measurements, then a case recorded, calibrated and
judged as ``sme2_judge`` does (``CaseCheck``) on the host (real exports, the real runner)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sme2.devices.kinds import BUILT_IN_KINDS
from pytest_sme2.errors import ConfigError
from pytest_sme2.judge.baseline import Tolerances, from_measurement
from pytest_sme2.judge.baseline_file import load
from pytest_sme2.judge.baseline_model import LATENCY_STATISTIC
from pytest_sme2.judge.baseline_update import merge
from pytest_sme2.judge.calibration import calibrate, noise_percent, not_calibrated_reason
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gates import judge
from pytest_sme2.judge.policy import Policy
from pytest_sme2.judge.time_gates import LATENCY_SENSITIVITY
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status
from pytest_sme2.settings import OPTIONS, resolve
from tests.judge.host_case import case_check, host_device, measure_on_host, toy_cnn
from tests.measurements import EMULATOR, HOST, measurement

TOL = Tolerances()
OFF = (10.0, 10.1, 9.9, 10.05, 9.95, 10.0)  # fastest 9.9 ms
REFERENCE = (0.2, 0.21, 0.205, 0.2)  # fastest 0.2 ms


def scaled(values, factor):
    return tuple(factor * v for v in values)


def host(model_factor=1.0, machine_factor=1.0):
    """A host measurement whose model is ``model_factor`` slower, on a machine ``machine_factor``
    slower (the model and the reference beside it alike)."""
    return measurement(
        HOST,
        off_latencies=scaled(OFF, model_factor * machine_factor),
        reference_ms=scaled(REFERENCE, machine_factor),
    )


def latency(verdicts):
    return next(v for v in verdicts if v.gate == "latency[sme2-off]")


def test_a_whole_machine_slower_passes_and_a_slower_model_on_it_fails():
    base = from_measurement(host(), TOL)
    machine_slower = latency(judge(host(machine_factor=1.12), base, Expectations(), TOL))
    assert machine_slower.status is Status.PASS
    assert machine_slower.message.startswith(
        "E2E latency 1.000× the baseline relative to the machine's speed (fastest of 6 runs "
        "11.09 ms vs baseline 9.9 ms;"
    )
    regressed = latency(judge(host(1.05, machine_factor=0.97), base, Expectations(), TOL))
    assert regressed.status is Status.FAIL  # raw: only 1.9 % slower, on a faster machine
    assert "rose 5.0% relative to the machine's speed" in regressed.message
    assert "reference workload's fastest 0.194 ms vs 0.2 ms" in regressed.message


def test_a_record_without_reference_times_is_judged_on_the_raw_fastest_run():
    base = from_measurement(measurement(HOST, off_latencies=OFF), TOL)  # recorded before a ref
    v = latency(judge(host(machine_factor=1.12), base, Expectations(), TOL))
    assert v.status is Status.FAIL and "rose 12.0% in raw time (no reference timed)" in v.message


def test_the_update_keeps_a_latency_the_machine_alone_moved():
    base = from_measurement(host(), TOL)
    merged, changes = merge(base, from_measurement(host(machine_factor=1.2), TOL), TOL)
    assert changes == () and merged == base
    _, changes = merge(base, from_measurement(host(1.06), TOL), TOL)
    assert any("sme2-off fastest run 9.9 → 10.49 ms" in c for c in changes)


def calibrated(noise_factors, tmp_path, tol=TOL):
    """A baseline of ``host()`` calibrated over measurements slower by ``noise_factors``."""
    base = from_measurement(host(), tol)
    measurements = [host(f) for f in noise_factors]
    return base, calibrate(
        measurements, base, Policy(tol), path=tmp_path / "b.json", when="2026-11-24T05:00:00+00:00"
    )


def test_calibration_stores_the_noise_and_derives_the_tolerance_from_it(tmp_path):
    factors = (1.0, 1.02, 0.98, 1.01, 0.99)
    base, result = calibrated(factors, tmp_path)
    expected = 100 * math.sqrt(2) * _stdev([math.log(f) for f in factors])
    cal = result.calibration
    assert cal.runs == 5 and cal.statistic == LATENCY_STATISTIC
    assert cal.noise_percent == pytest.approx(
        expected, rel=1e-2
    )  # 2.24 %: of the stored (rounded) times
    assert cal.tolerance_percent == pytest.approx(3 * cal.noise_percent, rel=1e-3)
    # the portable part and every stored time are untouched: only the calibration is new
    record = result.baseline.machines[HOST.class_id]
    assert replace(result.baseline, machines={}) == replace(base, machines={})
    assert replace(record, calibration=None) == base.machines[HOST.class_id]
    # from then on the gate judges at the calibrated tolerance, and says what it sees
    verdicts = judge(host(1.05), result.baseline, Expectations(), TOL)
    assert latency(verdicts).status is Status.PASS  # 5 % is within 6.7 % of noise × 3
    sees = next(v for v in verdicts if v.gate == LATENCY_SENSITIVITY)
    assert sees.message.startswith(
        f"the latency gate sees a {cal.tolerance_percent + 1.96 * cal.noise_percent:.1f}% "
        "slowdown of toy[fp32] on host on this machine class in ≥ 95% of sessions (tolerance "
    )
    assert latency(judge(host(1.08), result.baseline, Expectations(), TOL)).status is Status.FAIL


def test_a_quiet_machine_keeps_the_default_tolerance_as_its_floor(tmp_path):
    _, result = calibrated((1.0, 1.001, 0.999), tmp_path)
    assert result.calibration.tolerance_percent == TOL.latency_percent
    record = result.baseline.machines[HOST.class_id]
    assert record.latency_percent(Tolerances(latency_percent=5.0)) == 5.0  # a higher floor wins


def test_an_uncalibrated_case_says_so(tmp_path):
    base = from_measurement(host(), TOL)
    sees = next(
        v for v in judge(host(), base, Expectations(), TOL) if v.gate == LATENCY_SENSITIVITY
    )
    assert "not calibrated on this machine class (--sme2-calibrate=5" in sees.message
    assert sees.details == (">3% (not calibrated)",)


def test_calibration_refuses_what_it_cannot_calibrate(tmp_path):
    with pytest.raises(ConfigError, match=r"no baseline for toy\[fp32\] on host at .*record one"):
        calibrate([host(), host()], None, Policy(TOL), path=tmp_path / "b.json", when="now")
    with pytest.raises(ConfigError, match="timed no reference workload"):
        noise_percent([measurement(HOST), measurement(HOST)])
    assert not_calibrated_reason(HOST) is None
    assert "instruction gates it has instead are exact" in str(not_calibrated_reason(EMULATOR))


def _stdev(values):
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def test_a_calibration_stores_the_noise_in_the_time_record_and_nothing_else(tmp_path):
    """Recorded, calibrated over 3 real measurements, judged: the calibration is the only key the
    file gains, and the judged case says the latency gate's calibrated detectable effect."""
    device = host_device()

    def measure(label: str) -> Measurement:
        return measure_on_host(device, toy_cnn(), tmp_path / label)

    recorder = case_check(tmp_path, Policy(TOL, update=True), measure)
    recorder.check(recorder.measure("record"))
    path = recorder.path
    before = json.loads(path.read_text())

    calibrator = case_check(tmp_path, Policy(TOL, calibrate_runs=3), measure)
    calibration = calibrator.check(calibrator.measure("calibrate-0"))
    ((said, summary),) = calibration.properties
    assert said == "sme2 calibration"
    assert re.match(
        r"the latency gate sees a [\d.]+% slowdown of toy_cnn\[fp32\] on host on this machine "
        r"class \(",
        summary,
    ), summary
    after = json.loads(path.read_text())
    ((class_id, record),) = after["machines"].items()
    cal = record.pop("calibration")
    assert cal["runs"] == 3 and cal["noise_percent"] >= 0 and cal["statistic"] == LATENCY_STATISTIC
    assert after == before  # the portable part and the stored times are as they were
    assert load(path).machines[class_id].calibration is not None

    judge = case_check(tmp_path, Policy(TOL), measure)
    verdicts = {v.gate: v for v in judge.check(judge.measure("judge")).verdicts}
    sees = cal["tolerance_percent"] + 1.96 * cal["noise_percent"]
    assert verdicts[LATENCY_SENSITIVITY].details == (f"{sees:.1f}%",)


def test_calibrate_refuses_one_measurement_and_an_update() -> None:
    ini = {option.dest: option.default for option in OPTIONS}

    def settings(**options: object):
        return resolve(options.get, lambda key: ini.get(key, ""), Path("."), BUILT_IN_KINDS)

    assert settings(sme2_calibrate="3").policy.calibrate_runs == 3
    with pytest.raises(ConfigError, match="--sme2-calibrate=1: give the number of unchanged"):
        settings(sme2_calibrate="1")
    with pytest.raises(ConfigError, match="--sme2-calibrate and --sme2-update-baselines do not"):
        settings(sme2_calibrate="3", sme2_update_baselines=True)
