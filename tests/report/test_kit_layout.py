"""The reference kit's contract (docs/kit-contract.md) on real cases: a case × device folder is a
kit run directory its tools read right, and a kit run directory is something ``sme2 report`` and
``sme2 compare`` read.

Written from the document, not from the kit's code: the file names, JSON keys and CSV columns
it lists, the globs its tools use (``**/*.etdump``, ``**/*_timeline.csv``, ``**/*_ops_stats.csv``)
and what they take the numbers to mean (``*_ms`` is time; ops_stats are per run).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pytest_sme2.analysis.etrecord import delegate_backends
from pytest_sme2.analysis.profile import INSTRUCTIONS, profile
from pytest_sme2.analysis.trace import EXECUTE, read_etdump
from pytest_sme2.case_context import RUNS_DIR, case_program
from pytest_sme2.case_files import manifest_config
from pytest_sme2.cli import main
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.reference import REFERENCE
from pytest_sme2.measure.case import measure
from pytest_sme2.measure.deadline import Deadline
from pytest_sme2.measure.fleet import Fleet
from pytest_sme2.records.outcome import CaseOutcome
from pytest_sme2.report.artifacts import write_artifacts
from pytest_sme2.report.charts import render_charts
from pytest_sme2.report.from_files import load_test_dir
from pytest_sme2.report.kit_json import TIME_MODEL, Program
from tests.judge.small_model import small_model
from tests.session.contexts import settings

MODEL = "kit_small"
STEM = f"{MODEL}_xnnpack_fp32"
KIT_TIMELINE = [
    *("model_id", "name", "type", "delegate_backend", "start_us", "end_us", "duration_ms"),
    *("pct_total", "node_id", "run_index", "block"),
]
KIT_OPS_STATS = [
    *("model_id", "name", "type", "delegate_backend", "count", "total_ms", "avg_ms"),
    "pct_total",
]
KIT_METRICS = {
    "runs",
    "threads",
    "latency_ms",
    "median_ms",
    "min_ms",
    "max_ms",
    "etdump",
    "log",
    "etdump_rel",
    "log_rel",
}
#: the fixed names the kit's tools write into a run directory (they would overwrite ours)
KIT_WRITES = ("analysis_summary.json", "report.md")


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One real case measured on the host and on qemu-sme2 (a fleet) and its files written as
    the session writes them when the test's report is made (``case_files``): the case folder
    of each, by device."""
    artifacts = tmp_path_factory.mktemp("kit-project") / "artifacts"
    chosen = settings(
        artifacts.parent / "baselines",
        sme2_device="host,qemu-sme2",
        sme2_runs="6",
        sme2_rounds="2",
        sme2_traced_runs="3",
        sme2_warmup="1",
    )
    spec = small_model(MODEL)
    reference = export_model(REFERENCE, "fp32")
    fleet = Fleet(lambda _: None)
    folders = {}
    for case in chosen.cases([spec]):
        device = case.device
        outcome = CaseOutcome(f"test_kit.py::test_model[{case.id}]", device.id, MODEL, "fp32", 1)
        program = case_program(case, export_model(case.model, "fp32"))
        folder = artifacts / device.directory / case.stem
        m = measure(
            fleet.device(device),
            program,
            chosen.plan,
            folder / RUNS_DIR,
            classifier=chosen.classifier,
            reference=(reference.pte, reference.inputs),
            deadline=Deadline(None),
        )
        write_artifacts(
            m,
            (),
            folder,
            config=manifest_config(chosen, outcome),
            charts=render_charts(m),
            title=outcome.nodeid,
            program=Program(program.pte, program.etrecord),
        )
        folders[device.id] = folder
    return folders


@pytest.fixture(params=["host", "qemu-sme2"])
def run_dir(request: pytest.FixtureRequest, run_dirs: dict[str, Path]) -> Path:
    return run_dirs[request.param]


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def _experiments(run: Path) -> list[str]:
    """The experiments of the run, as its manifest names them."""
    return [r["experiment"] for r in _json(run / "manifest.json")["results"]]


def test_the_case_folder_is_a_kit_run_directory(run_dir: Path):
    manifest, metrics = _json(run_dir / "manifest.json"), _json(run_dir / "metrics.json")
    # model: the .pte, its ETRecord where the tools look for it
    pte = Path(manifest["model"])
    assert pte.is_file() and pte.parent == run_dir and pte.name == f"{STEM}.pte"
    assert Path(f"{pte}.etrecord").is_file()
    assert manifest["config"] is None or Path(manifest["config"]).is_file()
    assert {"present", "sha", "dirty"} <= set(manifest["executorch"])
    assert manifest["results"] == metrics["results"]
    device = manifest["sme2"]["record"]["device"]
    assert sorted(_experiments(run_dir)) == sorted(
        f"{run_dir.parent.name}_{variant.replace('-', '_')}" for variant in device["variants"]
    )
    for result in metrics["results"]:
        experiment, values = result["experiment"], result["metrics"]
        assert set(values) >= KIT_METRICS
        prefix = f"{STEM}_{experiment}_t1"
        folder = run_dir / experiment
        assert (run_dir / values["etdump_rel"]) == folder / f"{prefix}.etdump"
        assert Path(values["etdump"]).samefile(folder / f"{prefix}.etdump")
        for suffix in ("_exec_all_runs_timeline.csv", "_exec_run0_timeline.csv"):
            timeline = folder / f"{prefix}{suffix}"
            # an emulator's clock is no signal: no timeline the kit would take latencies from
            assert timeline.is_file() == (not manifest["emulated"]), timeline
            if timeline.is_file():
                assert list(pd.read_csv(timeline).columns) == KIT_TIMELINE
        assert list(pd.read_csv(folder / f"{prefix}_exec_ops_stats.csv").columns) == KIT_OPS_STATS
        assert values["runs"] == len(values["latency_ms"]) > 0
        assert values["median_ms"] == pytest.approx(pd.Series(values["latency_ms"]).median())


def test_every_file_a_kit_glob_finds_is_in_its_experiment_folder(run_dir: Path):
    """The tools analyse and sum every ETDump they find, and name an experiment after a CSV's
    folder: one of each per experiment folder, none anywhere else (evidence runs included)."""
    globs = ("*.etdump", "*_all_runs_timeline.csv", "*_run0_timeline.csv", "*_ops_stats.csv")
    if _json(run_dir / "manifest.json")["emulated"]:
        globs = ("*.etdump", "*_ops_stats.csv")
        assert not list(run_dir.glob("**/*_timeline.csv"))
    for pattern in globs:
        found = sorted(p.relative_to(run_dir).parent for p in run_dir.glob(f"**/{pattern}"))
        assert found == sorted(Path(e) for e in _experiments(run_dir)), pattern
    for name in KIT_WRITES:
        assert not (run_dir / name).exists()


def test_ops_stats_are_per_run_figures(run_dirs: dict[str, Path]):
    """``count`` is instances in one run, ``total_ms`` the time of one run: together the
    operators cannot take longer than a run."""
    run_dir = run_dirs["host"]
    record = _json(run_dir / "manifest.json")["sme2"]["record"]
    for result in _json(run_dir / "manifest.json")["results"]:
        folder = run_dir / result["experiment"]
        prefix = f"{STEM}_{result['experiment']}_t1"
        timeline = pd.read_csv(folder / f"{prefix}_exec_all_runs_timeline.csv")
        stats = pd.read_csv(folder / f"{prefix}_exec_ops_stats.csv")
        variant = next(v for v in record["variants"] if result["variant"] == v["variant"])
        measured = timeline[timeline["run_index"] >= variant["profile"]["warmup"]]
        runs = measured["run_index"].nunique()
        for row in stats.itertuples():
            rows = measured[measured["type"] == row.name]
            assert row.count == len(rows) / runs
            assert row.total_ms == pytest.approx(rows["duration_ms"].sum() / runs)
            assert row.avg_ms == pytest.approx(rows["duration_ms"].mean())
        e2e = measured[measured["name"] == EXECUTE]["duration_ms"]
        assert stats["total_ms"].sum() <= e2e.max()


def _keyed(data: Any, suffix: str) -> Iterator[tuple[str, Any]]:
    """Every (key, value) under a key ending in ``suffix``, anywhere in ``data``."""
    if isinstance(data, dict):
        for key, value in data.items():
            if key.endswith(suffix):
                yield key, value
            yield from _keyed(value, suffix)
    elif isinstance(data, list):
        for value in data:
            yield from _keyed(value, suffix)


def _numbers(values: Any) -> set[float]:
    if isinstance(values, bool):
        return set()
    if isinstance(values, int | float):
        return {float(values)}
    if isinstance(values, dict):
        return {n for v in values.values() for n in _numbers(v)}
    if isinstance(values, list):
        return {n for v in values for n in _numbers(v)}
    return set()


def test_on_qemu_the_kit_reads_modelled_time_whose_speedup_is_the_instruction_ratio(
    run_dirs: dict[str, Path],
):
    """Emulated time is no signal: every ``*_ms`` the kit reads on qemu is modelled from the
    exact instruction counts (1 ms = 1 M instructions, said in both JSON files), so the speedup
    the kit's report computes (off ÷ on of ``median_ms``) is our instruction ratio — within the
    10 % the acceptance allows, exactly in fact. Our own files keep instructions under
    ``*_minstr`` names."""
    run = run_dirs["qemu-sme2"]
    manifest, metrics = _json(run / "manifest.json"), _json(run / "metrics.json")
    assert manifest["emulated"] is True and metrics["emulated"] is True
    assert manifest["time_model"] == metrics["time_model"] == TIME_MODEL
    record = manifest["sme2"]["record"]
    instructions = {v["variant"]: v["evidence"]["instructions"] for v in record["variants"]}
    medians = {}
    for result in metrics["results"]:
        values = result["metrics"]
        assert values["latency_ms"] == [instructions[result["variant"]] / 1e6]
        assert values["time_model"] == TIME_MODEL
        medians[result["variant"]] = values["median_ms"]
        prefix = f"{STEM}_{result['experiment']}_t1"
        folder = run / result["experiment"]
        modelled = pd.read_csv(folder / f"{prefix}_exec_ops_stats.csv")
        counted = pd.read_csv(folder / f"{prefix}_instructions_ops.csv")
        assert {"total_minstr", "avg_minstr"} <= set(counted.columns)
        assert modelled["total_ms"].tolist() == pytest.approx(counted["total_minstr"].tolist())
        assert modelled["total_ms"].sum() <= values["median_ms"]
    ratio = instructions["sme2-off"] / instructions["sme2-on"]
    assert medians["sme2-off"] / medians["sme2-on"] == pytest.approx(ratio, rel=0.10)
    summary = _json(run / "sme2_analysis_summary.json")
    assert "category_totals_ms" not in summary and summary["category_totals_minstr"]


def test_on_qemu_the_kit_etdump_is_the_counted_inference_timed_in_instructions(
    run_dirs: dict[str, Path],
):
    """The kit's ``analyze_results.py`` re-reads each experiment folder's ETDump and
    ``generate_report.py`` prefers what it writes to ``metrics.json``: on qemu that ETDump holds
    the counted inference alone, 1 ns = 1 guest instruction, so ``Method::execute`` is the
    instruction count and every operator its instruction profile, and the kit's speedup after
    ``analyze_results.py`` is our instruction ratio too. The runner's own ETDump keeps the
    emulator's clock."""
    run = run_dirs["qemu-sme2"]
    manifest = _json(run / "manifest.json")
    record = manifest["sme2"]["record"]
    backends = delegate_backends(run / f"{STEM}.pte.etrecord")
    e2e = {}
    for result in manifest["results"]:
        variant = next(v for v in record["variants"] if v["variant"] == result["variant"])
        kit_etdump = run / result["metrics"]["etdump_rel"]
        assert run / variant["modelled_etdump"] == kit_etdump
        trace = read_etdump(kit_etdump)
        assert [(r.events[0].name, r.e2e_ns) for r in trace.runs] == [
            (EXECUTE, variant["evidence"]["instructions"])
        ]
        # every operator's instructions, categories, shares: the profile the gates judged
        assert profile(trace, backends=backends, unit=INSTRUCTIONS).to_json() == variant["profile"]
        e2e[result["variant"]] = trace.runs[0].e2e_ns
        raw = read_etdump(run / variant["etdump"])  # in .sme2-runs, as the runner wrote it
        assert raw.runs[-1].e2e_ns != trace.runs[0].e2e_ns
    instructions = {v["variant"]: v["evidence"]["instructions"] for v in record["variants"]}
    assert e2e["sme2-off"] / e2e["sme2-on"] == instructions["sme2-off"] / instructions["sme2-on"]


def test_sme2_report_reloads_our_run_directory_exactly(run_dirs: dict[str, Path], tmp_path):
    artifacts = run_dirs["host"].parent.parent
    assert main(["report", str(artifacts), "--out", str(tmp_path / "out")]) == 0
    for device, run in run_dirs.items():
        measurement, _ = load_test_dir(run / "manifest.json")
        assert measurement.device.name == device
        again = tmp_path / "out" / f"{device}_{run.name}" / "sme2_report.md"
        assert again.read_text() == (run / "sme2_report.md").read_text()


def _kit_run(source: Path, target: Path, device: str, *, etrecord: bool) -> Path:
    """A kit run directory as the kit lays one out, from the ETDumps our runner wrote for
    ``source``: kit-only manifest (its ``model`` a path on another machine) and metrics,
    experiment folders, the program and (if ``etrecord``) its ETRecord beside the manifest."""
    results = []
    for result in _json(source / "manifest.json")["results"]:
        experiment = result["experiment"].replace(source.parent.name, device)
        folder = target / experiment
        folder.mkdir(parents=True)
        etdump = folder / f"{STEM}_{experiment}_t1.etdump"
        shutil.copy(source / result["metrics"]["etdump_rel"], etdump)
        results.append({"experiment": experiment, "metrics": {"etdump": str(etdump)}})
    shutil.copy(source / f"{STEM}.pte", target / f"{STEM}.pte")
    if etrecord:
        shutil.copy(source / f"{STEM}.pte.etrecord", target / f"{STEM}.pte.etrecord")
    manifest = {
        "model": f"/elsewhere/out_{MODEL}/{STEM}.pte",
        "config": None,
        "executorch": {"present": True, "sha": "0" * 40, "dirty": False},
        "results": results,
    }
    (target / "manifest.json").write_text(json.dumps(manifest))
    (target / "metrics.json").write_text(json.dumps({"results": results}))
    return target


@pytest.mark.parametrize("etrecord", [True, False], ids=["etrecord", "no-etrecord"])
def test_sme2_report_reads_a_kit_run_directory(
    run_dirs: dict[str, Path], tmp_path: Path, capsys, etrecord: bool
):
    source = run_dirs["qemu-sme2"]
    kit = _kit_run(source, tmp_path / "runs" / "mac", "mac", etrecord=etrecord)
    out = tmp_path / "report"
    assert main(["report", str(kit), "--out", str(out)]) == 0
    assert f"| {MODEL}_fp32_mac_t1 | {MODEL} | fp32 | mac |" in capsys.readouterr().out
    summary = _json(out / f"{MODEL}_fp32_mac_t1" / "sme2_analysis_summary.json")
    backends = delegate_backends(source / f"{STEM}.pte.etrecord") if etrecord else None
    for entry in summary["per_etdump"]:
        etdump = kit / entry["experiment"] / f"{STEM}_{entry['experiment']}_t1.etdump"
        trace = read_etdump(etdump)
        expected = profile(trace, warmup=min(1, len(trace.runs) - 1), backends=backends)
        assert entry["categories_ms"] == pytest.approx(dict(expected.categories_ms))
        assert entry["e2e_ms"] == pytest.approx(list(expected.e2e_ms))
        assert {d["backend"] for d in entry["operator_details"] if d["delegated"]} == {
            "XnnpackBackend"
        }
    assert {e["variant"] for e in summary["per_etdump"]} == {"sme2-on", "sme2-off"}


def test_sme2_compare_puts_two_kit_run_directories_side_by_side(
    run_dirs: dict[str, Path], tmp_path: Path, capsys
):
    mac = _kit_run(run_dirs["qemu-sme2"], tmp_path / "runs" / "mac", "mac", etrecord=True)
    android = _kit_run(run_dirs["host"], tmp_path / "runs" / "android", "android", etrecord=False)
    assert main(["compare", str(mac), str(android)]) == 0
    table = capsys.readouterr().out
    assert "mac" in table and "android" in table and MODEL in table
