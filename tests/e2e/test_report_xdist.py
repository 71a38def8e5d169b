"""The session report.md under pytest-xdist is built on the controller from the outcomes the
workers sent; on qemu-sme2 it must still carry what the gates judged on (the instruction ratio,
the executed SME2 kernels), and equal the report the same records make in one process."""

from __future__ import annotations

import json

import pytest

from pytest_sme2.cache import cache_root
from pytest_sme2.records.outcome import CaseOutcome
from pytest_sme2.report.artifacts import MANIFEST_NAME, REPORT_NAME
from pytest_sme2.report.from_files import load_test_dir
from pytest_sme2.report.markdown import session_markdown
from pytest_sme2.report.session_report import build_session_report
from tests.inner import examples_session

pytest_plugins = ["pytester"]

#: Resolved at import, before pytester points HOME at a temporary directory: the inner runs
#: reuse the real export cache and the provisioned qemu toolchain.
CACHE = cache_root()
#: qemu-sme2 at its narrowest vector length (tests/conftest.py's ``NARROW_VL``): the cases count
#: the same KleidiAI SME2 kernels as at 512 bits in a fraction of the emulation.
DEVICE = "qemu-sme2:vl=16"
CASES = ("--sme2-models=toy_cnn", "--sme2-dtypes=fp32,int8")

SUITE = """
import pytest

@pytest.mark.sme2(speedup_floor=1.0, require_sme2_kernels=True)
def test_model(sme2_measurement, sme2_judge):
    sme2_judge(sme2_measurement)
"""


def test_the_xdist_session_report_on_qemu_is_the_one_its_records_make(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers count the cases, judged against baselines a one-process session recorded; the
    controller's report.md is exactly the report the saved case records make in one process
    (``sme2 report`` reads them back losslessly): the outcomes crossed from the workers whole, in
    the order of their node ids."""
    examples_session(pytester, monkeypatch, CACHE, SUITE)
    case = ("-p", "no:cacheprovider", f"--sme2-device={DEVICE}", *CASES)
    pytester.runpytest_subprocess(*case, "--sme2-update-baselines").assert_outcomes(passed=2)
    xdist = pytester.runpytest_subprocess(
        *case,
        "--sme2-recount",  # this is a test of counting in any process
        "-n",
        "2",
        "--sme2-artifacts=xdist",
    )
    xdist.assert_outcomes(passed=2)
    root = pytester.path / "xdist"
    text = (root / "report.md").read_text()
    outcomes = []
    for manifest in sorted(root.rglob(MANIFEST_NAME)):
        m, verdicts = load_test_dir(manifest)
        nodeid = json.loads(manifest.read_text())["sme2"]["config"]["nodeid"]
        run_dir = manifest.parent
        outcomes.append(
            CaseOutcome(
                nodeid,
                DEVICE,
                m.model,
                m.dtype,
                m.threads,
                m,
                verdicts,
                run_dir,
                case_report=run_dir / REPORT_NAME,
            )
        )
        assert m.instruction_ratio is not None
        assert f"instruction ratio {m.instruction_ratio:.2f}× (off ÷ on)" in text
        on = m.variants[m.headline]
        assert on.evidence is not None and on.evidence.sme2_kernels
        assert all(kernel in text for kernel in on.evidence.sme2_kernels)
    assert len(outcomes) == 2
    outcomes.sort(key=lambda outcome: outcome.nodeid)
    serial = build_session_report(outcomes, here=pytester.path)
    assert text == session_markdown(serial, base=root)
    assert "n/a (" not in text
