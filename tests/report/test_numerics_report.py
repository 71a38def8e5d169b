"""Degenerate outputs end to end, on the objects a session uses: a model whose outputs vanish
(~1e-40) exported, measured on the host and judged. The case passes — the model is the user's —
but says so: one warning with what to do, a "vacuous" numerics verdict in its report.md, its
pytest-html extra and the session's table; and SME2-on/off parity on the program's real outputs
is vacuous too."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.analysis.numerics import DegenerateOutputWarning
from pytest_sme2.case_context import OUTCOME_KEY, CaseJudge, CaseMeasure
from pytest_sme2.devices.host import HostDevice
from pytest_sme2.export import exporter
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.export.reference import REFERENCE
from pytest_sme2.judge.baseline import Tolerances
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gates import judge
from pytest_sme2.measure.output_checks import parity
from pytest_sme2.records.device import Variant
from pytest_sme2.records.verdict import Status
from pytest_sme2.report.artifacts import write_artifacts
from pytest_sme2.report.html import extra_html
from pytest_sme2.report.session_report import build_session_report
from pytest_sme2.report.terminal import summary_lines
from tests.session.contexts import case_context, host_case, settings, twin


def _vanishing() -> Any:
    """Weights ~1e-20 in two layers: outputs ~1e-40, denormal."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 8))
    with torch.no_grad():
        for layer in model:
            layer.weight.mul_(1e-20)
            layer.bias.zero_()
    return model.eval()


def _vector(seed: int) -> tuple[Any, ...]:
    import torch

    return (torch.randn(1, 64, generator=torch.Generator().manual_seed(seed)),)


VANISHING = ModelSpec("vanishing", _vanishing, _vector, "outputs ~1e-40", ("fp32",))


def test_vanishing_outputs_pass_vacuously_and_every_report_says_so(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exporter, "_WARNED", set())  # it warns once per process: here
    with pytest.warns(DegenerateOutputWarning) as warned:
        export_model(VANISHING, "fp32")
    (warning,) = warned
    assert re.fullmatch(
        r"vanishing\[fp32\]: degenerate outputs \(eager fp32 PyTorch: output 0 is denormal "
        r"\(max \|x\| .*\)\): its numerics and SME2-on/off parity verdicts are vacuous; "
        r"initialise the weights at a realistic scale.*calibrate batch-norm.*",
        str(warning.message),
        flags=re.S,
    ), warning.message

    host = HostDevice.from_options(lambda _: None)
    host.prepare()
    reference = export_model(REFERENCE, "fp32")
    chosen = settings(tmp_path / "baselines", sme2_update_baselines=True)
    context = case_context(
        twin(request),
        host_case(VANISHING),
        chosen,
        host,
        (reference.pte, reference.inputs),
        tmp_path / "run",
    )
    verdicts = CaseJudge(context, context.check(CaseMeasure(context))).check(
        CaseMeasure(context)("")
    )
    measurement = context.node.stash[OUTCOME_KEY].measurement
    assert measurement is not None
    vacuous = "vacuous: the outputs of vanishing[fp32] are degenerate"
    assert any(v.gate == "numerics" and v.message.startswith(vacuous) for v in verdicts)

    # the three readers: the case's report.md, its pytest-html extra, the session's table
    written = write_artifacts(measurement, verdicts, tmp_path / "run", config={}, charts={})
    report = written.report_md.read_text()
    numerics = report.split("## Numerics", 1)[1].split("\n## ", 1)[0]
    assert "| degenerate outputs | eager fp32 PyTorch: output 0 is denormal" in numerics
    assert "| program error | vacuous (eager fp32 PyTorch: output 0 is denormal" in numerics
    assert "| vacuous |" in numerics
    assert f"| numerics | pass | {vacuous}" in report
    assert vacuous in extra_html(measurement, verdicts, {})
    outcome = context.node.stash[OUTCOME_KEY]
    (row,) = summary_lines(build_session_report([outcome], here=tmp_path))[1:]
    assert "vacuous (program err" in row

    # Parity of the program's real outputs (the host runs SME2-off only: judged against itself,
    # as on a device that runs both): vacuous, and its verdict says so.
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
