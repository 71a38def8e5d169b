"""Degenerate outputs end to end: an inner pytest measures a model whose outputs vanish (~1e-40)
on the host. The session passes — the model is the user's — but says so: one warning line with
what to do, a "vacuous" numerics verdict in report.md, the HTML report and the terminal table;
and SME2-on/off parity on the program's real outputs is vacuous too."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sme2.cache import cache_root
from pytest_sme2.judge.baseline import Tolerances
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gates import judge
from pytest_sme2.measure.output_checks import parity
from pytest_sme2.records.device import Variant
from pytest_sme2.records.verdict import Status
from pytest_sme2.report.artifacts import REPORT_NAME
from pytest_sme2.report.from_files import load_test_dir

pytest_plugins = ["pytester"]

#: Resolved at import, before pytester points HOME elsewhere: the inner run reuses the caches.
CACHE = cache_root()

INNER_CONFTEST = '''
import torch
from torch import nn

from pytest_sme2 import register_model


def vector(seed):
    return (torch.randn(1, 64, generator=torch.Generator().manual_seed(seed)),)


@register_model("vanishing", inputs=vector, dtypes=("fp32",))
def vanishing():
    """Weights ~1e-20 in two layers: outputs ~1e-40, denormal."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 8))
    with torch.no_grad():
        for layer in model:
            layer.weight.mul_(1e-20)
            layer.bias.zero_()
    return model.eval()
'''

INNER_TEST = """
def test_model(sme2_measurement, sme2_judge):
    sme2_judge(sme2_measurement)
"""


def test_vanishing_outputs_pass_vacuously_and_every_report_says_so(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SME2_CACHE_DIR", str(CACHE))
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_vanishing=INNER_TEST)
    artifacts = tmp_path / "artifacts"
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--sme2-runs=2",
        "--sme2-rounds=1",
        "--sme2-traced-runs=1",
        "--sme2-warmup=1",
        f"--sme2-baseline-dir={tmp_path / 'baselines'}",
        "--sme2-update-baselines",
        f"--sme2-artifacts={artifacts}",
        "--html=report.html",
        "--self-contained-html",
        timeout=600,
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*DegenerateOutputWarning: vanishing[[]fp32]: degenerate outputs (eager fp32 PyTorch: "
            "output 0 is denormal (max |x| *)): its numerics and SME2-on/off parity verdicts are "
            "vacuous; initialise the weights at a realistic scale*calibrate batch-norm*",
        ]
    )
    table = result.stdout.str().split("pytest-sme2", 1)[-1]
    assert "vacuous (program err" in table

    case = artifacts / "host" / "vanishing-fp32"
    report = (case / REPORT_NAME).read_text()
    numerics = report.split("## Numerics", 1)[1].split("\n## ", 1)[0]
    assert "| degenerate outputs | eager fp32 PyTorch: output 0 is denormal" in numerics
    assert "| program error | vacuous (eager fp32 PyTorch: output 0 is denormal" in numerics
    assert "| vacuous |" in numerics
    assert "| numerics | pass | vacuous: the outputs of vanishing[fp32] are degenerate" in report
    assert (
        "vacuous: the outputs of vanishing[fp32] are degenerate"
        in (pytester.path / "report.html").read_text()
    )

    # Parity of the program's real outputs (the host runs SME2-off only: judged against itself,
    # as on a device that runs both): vacuous, and its verdict says so.
    measurement, _ = load_test_dir(case / "manifest.json")
    assert measurement.numerics is not None and measurement.numerics.program.vacuous
    off = measurement.variants[Variant.OFF]
    assert off.outputs is not None
    on_off = parity(
        {Variant.ON: replace(off, variant=Variant.ON), Variant.OFF: off}, "vanishing", "fp32"
    )
    assert on_off is not None and on_off.ok
    assert on_off.vacuous is not None and on_off.vacuous.startswith("output 0 is ")
    verdicts = {
        v.gate: v
        for v in judge(replace(measurement, parity=on_off), None, Expectations(), Tolerances())
    }
    assert verdicts["parity"].status is Status.PASS
    assert verdicts["parity"].message.startswith(
        "vacuous: SME2-on outputs match SME2-off trivially"
    )
