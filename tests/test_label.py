"""Every run proves its label, on real qemu: a user's qemu-aarch64 that lets one case's sme2-off
runs see SME2 (it drops the getauxval shim) and hides SME2 from another case's sme2-on runs (it
adds the shim) fails both cases in one line naming what their runner saw; an honest case passes,
its report saying what each variant's runner saw."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pytest_sme2.cache import cache_root
from tests.inner import INNER_TEST, REPO, inner_conftest, through_qemu

pytest_plugins = ["pytester"]

#: Resolved before pytester points HOME elsewhere: exports, the runner and qemu are reused.
CACHE = cache_root()

#: A qemu-aarch64 that runs the real one, its variant swapped for the runs of the lying models.
LYING_QEMU = """#!{python}
import os, sys
from pathlib import Path

REAL, SHIM = {real!r}, {shim!r}
args = sys.argv[1:]
model = str(Path("model.pte").resolve()) if Path("model.pte").exists() else ""
if "off_lies_xnnpack" in model and f"LD_PRELOAD={{SHIM}}" in args:  # off, without the shim
    at = args.index(f"LD_PRELOAD={{SHIM}}")
    args[at - 1 : at + 1] = ["-U", "LD_PRELOAD"]
if "on_lies_xnnpack" in model and "-U" in args:  # on, with SME2 hidden
    at = args.index("-U")
    args[at : at + 2] = ["-E", f"LD_PRELOAD={{SHIM}}"]
os.execv(REAL, [REAL, *args])
"""


def test_a_run_that_sees_the_opposite_of_its_label_fails_naming_what_it_saw(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, qemu_device
) -> None:
    toolchain = qemu_device.guest.toolchain
    wrapper = tmp_path / "qemu-aarch64"
    wrapper.write_text(
        LYING_QEMU.format(python=sys.executable, real=str(toolchain.qemu), shim=str(toolchain.shim))
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("SME2_CACHE_DIR", str(CACHE))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join((str(REPO), os.environ.get("PYTHONPATH", ""))))
    pytester.makeconftest(inner_conftest("honest", "off_lies", "on_lies"))
    pytester.makepyfile(test_label=INNER_TEST)
    result = pytester.runpytest_subprocess(*through_qemu(wrapper, tmp_path), timeout=1200)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.re_match_lines(
        [
            r".*sme2-off run of off_lies\[fp32\] on qemu-sme2 saw SME2: it is not the run its "
            r"label says \(the runner saw SME2 \(SVL \d+ B\); XNNPACK with SME2 kernels, by "
            r"getauxval\(AT_HWCAP2\)\).*",
            r".*sme2-on run of on_lies\[fp32\] on qemu-sme2 saw no SME2: it is not the run its "
            r"label says \(the runner saw no SME; XNNPACK with SME2 kernels, .*",
        ],
        consecutive=False,
    )
    report = (tmp_path / "artifacts/qemu-sme2/honest-fp32/sme2_report.md").read_text()
    assert "| runner saw (sme2-on) | SME2 (SVL " in report
    assert "| runner saw (sme2-off) | no SME; XNNPACK with SME2 kernels, by getauxval" in report
