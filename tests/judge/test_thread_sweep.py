"""A thread sweep on the objects: real small models exported and measured by the real runner at
several thread counts (the plan ``--sme2-threads`` resolves to, each case's 1-thread runs timed
alongside where the marker's ``min_thread_gain`` sets a floor for its count, as the session plans
it), judged through ``CaseCheck`` as ``sme2_judge`` judges them, and the scaling view
(:mod:`pytest_sme2.report.scaling_view`) of the measurements as report.md, the pytest-html page
and the terminal draw it. The thread-gain floor fails a planted regression and passes the
unchanged model; on qemu-sme2 the 2-thread figure is not judged.

The planted regression is real work that threads cannot share: the unchanged model is two wide
linear layers, which XNNPACK splits over the pool (1.77× from 1 to 2 threads here); the planted
one adds 100 flips of their output, which XNNPACK does not take: ExecuTorch's portable kernel runs
them on one thread, 3.5 ms of serial work (1.09× quiet, 1.06× beside two busy processes; the
fastest interleaved 1-thread run against the fastest 2-thread one, as the gate judges). A busy
machine cannot lift serial work over the floor 1.5×: more threads win a runner more of a shared
CPU only for the work they share. (The chain of 400 small linear layers this test planted before
gained 1.64× on a quiet machine: XNNPACK splits those too, so it passed the floor whenever the
machine was quiet, and failed only beside load.) The unchanged model's case is judged as CI would
(confirmed, not judged on a busy machine), so the noise can only make it "not judged", never red.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pytest_sme2.devices.base import Device
from pytest_sme2.devices.kinds import BUILT_IN_KINDS
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.judge.check import Checked
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.measure.plan import MeasurePlan
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.report.html import scaling_html
from pytest_sme2.report.markdown import case_report, section_markdown
from pytest_sme2.report.scaling_view import ScalingView, scaling_views
from pytest_sme2.report.sections import scaling_section
from pytest_sme2.report.terminal import scaling_lines
from pytest_sme2.settings import OPTIONS, Settings, resolve
from tests.judge.host_case import case_check, host_device, measure_case
from tests.judge.small_model import small_model


class Wide(nn.Module):
    """Two wide linear layers (split over the thread pool), then ``flips`` flips of their output
    (portable kernels: one thread)."""

    def __init__(self, flips: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(1024, 2048)
        self.fc2 = nn.Linear(2048, 1024)
        self.flips = flips

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc2(torch.relu(self.fc1(x)))
        for _ in range(self.flips):
            y = torch.flip(y, dims=(1,))
        return y.sum(dim=1, keepdim=True)


def _wide(flips: int) -> Wide:
    torch.manual_seed(0)
    return Wide(flips).eval()


def _wide_inputs(seed: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(8, 1024, generator=torch.Generator().manual_seed(seed)),)


SCALES = ModelSpec("scales", partial(_wide, 0), _wide_inputs, "shared work", ("fp32",))
SERIAL = ModelSpec("serial", partial(_wide, 100), _wide_inputs, "serial work", ("fp32",))

#: The suite's marker: ``@pytest.mark.sme2(min_thread_gain={2: 1.5})``.
FLOOR = Expectations.from_marker({"min_thread_gain": {2: 1.5}})

#: Enough runs that one 2-thread run finds both cores free beside the other sessions.
SWEEP_PLAN = {
    "sme2_runs": "20",
    "sme2_rounds": "5",
    "sme2_traced_runs": "2",
    "sme2_warmup": "2",
}

#: As this suite's sessions judge (tests/conftest.py's INNER_DEFAULTS): category shares opened
#: wide (the subject of tests/judge/test_gates.py), time judged beside the other xdist worker.
SUITE = {"sme2_share_tolerance": "100", "sme2_judge_disturbed": True}


def settings(root: Path, **options: Any) -> Settings:
    """The session's settings as pytest resolves them from ``options`` (by dest) over the
    defaults, the baselines under ``root``."""
    defaults = {option.dest: option.default for option in OPTIONS}
    given = {"sme2_device": "host", **options}
    return resolve(given.get, lambda key: defaults.get(key, ""), root, BUILT_IN_KINDS)


def case_plan(chosen: Settings, threads: int, expectations: Expectations) -> MeasurePlan:
    """The session's plan of a case on ``threads`` threads: its 1-thread runs timed alongside
    where ``expectations`` set a thread-gain floor for that count."""
    one = expectations.thread_gain_floor(threads) is not None
    return replace(chosen.plan, threads=threads, with_one_thread=one)


def judge_case(
    device: Device,
    spec: ModelSpec,
    chosen: Settings,
    threads: int,
    expectations: Expectations,
    root: Path,
) -> Checked:
    """``spec``'s case on ``threads`` threads measured on ``device`` as ``sme2_measure`` does
    (every fresh measurement too) and judged as ``sme2_judge`` does, its baseline under
    ``root``."""
    plan = case_plan(chosen, threads, expectations)
    device_id = device.info().name
    runs = Path(tempfile.mkdtemp(prefix=f"{device_id}-{spec.name}-t{threads}-", dir=root))
    check = case_check(
        root,
        chosen.policy,
        lambda label: measure_case(device, spec, runs / label, plan),
        model=spec.name,
        threads=threads,
        device_id=device_id,
        expectations=expectations,
    )
    return check.check(check.measure("measured"))


def judged_measurements(checked: list[Checked]) -> list[Measurement]:
    return [c.measurement for c in checked if c.measurement is not None]


def drawn(views: list[ScalingView]) -> tuple[str, str, list[str]]:
    """The views as report.md, the pytest-html summary and the terminal show them."""
    markdown = "\n\n".join(section_markdown(scaling_section(v, brief=False)) for v in views)
    return markdown, scaling_html(views), scaling_lines(views)


def test_a_host_sweep_shows_the_knee_and_the_gain_floor_fails_the_planted_regression_only(
    tmp_path: Path,
) -> None:
    """The sweep recorded at 1, 2 and 4 threads, judged even beside other work (this suite's
    ``--sme2-judge-disturbed``): the planted regression fails its gain floor. The unchanged
    model's 2-thread case is then judged as a user's CI would, against its baseline: its gain
    floor judged (or, on a busy machine, "not judged") — it passes."""
    device = host_device()
    sweep = settings(
        tmp_path, sme2_threads="1,2,4", sme2_update_baselines=True, **SWEEP_PLAN, **SUITE
    )
    assert sweep.threads == (1, 2, 4)
    checked = {
        (spec.name, threads): judge_case(device, spec, sweep, threads, FLOOR, tmp_path)
        for spec in (SCALES, SERIAL)
        for threads in sweep.threads
    }
    failure = checked["serial", 2].failure or ""
    said = re.search(r"sme2-off of serial\[fp32\] on host, 2 threads gains [0-9.]+× .*", failure)
    # all its verdicts when it did not fail: a gain not judged, or a fresh measurement that passed
    # (seen once in six warm .ci/runs on the Xeon 6/207 VM, with no failure to show)
    verdicts = "\n".join(f"{v.gate} {v.status}: {v.message}" for v in checked["serial", 2].verdicts)
    assert said is not None and "below the floor 1.5× (min_thread_gain)" in said[0], (
        failure or verdicts
    )
    # every report has each model's view, with a knee sentence per variant
    views = scaling_views(judged_measurements(list(checked.values())))
    markdown, page, terminal = drawn(views)
    knee = r"^sme2-off (?:stops gaining after|is still gaining at) \d threads?.*$"
    for model in ("scales", "serial"):
        assert f"## Thread scaling: {model}[fp32] on host" in markdown
        assert f"Thread scaling: {model}[fp32] on host" in page
        view = terminal[terminal.index(f"{model}[fp32] on host:") + 1 :]
        assert re.search(knee, view[4], re.M), view
    assert 'data-chart="scaling"' in page
    # the 2-thread case shows its own 1-thread runs, timed in the same rounds
    two = checked["scales", 2]
    assert two.measurement is not None
    report = case_report(two.measurement, two.verdicts)
    assert "## Threads (1 and 2, timed in the same rounds)" in report

    # time against the baseline is not this test's subject: beside the other xdist worker the
    # 2-thread runs moved 17 % against the reference while the gain, timed in the same rounds,
    # held (tests/judge/test_gates.py judges latency on its own)
    as_ci = settings(
        tmp_path,
        sme2_threads="2",
        **SWEEP_PLAN,
        sme2_share_tolerance="100",
        sme2_latency_tolerance="100",
    )
    unchanged = judge_case(device, SCALES, as_ci, 2, FLOOR, tmp_path)
    assert unchanged.failure is None, unchanged.failure
    said = [v.message for v in unchanged.verdicts]
    gain = r"sme2-off gains [0-9.]+× from 1 to 2 threads ≥ floor 1.5×"
    judged = [m for m in said if re.search(gain, m)]
    disturbed = "time gates not judged for scales[fp32] on host, 2 threads"
    busy = [m for m in said if m.startswith(disturbed)]
    assert judged or busy, said


def test_qemu_sme2_says_not_judged_at_two_threads_and_judges_one(tmp_path: Path) -> None:
    """Both cases pass; the 2-thread one's figure says "not judged: emulated threads" in the
    view and its baseline keeps no count, the 1-thread one's keeps its instructions. On
    qemu-sme2 as a session builds it by default, whose 1-thread count is read back from the
    store where an earlier run counted the same (0.8 s, where the ``qemu_device`` fixture's
    device, counting every run, takes 5.8 s); a 2-thread count is never stored."""
    qemu = QemuSme2Device.from_options(lambda _: None)
    qemu.prepare()
    chosen = settings(
        tmp_path,
        sme2_device="qemu-sme2",
        sme2_threads="1,2",
        sme2_update_baselines=True,
        sme2_runs="6",
        sme2_rounds="2",
        sme2_traced_runs="2",
        **SUITE,
    )
    tiny = small_model("tiny")
    checked = [
        judge_case(qemu, tiny, chosen, threads, Expectations(), tmp_path)
        for threads in chosen.threads
    ]
    assert [c.failure for c in checked] == [None, None]
    markdown, _, terminal = drawn(scaling_views(judged_measurements(checked)))
    assert any(re.match(r"^\s*2\s+(—\s+)+not judged: emulated threads$", line) for line in terminal)
    assert (
        "no knee: fewer than two thread counts judged (2 threads not judged: emulated threads)"
        in "\n".join(terminal)
    )
    assert "| 2 | — |" in markdown and "not judged: emulated threads" in markdown
    # 1 thread judged as ever: its instructions stored; 2 threads stored without a count
    one = json.loads((tmp_path / "baselines" / "qemu-sme2" / "tiny-fp32.json").read_text())
    two = json.loads((tmp_path / "baselines" / "qemu-sme2" / "tiny-fp32-t2.json").read_text())
    assert all(v["instructions"] for v in one["variants"].values())
    assert not any(v.get("instructions") for v in two["variants"].values())
