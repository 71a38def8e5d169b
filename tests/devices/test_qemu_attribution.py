"""Instructions per operator on qemu-sme2, on real exports, the real aarch64 runner, real qemu.

The counted inference's instructions are split between its ETDump events at the guest's clock
reads (:mod:`pytest_sme2.analysis.attribution`). What must hold for it to be a gate: the split
repeats to the instruction, it never counts more than the inference executed, the committed shares
are what the example models measure, and a model doing a little more work fails, naming what grew.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from functools import partial
from pathlib import Path

import pytest
import torch
from torch import nn

import models  # noqa: F401  (registers the examples)
from pytest_sme2.analysis.attribution import instruction_trace
from pytest_sme2.analysis.categories import is_leaf
from pytest_sme2.analysis.profile import INSTRUCTIONS, NAMED_CATEGORIES, OTHER, profile
from pytest_sme2.analysis.trace import Trace, read_etdump
from pytest_sme2.devices.base import EVIDENCE_WARMUP, RunRequest, evidence_request
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.devices.qemu_count import count_executions
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.model_spec import ModelSpec, get_model
from pytest_sme2.judge.check import Checked
from pytest_sme2.judge.moves import Tolerances
from pytest_sme2.judge.policy import Policy
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.runner.invoke import Executions
from tests.judge.host_case import case_check, measure_case

REPO = Path(__file__).resolve().parents[2]


def _per_operator(trace) -> dict[str, int]:
    return {e.name: e.end_ns - e.start_ns for e in trace.runs[0].events}


def test_two_unchanged_runs_count_the_same_per_operator(
    narrow_qemu_device: QemuSme2Device,
    narrow_stored_qemu_device: QemuSme2Device,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """To the instruction, init included, though the second run's directory name and the
    caller's environment are longer: both used to move libc's work in the runner by 10–200
    instructions (paths on its heap, the environment on its stack). The first is as the store
    has it (counted by an earlier session, or now), the second counted now: what the store
    claims, one count for every session and directory."""
    artifact = export_model(get_model("toy_cnn").for_emulation(), "fp32")
    first = narrow_stored_qemu_device.evidence(
        evidence_request(artifact.pte, artifact.inputs, tmp_path / "a", variant=Variant.ON)
    )
    monkeypatch.setenv("SME2_TEST_PADDING", "x" * 77)
    second = narrow_qemu_device.evidence(
        evidence_request(
            artifact.pte,
            artifact.inputs,
            tmp_path / ("a-much-longer-directory" * 3),
            variant=Variant.ON,
        )
    )
    assert first.instruction_trace is not None and second.instruction_trace is not None
    assert first.instructions == second.instructions
    assert first.init_instructions == second.init_instructions
    counts = _per_operator(first.instruction_trace)
    assert counts == _per_operator(second.instruction_trace)
    assert len(counts) >= 8 and all(count > 0 for count in counts.values())


def _can_simulate_another_host() -> bool:
    """A private mount namespace (root, ``unshare``) lets a test show the guest another host's
    ``/sys/devices/system/cpu``."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


#: Inside a private mount namespace: the host's CPU files replaced by those of an 8-CPU machine
#: whose kernel takes 8192 CPUs (a typical distribution kernel), then the command.
_EIGHT_CPU_HOST = (
    'for f in online possible present; do mount --bind "$0" /sys/devices/system/cpu/$f || exit 90; '
    'done; mount --bind "$1" /sys/devices/system/cpu/kernel_max || exit 90; '
    'test "$(cat /sys/devices/system/cpu/online)" = 0-7 || exit 91; shift; exec "$@"'
)


@pytest.mark.skipif(
    not _can_simulate_another_host(), reason="needs root and unshare to simulate another host"
)
def test_counts_do_not_depend_on_how_many_cpus_the_host_has(
    narrow_qemu_device: QemuSme2Device,
    narrow_stored_qemu_device: QemuSme2Device,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The guest's CPUs are a fixed view (``devices/guest_root.py``): on a host of 8 CPUs (and
    qemu's /proc/cpuinfo of 8 entries) init and inference count what they count on this one
    (as the store has it, counted here). Without the view, init moved by 500 instructions and
    the inference by 10."""
    artifact = export_model(get_model("toy_cnn").for_emulation(), "fp32")
    here = narrow_stored_qemu_device.evidence(
        evidence_request(artifact.pte, artifact.inputs, tmp_path / "here", variant=Variant.ON)
    )
    online, kernel_max = tmp_path / "online", tmp_path / "kernel_max"
    online.write_text("0-7\n")
    kernel_max.write_text("8191\n")
    prefix = narrow_qemu_device.guest.prefix
    monkeypatch.setattr(
        narrow_qemu_device.guest,
        "prefix",
        lambda variant, exec_log=None, layout=None: [
            *("unshare", "-m", "sh", "-c", _EIGHT_CPU_HOST, str(online), str(kernel_max)),
            *prefix(variant, exec_log, layout),
        ],
    )
    there = narrow_qemu_device.evidence(
        evidence_request(artifact.pte, artifact.inputs, tmp_path / "there", variant=Variant.ON)
    )
    assert (there.instructions, there.init_instructions) == (
        here.instructions,
        here.init_instructions,
    )
    assert there.instruction_trace is not None and here.instruction_trace is not None
    assert _per_operator(there.instruction_trace) == _per_operator(here.instruction_trace)


def test_the_first_execution_does_one_time_work_the_counted_one_does_not(
    narrow_qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    """Why the counted run has a warm-up (``EVIDENCE_WARMUP``): execution 1 runs XNNPACK's
    runtime set-up and binds symbols lazily inside operators; from execution 2 on, every
    operator counts the same. Should a runtime upgrade make 1 equal 2, this fails and the
    warm-up can go."""
    artifact = export_model(get_model("toy_cnn").for_emulation(), "fp32")
    plan = Executions(runs=2, warmup=1, traced=True)
    request = RunRequest(artifact.pte, artifact.inputs, plan, tmp_path, variant=Variant.ON)
    counted = count_executions(narrow_qemu_device.guest, request)
    assert counted.run.etdump is not None and counted.init is not None
    assert len(counted.executions) == 3
    trace = read_etdump(counted.run.etdump)
    first, second, third = (
        instruction_trace(trace, i, count.clock_reads) for i, count in enumerate(counted.executions)
    )
    assert first.runs[0].e2e_ns > second.runs[0].e2e_ns * 1.1  # set-up outside any operator

    def leaves(counted: Trace) -> list[tuple[str, int]]:
        return [(e.name, e.end_ns - e.start_ns) for e in counted.runs[0].events if is_leaf(e.name)]

    assert leaves(first) != leaves(second)  # lazy binding, first-call paths
    assert leaves(second) == leaves(third)
    assert EVIDENCE_WARMUP == 1


def test_operators_sum_to_no_more_than_e2e_and_other_is_the_rest(
    stored_qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    artifact = export_model(get_model("toy_cnn").for_emulation(), "int8")
    for variant in (Variant.ON, Variant.OFF):
        evidence = stored_qemu_device.evidence(
            evidence_request(artifact.pte, artifact.inputs, tmp_path / variant, variant=variant)
        )
        assert evidence.instruction_trace is not None
        prof = profile(evidence.instruction_trace, unit=INSTRUCTIONS)
        e2e = evidence.instruction_trace.runs[0].e2e_ns
        assert e2e == evidence.instructions
        operators = sum(round(op.per_run_ms * 1e6) for op in prof.operators)
        assert 0 < operators <= e2e
        named = sum(prof.categories_ms[c] for c in NAMED_CATEGORIES)
        assert prof.categories_ms[OTHER] == pytest.approx(e2e / 1e6 - named, abs=1e-9)
        assert sum(prof.shares.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("model", ["toy_cnn", "squeezesam_like"])
def test_instruction_shares_are_as_committed(
    stored_qemu_device: QemuSme2Device, model: str, tmp_path: Path
) -> None:
    """Deterministic: the shares measured now equal the committed ones to their stored digits.
    (Counted once per cache: the example suite on qemu-sme2 counts the same variants, under the
    same key.)"""
    artifact = export_model(get_model(model).for_emulation(), "fp32")
    stored = json.loads((REPO / "baselines" / "qemu-sme2" / f"{model}-fp32.json").read_text())
    for variant in (Variant.ON, Variant.OFF):
        evidence = stored_qemu_device.evidence(
            evidence_request(artifact.pte, artifact.inputs, tmp_path / variant, variant=variant)
        )
        assert evidence.instruction_trace is not None
        shares = profile(evidence.instruction_trace, unit=INSTRUCTIONS).shares
        committed = stored["variants"][str(variant)]["instruction_shares"]
        assert shares == pytest.approx(committed, abs=1e-3), variant
    on = stored["variants"]["sme2-on"]["instruction_shares"]
    off = stored["variants"]["sme2-off"]["instruction_shares"]
    # the kit's bottleneck shift, deterministically: SME2 shrinks the matrix work, so the
    # layout work it leaves alone takes a larger share
    assert on["Data Movement"] > off["Data Movement"]
    assert on["Convolution"] < off["Convolution"]


class Grow(nn.Module):
    """Two convolutions over the whole image: work grows with the width, operators do not."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.fc(y.mean(dim=(2, 3)))


def _grow() -> Grow:
    torch.manual_seed(0)
    return Grow().eval()


def _images(seed: int, width: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, 3, 24, width, generator=torch.Generator().manual_seed(seed)),)


def grow(name: str, width: int) -> ModelSpec:
    """The model as ``name``, on images ``width`` pixels wide."""
    return ModelSpec(name, _grow, partial(_images, width=width), "two convolutions", ("fp32",))


def test_a_little_more_work_fails_naming_the_variant_the_change_and_what_grew(
    tmp_path: Path,
) -> None:
    """Three copies of one model recorded at one width; then one unchanged, one +2 % and one +6 %
    of the pixels wider, freshly exported: the unchanged one passes, the others fail naming the
    variant, the change and the operator that grew. On the objects, as a session on qemu-sme2
    does it: the device the options build (counts read back from the store, as a session's are),
    each case measured by ``measure`` and judged through ``CaseCheck``, recorded then judged."""
    device = QemuSme2Device.from_options(lambda _: None)
    device.prepare()

    def judged(spec: ModelSpec, policy: Policy) -> Checked:
        def measured(label: str) -> Measurement:
            return measure_case(device, spec, tmp_path / spec.name / label)

        checked = case_check(tmp_path, policy, measured, model=spec.name, device_id="qemu-sme2")
        return checked.check(measured("first"))

    # time is no signal under emulation, and shares are the share gate's tests' subject
    tolerances = Tolerances(share_points=100)
    for name in ("same", "plus2", "plus6"):
        recorded = judged(grow(name, 50), Policy(tolerances, update=True))
        assert recorded.failure is None, recorded.failure
    stored = json.loads((tmp_path / "baselines" / "qemu-sme2" / "same-fp32.json").read_text())
    assert stored["variants"]["sme2-on"]["operator_instructions"]
    assert stored["variants"]["sme2-on"]["instruction_shares"]

    policy = Policy(tolerances, update=False)
    assert judged(grow("same", 50), policy).failure is None  # the unchanged one never fails
    for name, width in (("plus2", 51), ("plus6", 53)):
        failure = judged(grow(name, width), policy).failure
        assert failure is not None, name
        for said in (
            rf"instructions of {name}\[fp32\] on qemu-sme2 \(sme2-on\) rose [\d,]+ → [\d,]+ "
            r"per inference \(\+\d+\.\d\d%\), beyond the 1% tolerance; grew: .*"
            r"Convolution \(NHWC, PF32\) IGEMM",
            rf"instructions of {name}\[fp32\] on qemu-sme2 \(sme2-off\) rose ",
        ):
            assert re.search(said, failure), failure
