"""Run artifacts: the reference workflow's file names, CSV columns and JSON keys, with values
cross-checked against the analysis (Profile) they were written from."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from pytest_sme2.analysis.categories import CATEGORIES, OTHER
from pytest_sme2.analysis.trace import EXECUTE, read_etdump
from pytest_sme2.records.device import Variant
from pytest_sme2.records.verdict import Status, Verdict
from pytest_sme2.report.artifacts import (
    OPS_STATS_COLUMNS,
    TIMELINE_COLUMNS,
    file_prefix,
    ops_stats_frame,
    timeline_frame,
    write_artifacts,
)
from pytest_sme2.report.charts import render_charts
from pytest_sme2.report.from_files import load_test_dir, measurement_from_etdumps
from tests.measurements import ON_OPS, SME2_DEVICE, make_trace, measurement

DATA = Path(__file__).parents[1] / "data"
CNN = DATA / "xnnpack_cnn_fp32_3runs.etdp"
ATTENTION = DATA / "xnnpack_attention_fp16_2runs.etdp"

# Column names of the reference workflow, as listed in docs/reference-kit.md.
KIT_TIMELINE = (
    "model_id, name, type, delegate_backend, start_us, end_us, duration_ms, pct_total, node_id, "
    "run_index, block"
)
KIT_OPS_STATS = "model_id, name, type, delegate_backend, count, total_ms, avg_ms, pct_total"


@pytest.fixture
def real(tmp_path: Path):
    """A two-variant measurement from real ETDumps (the CNN trace as off, attention as on)."""
    off = tmp_path / "in" / "cnn_sme2_off.etdump"
    on = tmp_path / "in" / "cnn_sme2_on.etdump"
    off.parent.mkdir()
    shutil.copy(CNN, off)
    shutil.copy(ATTENTION, on)
    return measurement_from_etdumps(
        {Variant.OFF: off, Variant.ON: on}, warmup=1, model="cnn", dtype="fp32", device="mac"
    )


@pytest.fixture
def written(real, tmp_path: Path):
    verdicts = (Verdict("speedup-floor", Status.PASS, "SME2 speedup ok"),)
    return (
        real,
        verdicts,
        write_artifacts(
            real, verdicts, tmp_path / "out", config={"runs": 4}, charts=render_charts(real)
        ),
    )


def test_column_names_are_the_reference_kits():
    assert ", ".join(TIMELINE_COLUMNS) == KIT_TIMELINE
    assert ", ".join(OPS_STATS_COLUMNS) == KIT_OPS_STATS


def test_files_use_the_kit_names(written):
    m, _, files = written
    for variant in (Variant.OFF, Variant.ON):
        prefix = file_prefix(m, variant)
        assert prefix == f"cnn_xnnpack_fp32_mac_{variant.value.replace('-', '_')}_t1"
        f = files.variants[variant]
        assert f.folder == files.directory / f"mac_{variant.value.replace('-', '_')}"
        assert f.etdump == f.folder / f"{prefix}.etdump"
        assert f.timeline_all.name == f"{prefix}_exec_all_runs_timeline.csv"
        assert f.timeline_run0.name == f"{prefix}_exec_run0_timeline.csv"
        assert f.ops_stats.name == f"{prefix}_exec_ops_stats.csv"
        for path in (f.etdump, f.timeline_all, f.timeline_run0, f.ops_stats, f.chrome_trace):
            assert path.is_file()
        assert f.etdump.read_bytes() == m.variants[variant].etdump.read_bytes()
    for path in (
        files.analysis_summary,
        files.manifest,
        files.metrics,
        files.report_md,
        *files.charts.values(),
    ):
        assert path.is_file()
    # ours never bear a name the kit's tools write into the run directory
    assert files.analysis_summary.name == "sme2_analysis_summary.json"
    assert files.report_md.name == "sme2_report.md"


def test_ops_stats_match_the_profile_and_pct_total_is_share_of_e2e(written):
    m, _, files = written
    for variant, vm in m.variants.items():
        prof = vm.profile
        table = pd.read_csv(files.variants[variant].ops_stats)
        assert tuple(table.columns) == OPS_STATS_COLUMNS
        assert list(table["name"]) == [op.name for op in prof.operators]
        for row, op in zip(table.itertuples(), prof.operators, strict=True):
            # per run, as the kit's tools read them: instances and time of one run
            assert row.count == op.count / prof.runs
            assert row.total_ms == pytest.approx(op.per_run_ms)
            assert row.avg_ms == pytest.approx(op.total_ms / op.count)
            # share of E2E: per-run time over the mean Method::execute, in percent
            assert row.pct_total == pytest.approx(100 * op.per_run_ms / prof.latency.mean_ms)
            assert row.delegate_backend == ("XnnpackBackend" if op.delegated else "non-delegated")
        named = [op.category != OTHER for op in prof.operators]
        # Named-category operators add up to E2E minus the Other residual, never to 100 % of a sum.
        assert table["pct_total"][named].sum() == pytest.approx(100 * (1 - prof.shares[OTHER]))


def test_timelines_hold_every_event_with_share_of_its_run(written):
    m, _, files = written
    for variant, vm in m.variants.items():
        trace = read_etdump(vm.etdump)
        table = pd.read_csv(files.variants[variant].timeline_all)
        assert tuple(table.columns) == TIMELINE_COLUMNS
        assert len(table) == sum(len(run.events) for run in trace.runs)
        execute = table[table["name"] == EXECUTE]
        assert list(execute["run_index"]) == [run.index for run in trace.runs]
        assert list(execute["duration_ms"]) == pytest.approx([run.e2e_ms for run in trace.runs])
        assert (execute["pct_total"] == 100).all()
        for run in trace.runs:
            rows = table[table["run_index"] == run.index]
            assert list(rows["name"]) == [e.name for e in run.events]
            assert list(rows["pct_total"]) == pytest.approx(
                [100 * e.duration_ms / run.e2e_ms for e in run.events]
            )
        assert (table["end_us"] - table["start_us"]).to_numpy() == pytest.approx(
            table["duration_ms"].to_numpy() * 1000
        )
        run0 = pd.read_csv(files.variants[variant].timeline_run0)
        assert set(run0["run_index"]) == {trace.runs[0].index}
        assert list(run0["name"]) == [e.name for e in trace.runs[0].events]


def test_timeline_type_strips_the_instance_counter():
    table = timeline_frame(make_trace(ON_OPS), "toy")
    convs = table[table["name"].str.startswith("Convolution")]
    assert set(convs["type"]) == {"Convolution (NHWC, PF32) IGEMM"}
    assert set(convs["name"]) == {"Convolution (NHWC, PF32) IGEMM #1"}


def test_ops_stats_frame_has_one_row_per_operator_kind():
    m = measurement(SME2_DEVICE)
    prof = m.variants[Variant.OFF].profile
    table = ops_stats_frame(prof, "toy")
    assert len(table) == len(prof.operators)
    assert (table["model_id"] == "toy").all()


def test_analysis_summary_has_the_kit_keys_and_the_profile_values(written):
    m, _, files = written
    summary = json.loads(files.analysis_summary.read_text())
    on = m.variants[Variant.ON].profile  # the headline variant where SME2-on was measured
    assert summary["category_totals_variant"] == "sme2-on"
    assert summary["category_totals_ms"] == pytest.approx(dict(on.categories_ms))
    assert list(summary["category_totals_ms"]) == list(CATEGORIES)
    assert {e["variant"] for e in summary["per_etdump"]} == {"sme2-off", "sme2-on"}
    for entry in summary["per_etdump"]:
        prof = m.variants[Variant(entry["variant"])].profile
        assert (files.directory / entry["etdump"]).is_file()
        assert entry["categories_ms"] == pytest.approx(dict(prof.categories_ms))
        assert entry["e2e_ms"] == pytest.approx(list(prof.e2e_ms))
        for path in entry["csv_files"]:
            assert (files.directory / path).is_file()
    details = summary["operator_details"]
    assert [d["name"] for d in details] == [op.name for op in on.operators]
    for d, op in zip(details, on.operators, strict=True):
        assert {"name", "category", "avg_ms", "count", "total_ms", "kernel_hint"} <= set(d)
        assert (d["category"], d["count"]) == (op.category, op.count)
        assert d["avg_ms"] == pytest.approx(op.mean_ms)
        assert d["total_ms"] == pytest.approx(op.total_ms)
    assert summary["comparison"]["speedup"] == pytest.approx(m.comparison.speedup.value)


def test_manifest_records_versions_device_config_latencies_and_verdicts(written):
    m, verdicts, files = written
    data = json.loads(files.manifest.read_text())
    ours = data["sme2"]
    assert ours["generator"] == "pytest-sme2"
    assert ours["config"] == {"runs": 4}
    assert {"executorch", "python", "pytest-sme2"} <= set(ours["versions"])
    assert ours["record"]["device"]["name"] == "mac"
    assert ours["record"]["device"]["fingerprint"] == dict(m.device.fingerprint)
    assert ours["verdicts"] == [
        {"gate": v.gate, "status": v.status.value, "message": v.message, "details": []}
        for v in verdicts
    ]
    # the kit's keys: no program was given, config names no file, results per experiment
    assert data["model"] is None and data["config"] is None
    assert data["emulated"] is False
    results = {r["experiment"]: r["metrics"] for r in data["results"]}
    assert data["results"] == json.loads(files.metrics.read_text())["results"]
    for variant, vm in m.variants.items():
        metrics = results[f"mac_{variant.value.replace('-', '_')}"]
        # traces made elsewhere have no timing-only runs: the traced runs' E2E
        assert metrics["latency_ms"] == pytest.approx(list(vm.latencies_ms))
        assert metrics["median_ms"] == pytest.approx(vm.profile.latency.median_ms)
        assert files.directory / metrics["etdump_rel"] == files.variants[variant].etdump


def test_a_written_test_dir_reloads_to_the_same_report(written):
    m, verdicts, files = written
    reloaded, reloaded_verdicts = load_test_dir(files.manifest)
    assert reloaded_verdicts == verdicts
    # the same record, its ETDumps now the copies in the test directory
    copies = {v: replace(vm, etdump=files.variants[v].etdump) for v, vm in m.variants.items()}
    assert reloaded == replace(m, variants=copies)


def test_timing_only_latencies_are_the_kit_results(tmp_path: Path):
    m = measurement(SME2_DEVICE)
    files = write_artifacts(m, (), tmp_path / "out", config={}, charts={})
    data = json.loads(files.manifest.read_text())
    results = {r["variant"]: r["metrics"] for r in data["results"]}
    for variant, vm in m.variants.items():
        assert results[str(variant)]["latency_ms"] == pytest.approx(list(vm.latencies_ms))
        assert results[str(variant)]["runs"] == len(vm.latencies_ms)
    # the hand-made measurement's traced ETDump does not exist: no file, no link to it
    assert not any(f.etdump.exists() for f in files.variants.values())
    assert all(r["metrics"]["etdump"] is None for r in data["results"])
    assert all("ETDump" not in label for label, _ in files.links())
