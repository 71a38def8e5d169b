"""Baseline JSON: stable, diffable, round-trips; updates keep what did not move; bad files
are named."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_sme2.errors import ConfigError
from pytest_sme2.judge import baseline_file as store
from pytest_sme2.judge.baseline import Tolerances, from_measurement
from pytest_sme2.judge.baseline_update import merge
from pytest_sme2.judge.moves import stable
from tests.measurements import HOST, SME2_DEVICE, measurement

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
    assert doc["machines"][SME2_DEVICE.class_id]["speedup"]["value"] == 2.5
    assert doc["machines"][SME2_DEVICE.class_id]["notes"] == {"android": "16"}
    assert doc["variants"]["sme2-on"]["packed_operators"] == [
        "Convolution (NHWC, PF32) IGEMM",
        "Fully Connected (NC, PF32) GEMM",
    ]


def test_reference_fastest_run_is_the_machine_speed_at_baseline_time():
    from dataclasses import replace

    m = measurement(SME2_DEVICE)
    record = from_measurement(m, TOL).record_for(SME2_DEVICE)
    assert record is not None and record.reference_fastest_ms is None  # no reference timed
    timed = replace(m, reference_ms=(0.14, 0.13, 0.2, 0.15))
    record = from_measurement(timed, TOL).record_for(SME2_DEVICE)
    assert record is not None and record.reference_fastest_ms == 0.13


def test_floats_are_rounded_to_four_significant_digits():
    assert stable(1.23456789) == 1.235
    assert stable(0.000123456) == 0.0001235


def test_missing_file_is_none_and_bad_files_are_named(tmp_path):
    assert store.load(tmp_path / "none.json") is None
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match=r"bad\.json: not valid JSON"):
        store.load(bad)
    bad.write_text(json.dumps({"schema_version": 2, "model": "x"}))
    with pytest.raises(ConfigError, match=r"bad\.json: not a valid baseline: .*'dtype' is a req"):
        store.load(bad)
    bad.write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(ConfigError, match="schema 99"):
        store.load(bad)


COMMITTED = sorted((Path(__file__).parents[2] / "baselines").glob("*/*.json"))


@pytest.mark.parametrize("path", COMMITTED, ids=[f"{p.parent.name}/{p.name}" for p in COMMITTED])
def test_every_committed_baseline_is_valid(path):
    assert store.schema_problem(json.loads(path.read_text())) is None
    assert store.load(path) is not None


def test_committed_baselines_exist():
    assert len(COMMITTED) >= 20


_LATENCY = f"machines.{SME2_DEVICE.class_id}.variants.sme2-off.latency.min_ms"


def _stored(tmp_path: Path) -> tuple[Path, dict]:
    path = tmp_path / "host" / "toy-fp32.json"
    store.save(path, from_measurement(measurement(SME2_DEVICE), TOL))
    return path, json.loads(path.read_text())


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("NaN", "nan is not of type 'number'"),
        ("-Infinity", "-inf is not of type 'number'"),
        ("1e999", "inf is not of type 'number'"),
        ("-1", "-1 is less than or equal to the minimum of 0"),
        ("0", "0 is less than or equal to the minimum of 0"),
        ('"0.5"', "'0.5' is not of type 'number'"),
        ("true", "True is not of type 'number'"),
    ],
)
def test_a_stored_value_outside_the_schema_is_one_line_naming_file_key_and_value(
    tmp_path, value, said
):
    """NaN passed every gate ("nan× the baseline"), 0 and "0.5" ended in a traceback: each is
    now refused when read, before anything is judged against it."""
    path, _ = _stored(tmp_path)
    text = path.read_text()
    path.write_text(text.replace('"min_ms": 9.9', f'"min_ms": {value}', 1))
    with pytest.raises(store.InvalidBaseline) as failure:
        store.load(path)
    message = str(failure.value)
    assert message == (
        f"{path}: not a valid baseline: {_LATENCY}: {said}; regenerate it with "
        "--sme2-update-baselines (which sets the invalid file aside)"
    )


@pytest.mark.parametrize(
    ("key_path", "value", "said"),
    [
        (("variants", "sme2-on", "operators", "Transpose (ND, X32)"), -2, '"Transpose (ND, X32)"'),
        (("machines", SME2_DEVICE.class_id, "variants", "sme2-on", "shares", "GEMM"), 1.5, "GEMM"),
        (("machines", SME2_DEVICE.class_id, "variants", "sme2-on", "shares", "Gemm"), 0.1, "Gemm"),
        (("variants", "sme2-maybe"), {"operators": {}, "packed_operators": []}, "sme2-maybe"),
        (("machines", SME2_DEVICE.class_id, "speedup", "low"), 0, "speedup"),
        (("threads",), 0, "threads"),
        (("tolerances", "latency_percent"), -3, "latency_percent"),
        (("model_name",), "toy", "model_name"),
        (("variants", "sme2-on", "operator_sme2_kernels"), {"Conv": "kai_x"}, "Conv"),
        (("variants", "sme2-on", "operator_sme2_kernels"), {"Conv": ["k", "k"]}, "Conv"),
    ],
)
def test_kinds_ranges_and_keys_are_as_documented(tmp_path, key_path, value, said):
    path, doc = _stored(tmp_path)
    node = doc
    for key in key_path[:-1]:
        node = node[key]
    node[key_path[-1]] = value
    path.write_text(json.dumps(doc))
    with pytest.raises(store.InvalidBaseline, match=r"not a valid baseline: ") as failure:
        store.load(path)
    assert said in str(failure.value) and "\n" not in str(failure.value)


def test_a_time_record_may_say_how_it_was_calibrated(tmp_path):
    path, doc = _stored(tmp_path)
    record = doc["machines"][SME2_DEVICE.class_id]
    record["calibration"] = {
        "runs": 10,
        "noise_percent": 1.2,
        "tolerance_percent": 3.0,
        "statistic": "fastest",
        "when": "2026-11-24T05:00:00Z",
    }
    path.write_text(json.dumps(doc))
    assert store.load(path) is not None
    record["calibration"]["runs"] = 1
    path.write_text(json.dumps(doc))
    with pytest.raises(store.InvalidBaseline, match=r"calibration\.runs: 1 is less than"):
        store.load(path)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"schema_version": 2, "model": "toy_cnn", "dt', "not valid JSON"),
        ("[1, 2, 3]", "(the document): [1, 2, 3] is not of type 'object'"),
        ('{"name": "pytest-sme2", "version": "0.1.0"}', "'schema_version' is a required property"),
        ('{"schema_version": 1}', "baseline schema 1, this pytest-sme2 reads 2"),
        ("[" * 100_000, "nested too deeply"),
        ("{" + "x" * 5000, "not valid JSON"),
    ],
)
def test_truncated_and_foreign_files_are_one_line(tmp_path, text, said):
    path = tmp_path / "b.json"
    path.write_text(text)
    with pytest.raises(store.InvalidBaseline) as failure:
        store.load(path)
    assert said in str(failure.value) and len(str(failure.value)) < 500


def test_a_newer_schema_names_the_version_that_reads_it_and_is_never_set_aside(tmp_path):
    path, doc = _stored(tmp_path)
    assert doc["written_by"] == store.package_version()
    path.write_text(json.dumps({**doc, "schema_version": 3, "written_by": "9.1.0"}))
    for update in (False, True):
        with pytest.raises(store.NewerBaseline) as failure:
            store.read(path, update=update)
        assert str(failure.value) == (
            f"{path}: baseline schema 3, written by pytest-sme2 9.1.0; this pytest-sme2 "
            f"({store.package_version()}) reads schema 2: judge this case with pytest-sme2 9.1.0 "
            "(the file is left as it is, --sme2-update-baselines included)"
        )
    path.write_text(json.dumps({"schema_version": 3}))
    with pytest.raises(store.NewerBaseline, match="a newer pytest-sme2 than "):
        store.read(path, update=True)
    assert list(path.parent.iterdir()) == [path]


def test_under_update_an_invalid_file_is_set_aside_and_named(tmp_path):
    path, _ = _stored(tmp_path)
    text = path.read_text().replace('"min_ms": 9.9', '"min_ms": NaN', 1)
    path.write_text(text)
    with pytest.raises(store.InvalidBaseline):
        store.read(path, update=False)
    stored = store.read(path, update=True)
    assert stored.baseline is None and not path.exists()
    (aside,) = path.parent.iterdir()
    assert re.fullmatch(r"toy-fp32\.json\.invalid-\d{8}T\d{6}\.\d{6}Z", aside.name)
    assert aside.read_text() == text
    assert stored.set_aside == (
        f"set aside the invalid baseline as {aside} (not a valid baseline: {_LATENCY}: "
        "nan is not of type 'number')"
    )


def test_a_baseline_outside_the_schema_is_never_written(tmp_path):
    from dataclasses import replace

    b = from_measurement(measurement(HOST), TOL)
    record = b.machines[HOST.class_id]
    times = record.variants["sme2-off"]
    bad = replace(
        b,
        machines={
            HOST.class_id: replace(
                record,
                variants={"sme2-off": replace(times, shares={**times.shares, "Other": -0.5})},
            )
        },
    )
    path = tmp_path / "b.json"
    with pytest.raises(ConfigError, match=r"would not validate: .*Other: -0\.5 is less than"):
        store.save(path, bad)
    assert not path.exists()


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
    tag = f"[{SME2_DEVICE.class_id}] "
    assert f"{tag}sme2-off fastest run 9.9 → 14.9 ms (median 10.0 → 15.0 ms)" in changes
    assert any(c.startswith(f"{tag}speedup 2.5× → 3.75×") for c in changes)
    record, old_record = merged.machines[SME2_DEVICE.class_id], old.machines[SME2_DEVICE.class_id]
    assert record.variants["sme2-off"].latency.median_ms == 15.0
    assert record.variants["sme2-on"].latency == old_record.variants["sme2-on"].latency


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


def test_another_machine_class_adds_its_record_and_leaves_the_others_byte_identical(tmp_path):
    from dataclasses import replace

    recorded = from_measurement(measurement(HOST), TOL)
    path = tmp_path / "host" / "toy-fp32.json"
    store.save(path, recorded)
    before = json.loads(path.read_text())["machines"][HOST.class_id]
    other = replace(HOST, machine_class={**HOST.machine_class, "cpu": "Other CPU"})
    slower = replace(measurement(HOST, off_latencies=(20.0, 20.1, 19.9, 20.0)), device=other)
    merged, changes = merge(store.load(path), from_measurement(slower, TOL), TOL)
    assert changes == (
        f"[{other.class_id}] new time record: cores: 2, cpu: Other CPU, executorch: 1.5.1, "
        "isa: avx2 fma",
    )
    store.save(path, merged)
    doc = json.loads(path.read_text())
    assert doc["machines"][HOST.class_id] == before
    assert set(doc["machines"]) == {HOST.class_id, other.class_id}
    assert HOST.class_id.startswith("test-cpu-2c-") and other.class_id.startswith("other-cpu-2c-")


def test_notes_follow_the_times_they_describe():
    from dataclasses import replace

    old = from_measurement(measurement(HOST), TOL)
    patched = replace(HOST, fingerprint={**HOST.fingerprint, "os": "Linux 6.1.2"})
    same = from_measurement(replace(measurement(HOST), device=patched), TOL)
    merged, changes = merge(old, same, TOL)  # a kernel patch alone rewrites nothing
    assert changes == () and merged == old
    slower = replace(measurement(HOST, off_latencies=(15.0, 15.1, 14.9, 15.0)), device=patched)
    merged, changes = merge(old, from_measurement(slower, TOL), TOL)
    assert f"[{HOST.class_id}] note os: 'Linux 6.1.1' → 'Linux 6.1.2'" in changes
    assert merged.machines[HOST.class_id].notes["os"] == "Linux 6.1.2"


def test_emulated_time_keeps_no_time_record():
    from tests.measurements import EMULATOR

    assert from_measurement(measurement(EMULATOR), TOL).machines == {}


def test_a_faster_model_replaces_the_stored_latency_too():
    old = from_measurement(measurement(HOST), TOL)
    faster = from_measurement(measurement(HOST, off_latencies=(9.0, 9.1, 8.9, 9.0)), TOL)
    merged, changes = merge(old, faster, TOL)
    assert changes == (
        f"[{HOST.class_id}] sme2-off fastest run 9.9 → 8.9 ms (median 10.0 → 9.0 ms)",
    )
    assert merged.machines[HOST.class_id].variants["sme2-off"].latency.min_ms == 8.9


def test_instructions_per_operator_round_trip_and_update_as_one_block(tmp_path):
    from dataclasses import replace

    from tests.measurements import ON_OPS, counted_measurement

    tol = Tolerances()
    new = from_measurement(counted_measurement(), tol)
    path = tmp_path / "b.json"
    store.save(path, new)
    loaded = store.load(path)
    assert loaded == new and loaded.variants["sme2-on"].instruction_shares["Other"] == 0.25

    # an older baseline without them: recorded, and said so
    bare = replace(
        new,
        variants={
            name: replace(v, operator_instructions={}, instruction_shares={})
            for name, v in new.variants.items()
        },
    )
    merged, changes = merge(bare, new, tol)
    assert merged == new
    assert "sme2-on instructions per operator and category shares recorded" in changes

    # within tolerance (+0.5 % in one operator): every stored count stays as it was
    grown = counted_measurement(on_ops=((ON_OPS[0][0], 1.02), *ON_OPS[1:]))
    merged, changes = merge(new, from_measurement(grown, tol), tol)
    assert changes == () and store.to_json(merged) == store.to_json(new)

    # beyond it: instructions, per-operator counts and shares move together
    grown = counted_measurement(on_ops=((ON_OPS[0][0], 1.2), *ON_OPS[1:]))
    merged, changes = merge(new, from_measurement(grown, tol), tol)
    stored = merged.variants["sme2-on"]
    assert stored.instructions == 4_200_000
    assert stored.operator_instructions["Convolution (NHWC, PF32) IGEMM"] == 1_200_000
    assert changes == (
        "sme2-on instructions/inference 4000000 → 4200000",
        "instruction ratio 2.25× → 2.143×",  # exact counts: judged at the instruction tolerance
    )


def test_a_baseline_that_cannot_be_written_is_one_line_naming_the_path(tmp_path):
    """A directory that cannot take the file (here its parent is a file; a read-only mount or a
    full disk fail the same call) keeps what is stored and says where and what to do."""
    blocked = tmp_path / "baselines"
    blocked.write_text("not a directory")
    path = blocked / "host" / "toy-fp32.json"
    with pytest.raises(ConfigError) as failure:
        store.save(path, from_measurement(measurement(HOST), Tolerances()))
    message = str(failure.value)
    assert message.startswith(f"{path}: cannot write the baseline (")
    assert "--sme2-baseline-dir" in message and "\n" not in message
    assert blocked.read_text() == "not a directory"
    with pytest.raises(ConfigError, match=r"cannot read the baseline \(Not a directory\)"):
        store.load(path)


def test_sme2_kernels_per_operator_kind_are_optional_stored_and_read_back(tmp_path):
    """A baseline written before the key reads as before and is written back without it; one
    with it keeps it, to the byte."""
    path, doc = _stored(tmp_path)
    assert "operator_sme2_kernels" not in doc["variants"]["sme2-on"]
    kernels = {"Convolution (NHWC, PF32) IGEMM": ["kai_kernel_matmul_clamp_f32_sme2_mopa"]}
    doc["variants"]["sme2-on"]["operator_sme2_kernels"] = kernels
    path.write_text(json.dumps(doc))
    loaded = store.load(path)
    assert loaded is not None
    assert loaded.variants["sme2-on"].operator_sme2_kernels == {
        kind: tuple(names) for kind, names in kernels.items()
    }
    assert json.loads(store.to_json(loaded))["variants"]["sme2-on"]["operator_sme2_kernels"] == (
        kernels
    )
