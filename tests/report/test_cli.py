"""``sme2 analyze`` on traces from anywhere: our runner, ExecuTorch's Python bindings; bad input
is one line naming the file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sme2.analysis.categories import CATEGORIES
from pytest_sme2.analysis.profile import profile
from pytest_sme2.analysis.trace import read_etdump
from pytest_sme2.cli import main

DATA = Path(__file__).parents[1] / "data"
FOREIGN = DATA / "xnnpack_cnn_fp32_3runs.etdp"  # written by ExecuTorch's Python bindings


def test_json_has_the_promised_keys_and_categories_sum_to_e2e(capsys):
    assert main(["analyze", str(FOREIGN), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    trace = read_etdump(FOREIGN)
    assert doc["e2e_ms"] == pytest.approx([run.e2e_ms for run in trace.runs])
    assert list(doc["categories_ms"]) == list(CATEGORIES)
    mean = sum(doc["e2e_ms"]) / len(doc["e2e_ms"])
    assert sum(doc["categories_ms"].values()) == pytest.approx(mean)
    op = doc["operators"][0]
    assert {"name", "category", "count", "total_ms", "share"} <= set(op)
    assert op["share"] == pytest.approx(op["total_ms"] / len(doc["e2e_ms"]) / mean)


def test_warmup_drops_the_first_runs_in_order(capsys):
    main(["analyze", str(FOREIGN), "--json", "--warmup", "1"])
    doc = json.loads(capsys.readouterr().out)
    expected = [run.e2e_ms for run in read_etdump(FOREIGN).runs[1:]]
    assert doc["e2e_ms"] == pytest.approx(expected)


def test_text_output_shows_stats_categories_and_top_operators(capsys):
    assert main(["analyze", str(FOREIGN), "--top", "3"]) == 0
    out = capsys.readouterr().out
    prof = profile(read_etdump(FOREIGN))
    assert f"median {prof.latency.median_ms:.3f}" in out
    for category in CATEGORIES:
        assert category in out
    assert "top 3 operators by share of E2E:" in out
    assert prof.operators[0].name in out


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "no such file"),
        (b"", "empty"),
        (b"\x00" * 64, ""),
        (FOREIGN.read_bytes()[:200], ""),
        (b"PK\x03\x04 this is a zip, or a .pte, not an ETDump" * 8, ""),
    ],
    ids=["missing", "empty", "zeros", "truncated", "not-an-etdump"],
)
def test_bad_input_is_one_line_naming_the_file(tmp_path: Path, content, needle):
    path = tmp_path / "bad.etdump"
    if content is not None:
        path.write_bytes(content)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_sme2.cli", "analyze", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"sme2: error: {path}: ")
    assert needle in lines[0]
    assert "Traceback" not in proc.stderr


def test_a_pte_given_as_a_trace_is_named():
    import models  # noqa: F401  (registers toy_cnn)
    from pytest_sme2.export.exporter import export_model
    from pytest_sme2.export.model_spec import get_model

    pte = export_model(get_model("toy_cnn"), "fp32").pte
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_sme2.cli", "analyze", str(pte)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"sme2: error: {pte}: ")


def test_etrecord_names_the_backend_of_delegated_operators(tmp_path: Path, capsys):
    import models  # noqa: F401  (registers toy_cnn)
    from pytest_sme2.export.exporter import export_model
    from pytest_sme2.export.model_spec import get_model
    from pytest_sme2.runner.build import build_runner
    from pytest_sme2.runner.invoke import Executions, RunnerCall, run_runner

    artifact = export_model(get_model("toy_cnn"), "fp32")
    result = run_runner(
        build_runner("host"),
        RunnerCall(artifact.pte, artifact.inputs, Executions(runs=2, traced=True), tmp_path),
    )
    args = ["analyze", str(result.etdump), "--json", "--etrecord", str(artifact.etrecord)]
    assert main(args) == 0
    operators = json.loads(capsys.readouterr().out)["operators"]
    backends = {op["name"]: op["backend"] for op in operators}
    assert backends["Convolution (NHWC, F32) IGEMM"] == "XnnpackBackend"
    assert backends["native_call_mean.out"] == "non-delegated"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"not a zip", "not an ETRecord (not a zip archive)"),
        (None, "no such file"),
    ],
)
def test_bad_etrecord_is_one_line(tmp_path: Path, content, problem):
    etrecord = tmp_path / "bad.etrecord"
    if content is not None:
        etrecord.write_bytes(content)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_sme2.cli",
            "analyze",
            str(FOREIGN),
            "--etrecord",
            str(etrecord),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"sme2: error: {etrecord}: {problem}\n"
