"""Every run proves its label, on real qemu: a user's qemu-aarch64 that lets one case's sme2-off
runs see SME2 (it drops the getauxval shim) and hides SME2 from another case's sme2-on runs (it
adds the shim) fails both cases in one line naming what their runner saw; an honest case passes,
its report saying what each variant's runner saw.

On the objects, as a session under ``--sme2-qemu=WRAPPER --sme2-update-baselines`` does it: the
device the option builds, each case measured by ``measure`` and judged through ``CaseCheck`` (as
``sme2_judge`` judges it), the honest case's report rendered by ``case_report``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.judge.check import Checked
from pytest_sme2.judge.moves import Tolerances
from pytest_sme2.judge.policy import Policy
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status
from pytest_sme2.report.markdown import case_report
from tests.judge.host_case import case_check, measure_case
from tests.judge.small_model import small_model

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


def lying_device(qemu_device: QemuSme2Device, directory: Path) -> QemuSme2Device:
    """The qemu-sme2 device a session builds from ``--sme2-qemu=`` the lying wrapper, prepared."""
    toolchain = qemu_device.guest.toolchain
    wrapper = directory / "qemu-aarch64"
    wrapper.write_text(
        LYING_QEMU.format(python=sys.executable, real=str(toolchain.qemu), shim=str(toolchain.shim))
    )
    wrapper.chmod(0o755)
    device = QemuSme2Device.from_options({"sme2_qemu": str(wrapper)}.get)
    device.prepare()
    return device


def judged(device: QemuSme2Device, name: str, seed: int, directory: Path) -> Checked:
    """The small model as ``name`` measured on ``device`` and judged, its baseline recorded."""
    spec = small_model(name, seed)

    def measured(label: str) -> Measurement:
        return measure_case(device, spec, directory / name / label)

    check = case_check(
        directory, Policy(Tolerances(), update=True), measured, model=name, device_id="qemu-sme2"
    )
    return check.check(measured("record"))


def test_a_run_that_sees_the_opposite_of_its_label_fails_naming_what_it_saw(
    tmp_path: Path, qemu_device: QemuSme2Device
) -> None:
    device = lying_device(qemu_device, tmp_path)
    honest, off_lies, on_lies = (
        judged(device, name, seed, tmp_path)
        for seed, name in enumerate(("honest", "off_lies", "on_lies"))
    )
    assert honest.failure is None
    assert off_lies.failure is not None and on_lies.failure is not None
    assert re.search(
        r"^.*sme2-off run of off_lies\[fp32\] on qemu-sme2 saw SME2: it is not the run its "
        r"label says \(the runner saw SME2 \(SVL \d+ B\); XNNPACK with SME2 kernels, by "
        r"getauxval\(AT_HWCAP2\)\).*$",
        off_lies.failure,
        re.M,
    ), off_lies.failure
    assert re.search(
        r"^.*sme2-on run of on_lies\[fp32\] on qemu-sme2 saw no SME2: it is not the run its "
        r"label says \(the runner saw no SME; XNNPACK with SME2 kernels, .*$",
        on_lies.failure,
        re.M,
    ), on_lies.failure
    # each lying case fails on its label alone: the variant that told the truth passes
    for checked, truthful in ((off_lies, "label[sme2-on]"), (on_lies, "label[sme2-off]")):
        statuses = {v.gate: v.status for v in checked.verdicts}
        assert statuses[truthful] is Status.PASS
    assert honest.measurement is not None
    report = case_report(honest.measurement, honest.verdicts)
    assert "| runner saw (sme2-on) | SME2 (SVL " in report
    assert "| runner saw (sme2-off) | no SME; XNNPACK with SME2 kernels, by getauxval" in report
