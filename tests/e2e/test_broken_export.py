"""A gated case whose export breaks fails; a case that never exported stays an expected failure.

The break is a real one, the user's story from issue 36 (tests/e2e/ln_net.py): a linear and a
LayerNorm in fp16 export and pass at width 64, and ExecuTorch's portable fp16 LayerNorm computes
wrong numbers at width 512, which the export's numerics check refuses. Once the narrow model has
a baseline, widening it must turn the case red; a model that was wide from the start has never
been measured, and stays an xfail, as does a case the user marks ``xfail`` themselves.

The narrow model's baselines are recorded on the objects (measured on each device and judged
through ``CaseCheck`` under update, as its session would); which case fails and which is an
xfail is the session's — its fixtures, collection and exit status — so the widened project runs
as two inner sessions, as CI judges it and as a user updates.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_sme2.devices.base import Device
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.judge.moves import Tolerances
from pytest_sme2.judge.policy import Policy
from pytest_sme2.records.measurement import Measurement
from tests.e2e.ln_net import ln_spec
from tests.inner import INNER_TEST, InnerProject
from tests.judge.host_case import case_check, host_device, measure_case

#: The project: ``ln_net`` as wide as the test says, ``ln_wide`` 512 wide from the start.
LN_NETS = """
from pytest_sme2 import register_model
from tests.e2e.ln_net import ln_inputs, ln_net


@register_model("ln_net", inputs=ln_inputs, dtypes=("fp16",))
def narrow_then_wide():
    return ln_net({width})


@register_model("ln_wide", inputs=ln_inputs, dtypes=("fp16",))
def wide():
    return ln_net(512, seed=1)
"""

KNOWN = """
import pytest

@pytest.mark.xfail(reason="known: ExecuTorch's fp16 LayerNorm")
def test_known(sme2_measurement, sme2_judge):
    sme2_judge(sme2_measurement)
"""


#: The devices the cases run on: one fleet, the host and the emulated SME2 CPU.
DEVICES = ("host", "qemu-sme2")


def _record_narrow(directory: Path, device_id: str, device: Device) -> Path:
    """``ln_net`` at width 64 measured on ``device`` and recorded, as a session under
    ``--sme2-update-baselines`` records it; its baseline."""
    spec = ln_spec("ln_net", 64)
    emulated = spec.for_emulation() if device_id == "qemu-sme2" else spec

    def measured(label: str) -> Measurement:
        return measure_case(device, emulated, directory / device_id / label, dtype="fp16")

    policy = Policy(Tolerances(), update=True)
    check = case_check(
        directory, policy, measured, model="ln_net", dtype="fp16", device_id=device_id
    )
    assert check.check(measured("record")).failure is None, device_id
    return check.path


def test_a_gated_case_whose_export_breaks_fails_and_a_never_exported_one_stays_an_xfail(
    tmp_path: Path, qemu_device: QemuSme2Device
) -> None:
    devices = {"host": host_device(), "qemu-sme2": qemu_device}
    recorded = [_record_narrow(tmp_path, name, devices[name]) for name in DEVICES]
    stored = [path.read_bytes() for path in recorded]

    # the gated model's export now breaks
    project = InnerProject(
        tmp_path, LN_NETS.format(width=512), test_suite=INNER_TEST, test_known=KNOWN
    )
    for args in ((), ("--sme2-update-baselines",)):
        result = project.run(
            f"--sme2-device={','.join(DEVICES)}",
            f"--sme2-baseline-dir={tmp_path / 'baselines'}",
            "--sme2-runs=4",
            "--sme2-rounds=2",
            "--sme2-traced-runs=2",
            *args,
        )
        # test_suite: ln_net fails on each device (at set-up, as every case its fixtures cannot
        # give a program to), ln_wide stays an xfail, with no baseline or under update;
        # test_known: all xfail (the user's marker)
        result.assert_outcomes(errors=2, xfailed=6)
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        for device, path in zip(DEVICES, recorded, strict=True):
            result.stdout.re_match_lines(
                [
                    r"export of ln_net\[fp16\] failed at numerics: max abs err .* "
                    rf"\(the case has a baseline, {re.escape(str(path))}\)",
                    rf"ERROR test_suite.py::test_model\[{device}-ln_net-fp16\] - Failed: "
                    r"export of ln.*",
                ],
                consecutive=False,
            )
        # kept as they were, updating or not; none written for the case never measured
        assert [path.read_bytes() for path in recorded] == stored
        assert not list((tmp_path / "baselines").rglob("ln_wide-fp16.json"))
