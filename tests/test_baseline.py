"""Baseline JSON: stable, diffable, round-trips; updates keep what did not move; bad files
are named."""

from __future__ import annotations

import json

import pytest

from pytest_sme2 import baseline as store
from pytest_sme2.baseline import Tolerances, from_measurement, merge
from pytest_sme2.errors import ConfigError
from tests.measurements import SME2_DEVICE, measurement

TOL = Tolerances()


def test_round_trip_and_stable_text(tmp_path):
    b = from_measurement(measurement(SME2_DEVICE), TOL)
    path = tmp_path / "phone" / "toy-fp32.json"
    store.save(path, b)
    text = path.read_text()
    assert store.load(path) == b
    assert text == store.to_json(store.load(path))  # byte-stable
    doc = json.loads(text)
    assert list(doc) == sorted(doc)
    assert doc["speedup"]["value"] == 2.5
    assert doc["variants"]["sme2-on"]["packed_operators"] == [
        "Convolution (NHWC, PF32) IGEMM",
        "Fully Connected (NC, PF32) GEMM",
    ]


def test_reference_median_is_the_machine_speed_at_baseline_time():
    from dataclasses import replace

    m = measurement(SME2_DEVICE)
    assert from_measurement(m, TOL).reference_median_ms is None  # no reference timed
    timed = replace(m, reference_ms=(0.14, 0.13, 0.2, 0.15))
    assert from_measurement(timed, TOL).reference_median_ms == pytest.approx(0.145)


def test_floats_are_rounded_to_four_significant_digits():
    assert store.stable(1.23456789) == 1.235
    assert store.stable(0.000123456) == 0.0001235


def test_missing_file_is_none_and_bad_files_are_named(tmp_path):
    assert store.load(tmp_path / "none.json") is None
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match=r"bad\.json: not valid JSON"):
        store.load(bad)
    bad.write_text(json.dumps({"schema_version": 1, "model": "x"}))
    with pytest.raises(ConfigError, match=r"bad\.json: baseline has no 'variants'"):
        store.load(bad)
    bad.write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(ConfigError, match="schema 99"):
        store.load(bad)


def test_merge_keeps_values_within_tolerance_and_reports_changes():
    old = from_measurement(measurement(SME2_DEVICE), TOL)
    jitter = from_measurement(
        measurement(SME2_DEVICE, off_latencies=(10.2, 10.3, 10.1, 10.25, 10.15, 10.2)), TOL
    )
    merged, changes = merge(old, jitter, TOL)
    assert changes == ()
    assert merged == old
    slower = from_measurement(
        measurement(SME2_DEVICE, off_latencies=(15.0, 15.1, 14.9, 15.0, 15.0, 15.0)), TOL
    )
    merged, changes = merge(old, slower, TOL)
    assert "sme2-off median latency 10.0 → 15.0 ms" in changes
    assert any(c.startswith("speedup 2.5× → 3.75×") for c in changes)
    assert merged.variants["sme2-off"].latency.median_ms == 15.0
    assert merged.variants["sme2-on"].latency == old.variants["sme2-on"].latency


def test_new_baseline_is_reported_as_such():
    b = from_measurement(measurement(SME2_DEVICE), TOL)
    assert merge(None, b, TOL) == (b, ("new baseline",))


def test_evidence_round_trips_and_kernel_changes_are_reported(tmp_path):
    from dataclasses import replace

    from tests.measurements import EMULATOR, OFF_EVIDENCE, ON_EVIDENCE

    m = measurement(EMULATOR, on_evidence=ON_EVIDENCE, off_evidence=OFF_EVIDENCE)
    b = from_measurement(m, TOL)
    store.save(tmp_path / "b.json", b)
    assert store.load(tmp_path / "b.json") == b
    assert b.variants["sme2-on"].sme2_kernels == ON_EVIDENCE.sme2_kernels
    assert b.variants["sme2-on"].instructions == 86_000
    other = measurement(
        EMULATOR,
        on_evidence=replace(ON_EVIDENCE, sme2_kernels=("k_sme2",)),
        off_evidence=OFF_EVIDENCE,
    )
    _, changes = merge(b, from_measurement(other, TOL), TOL)
    assert changes == (f"sme2-on SME2 kernels {list(ON_EVIDENCE.sme2_kernels)} → ['k_sme2']",)
