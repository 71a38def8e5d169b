"""The session report.md under pytest-xdist is rebuilt on the controller from the case records
the workers saved; on qemu-sme2 it must still carry what the gates judged on (the instruction
ratio, the executed SME2 kernels), and equal the report of the same session run without xdist."""

from __future__ import annotations

import pytest

from pytest_sme2.cache import cache_root
from pytest_sme2.report.artifacts import MANIFEST_NAME
from pytest_sme2.report.from_files import load_test_dir
from tests.inner import REPO, examples_session

pytest_plugins = ["pytester"]

#: Resolved at import, before pytester points HOME at a temporary directory: the inner runs
#: reuse the real export cache and the provisioned qemu toolchain.
CACHE = cache_root()
#: The committed qemu-sme2 baselines, read (never updated) by both sessions alike.
BASELINES = REPO / "baselines"

SUITE = """
import pytest

@pytest.mark.sme2(speedup_floor=1.0, require_sme2_kernels=True)
def test_model(sme2_measurement, sme2_judge):
    sme2_judge(sme2_measurement)
"""


def test_the_xdist_session_report_on_qemu_equals_the_serial_one(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    examples_session(pytester, monkeypatch, CACHE, SUITE)
    args = (
        "-p",
        "no:cacheprovider",
        "--sme2-device=qemu-sme2",
        "--sme2-models=toy_cnn",
        "--sme2-dtypes=fp32,int8",
        f"--sme2-baseline-dir={BASELINES}",
        "--sme2-recount",  # both sessions count: this is a test of counting in any process
    )
    serial = pytester.runpytest_subprocess(*args, "--sme2-artifacts=serial")
    xdist = pytester.runpytest_subprocess(*args, "-n", "2", "--sme2-artifacts=xdist")
    # the outcomes, not the warning counts: each xdist worker warns once per import of its own
    # (ExecuTorch's ETDump serialiser, imported where an emulated ETDump is re-timed)
    outcomes = [
        {k: v for k, v in run.parseoutcomes().items() if k != "warnings"} for run in (serial, xdist)
    ]
    assert outcomes[0] == outcomes[1]
    text = (pytester.path / "serial" / "report.md").read_text()
    # every path in it is relative to the report, nothing in it is a time, and every instruction
    # count repeats exactly in another process, directory and worker (runs are isolated)
    assert (pytester.path / "xdist" / "report.md").read_text() == text
    manifests = sorted((pytester.path / "xdist").rglob(MANIFEST_NAME))
    assert len(manifests) == 2
    for manifest in manifests:
        m, _ = load_test_dir(manifest)
        assert m.instruction_ratio is not None
        assert f"instruction ratio {m.instruction_ratio:.2f}× (off ÷ on)" in text
        on = m.variants[m.headline]
        assert on.evidence is not None and on.evidence.sme2_kernels
        assert all(kernel in text for kernel in on.evidence.sme2_kernels)
    assert "n/a (" not in text
