"""The whole pipeline on every example model × dtype: export → native runner (traced) → our ETDump
reader and analysis, checked against ExecuTorch's Inspector on the same file.

A known export failure (``tests/known_failures.py``: ExecuTorch 1.5.1's fp16 LayerNorm on ViT, a
refused lowering) is a strict xfail; any other export failure fails.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import models  # noqa: F401  (registers the example models)
from pytest_sme2.analysis.profile import profile
from pytest_sme2.analysis.trace import read_etdump
from pytest_sme2.errors import ExportError
from pytest_sme2.export.exporter import Artifact, export_model
from pytest_sme2.runner.build import build_runner
from pytest_sme2.runner.invoke import Executions, RunnerCall, run_runner
from tests.known_failures import example_cases, expect_known

CASES = example_cases()
RUNS, WARMUP = 3, 1


@pytest.fixture(scope="module")
def inspector_cls() -> type:
    """ExecuTorch's Inspector: part of the executorch wheel, so an import that fails is a broken
    install, and fails the tests that need it (it used to skip them on any exception)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the devtools import pulls in much of torch
        from executorch.devtools import Inspector
    return Inspector


def exported(spec, dtype) -> Artifact:
    try:
        return export_model(spec, dtype)
    except ExportError as err:
        raise expect_known(err) from None


@pytest.mark.parametrize(("spec", "dtype"), CASES)
def test_export_run_and_analysis_agree_with_inspector(spec, dtype, inspector_cls, tmp_path: Path):
    artifact = exported(spec, dtype)
    result = run_runner(
        build_runner("host"),
        RunnerCall(
            artifact.pte,
            artifact.inputs,
            Executions(runs=RUNS, warmup=WARMUP, threads=1, traced=True),
            tmp_path,
        ),
    )
    trace = read_etdump(result.etdump)
    assert len(trace.runs) == RUNS + WARMUP

    inspector = inspector_cls(etdump_path=str(result.etdump), etrecord=str(artifact.etrecord))
    frame = inspector.to_dataframe()
    executes = frame[frame["event_name"] == "Method::execute"]
    inspector_e2e = [ms for raw in executes["raw"] for ms in raw]
    assert [run.e2e_ms for run in trace.runs] == pytest.approx(inspector_e2e, rel=1e-9, abs=1e-9)

    prof = profile(trace, warmup=WARMUP)
    assert sum(prof.categories_ms.values()) == pytest.approx(prof.latency.mean_ms, rel=1e-12)
    assert prof.categories_ms["Other"] >= -1e-3, "named leaves cannot exceed E2E"
    assert prof.operators, "an XNNPACK program has operators"
