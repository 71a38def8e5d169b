"""``sme2 report RUN_DIR`` and ``sme2 compare OFF ON`` over real ETDumps laid out like the
reference workflow's run directories, and over pytest-sme2's own artifact directories."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from pytest_sme2.analysis.trace import read_etdump
from pytest_sme2.cli import main
from pytest_sme2.records.device import Variant
from pytest_sme2.records.verdict import Status, Verdict
from pytest_sme2.report.artifacts import write_artifacts
from pytest_sme2.report.charts import render_charts
from pytest_sme2.report.from_files import measurement_from_etdumps
from pytest_sme2.report.markdown import case_report

DATA = Path(__file__).parents[1] / "data"
CNN = DATA / "xnnpack_cnn_fp32_3runs.etdp"
ATTENTION = DATA / "xnnpack_attention_fp16_2runs.etdp"


@pytest.fixture
def kit_run_dir(tmp_path: Path) -> Path:
    """The reference workflow's layout: runs/mac/<experiment>/<stem>_<experiment>_t1.etdump."""
    run = tmp_path / "runs" / "mac"
    for variant, source in (("on", ATTENTION), ("off", CNN)):
        folder = run / f"mac_sme2_{variant}"
        folder.mkdir(parents=True)
        shutil.copy(source, folder / f"toy_xnnpack_fp16_mac_sme2_{variant}_t1.etdump")
    return run


def test_report_pairs_kit_etdumps_and_writes_everything(kit_run_dir: Path, capsys):
    assert main(["report", str(kit_run_dir)]) == 0
    printed = capsys.readouterr()
    # beside the run directory, not in it: the kit's tools would sum the report's ETDump copies
    out = kit_run_dir.parent / "mac-sme2-report"
    assert len(list(kit_run_dir.glob("**/*.etdump"))) == 2
    assert printed.out == (out / "report.md").read_text()
    assert "| toy_fp16_mac_t1 | toy | fp16 | mac |" in printed.out
    case = out / "toy_fp16_mac_t1"
    summary = json.loads((case / "sme2_analysis_summary.json").read_text())
    assert {e["experiment"] for e in summary["per_etdump"]} == {"mac_sme2_on", "mac_sme2_off"}
    # latency comes from the traced runs, first (cold) run dropped by default
    on = read_etdump(ATTENTION)
    on_entry = next(e for e in summary["per_etdump"] if e["variant"] == "sme2-on")
    assert on_entry["e2e_ms"] == pytest.approx([r.e2e_ms for r in on.runs[1:]])
    assert "traced runs' E2E" in (case / "sme2_report.md").read_text()
    ops = pd.read_csv(case / "mac_sme2_on" / "toy_xnnpack_fp16_mac_sme2_on_t1_exec_ops_stats.csv")
    assert len(ops) == len(on_entry["operator_details"])
    # Output put inside the run directory is ignored when it is read again.
    inside = ["--out", str(kit_run_dir / "sme2-report")]
    assert main(["report", str(kit_run_dir), *inside]) == 0
    assert main(["report", str(kit_run_dir), *inside]) == 0
    assert capsys.readouterr().out == printed.out * 2


def test_report_reloads_pytest_sme2_artifacts_exactly(tmp_path: Path, capsys):
    m = measurement_from_etdumps({Variant.OFF: CNN, Variant.ON: ATTENTION}, warmup=1, model="cnn")
    verdicts = (Verdict("speedup", Status.SKIP, "no timing runs"),)
    written = write_artifacts(
        m, verdicts, tmp_path / "art" / "host" / "cnn-fp32", config={}, charts=render_charts(m)
    )
    assert main(["report", str(tmp_path / "art"), "--out", str(tmp_path / "out")]) == 0
    assert "| host_cnn-fp32 | cnn |" in capsys.readouterr().out
    again = tmp_path / "out" / "host_cnn-fp32" / "sme2_report.md"
    assert again.read_text() == written.report_md.read_text()


def test_compare_prints_the_report_of_off_against_on(tmp_path: Path, capsys):
    assert main(["compare", str(CNN), str(ATTENTION), "--warmup", "0"]) == 0
    text = capsys.readouterr().out
    m = measurement_from_etdumps(
        {Variant.OFF: CNN, Variant.ON: ATTENTION}, warmup=0, model=ATTENTION.stem
    )
    assert text == case_report(m, ())
    assert m.comparison.speedup.describe() in text
    assert main(["compare", str(CNN), str(ATTENTION), "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "sme2_report.md").read_text() == capsys.readouterr().out


def test_unlabelled_etdump_is_a_one_line_error(tmp_path: Path, capsys):
    shutil.copy(CNN, tmp_path / "model.etdump")
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "model.etdump" in err and "sme2_on or sme2_off" in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["report", "{tmp}/missing"], "not a directory"),
        (["report", "{tmp}"], "no ETDump"),
        (["compare", "{tmp}/a.etdump", str(CNN)], "a.etdump"),
    ],
)
def test_user_errors_exit_2_with_one_line(tmp_path: Path, capsys, args, needle):
    assert main([a.format(tmp=tmp_path) for a in args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sme2: error:") and needle in err and "\n" not in err
