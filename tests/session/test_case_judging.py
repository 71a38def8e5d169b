"""One test of a case on its objects: a :class:`CaseContext` of a real exported model on the host,
measured by :class:`CaseMeasure` and judged by :class:`CaseJudge` against baselines in a temporary
directory — what ``sme2_measure`` and ``sme2_judge`` do inside a user's test, without a pytest
session around it. The judged item is a twin of this test's own (``contexts.twin``): its markers
are the ``sme2`` markers judged, and its outcome is not this session's to report."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.case_context import (
    OUTCOME_KEY,
    RUNS_DIR,
    CaseContext,
    CaseJudge,
    CaseMeasure,
    case_program,
    or_fail,
)
from pytest_sme2.devices.host import HostDevice
from pytest_sme2.errors import ConfigError
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.model_spec import ModelSpec, get_model
from pytest_sme2.export.reference import REFERENCE
from pytest_sme2.judge.baseline_file import read
from pytest_sme2.measure import settle
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.settings import Case
from tests.measurements import counted_measurement
from tests.session.contexts import case_context, host_case, settings, twin


@pytest.fixture(scope="module")
def host() -> HostDevice:
    device = HostDevice.from_options(lambda _: None)
    device.prepare()
    return device


@pytest.fixture(scope="module")
def toy_cnn() -> Case:
    import models  # noqa: F401  (registers toy_cnn)

    return host_case(get_model("toy_cnn"))


@pytest.fixture(scope="module")
def reference() -> tuple[Path, Path]:
    artifact = export_model(REFERENCE, "fp32")
    return artifact.pte, artifact.inputs


Contexts = Callable[..., CaseContext]


@pytest.fixture
def item(request: pytest.FixtureRequest) -> pytest.Item:
    return twin(request)


@pytest.fixture
def context(
    item: pytest.Item,
    tmp_path: Path,
    host: HostDevice,
    toy_cnn: Case,
    reference: tuple[Path, Path],
) -> Contexts:
    """``context(**options)``: this test's case context with the session's ``options``, its
    baseline as the file holds it now."""

    def make(**options: Any) -> CaseContext:
        chosen = settings(tmp_path / "baselines", **options)
        return case_context(item, toy_cnn, chosen, host, reference, tmp_path / "run")

    return make


@pytest.fixture(scope="module")
def measured(
    tmp_path_factory: pytest.TempPathFactory,
    host: HostDevice,
    toy_cnn: Case,
    reference: tuple[Path, Path],
) -> Measurement:
    """toy_cnn measured once for the module's judging tests, as its context measures it."""
    root = tmp_path_factory.mktemp("measured")
    chosen = settings(root)
    program = case_program(toy_cnn, export_model(toy_cnn.model, "fp32"))
    from pytest_sme2.measure.case import measure
    from pytest_sme2.measure.deadline import Deadline

    return measure(
        host,
        program,
        chosen.plan,
        root / RUNS_DIR,
        classifier=chosen.classifier,
        reference=reference,
        deadline=Deadline(None),
    )


def judge(context: CaseContext, m: Measurement) -> tuple[Any, ...]:
    return CaseJudge(context, context.check(CaseMeasure(context))).check(m)


def test_a_measurement_lands_in_the_outcome_with_its_run_directory(
    item: pytest.Item, context: Contexts
) -> None:
    made = context()
    m = CaseMeasure(made)("")
    outcome = item.stash[OUTCOME_KEY]
    assert outcome.measurement is m and outcome.verdicts == ()
    assert (outcome.device, outcome.model, outcome.dtype, outcome.threads) == (
        "host",
        "toy_cnn",
        "fp32",
        1,
    )
    assert outcome.run_dir == made.directory and outcome.pte == made.program.pte
    assert (made.directory / RUNS_DIR).is_dir()  # the runner's files, out of the kit's way
    assert made.speed.undisturbed_ms(None) is not None  # the reference workload was seen


def test_a_missing_baseline_is_written_and_fails_then_the_next_judging_passes(
    item: pytest.Item, context: Contexts, measured: Measurement
) -> None:
    first = context()
    with pytest.raises(pytest.fail.Exception) as failed:
        judge(first, measured)
    assert not failed.value.pytrace  # one reviewer's sentence, no traceback
    assert f"no baseline for toy_cnn[fp32] on host: wrote {first.baseline_path}" in str(
        failed.value
    )
    outcome = item.stash[OUTCOME_KEY]
    assert outcome.baseline == first.baseline_path and outcome.baseline_changes
    assert outcome.measurement is measured and outcome.verdicts
    assert outcome.run_dir == first.directory

    verdicts = judge(context(), measured)
    assert verdicts and all(v.status.value != "fail" for v in verdicts)


def recorded_with(context: Contexts, m: Measurement, operator: str, count: float) -> Path:
    """``m`` recorded as the baseline, then its SME2-off ``operator`` count edited to ``count``."""
    judge(context(sme2_update_baselines=True), m)
    path = context().baseline_path
    doc = json.loads(path.read_text())
    doc["variants"]["sme2-off"]["operators"][operator] = count
    path.write_text(json.dumps(doc))
    return path


def test_an_update_says_each_change_in_the_outcome_and_the_junit_properties(
    item: pytest.Item, context: Contexts, measured: Measurement
) -> None:
    path = recorded_with(context, measured, "Transpose (ND, X32)", 99)
    judge(context(sme2_update_baselines=True), measured)
    (change,) = [c for c in item.stash[OUTCOME_KEY].baseline_changes if "×99" in c]
    assert change.startswith("sme2-off Transpose (ND, X32) ×99")
    assert ("sme2 baseline change", change) in item.user_properties
    assert json.loads(path.read_text())["variants"]["sme2-off"]["operators"][
        "Transpose (ND, X32)"
    ] == pytest.approx(2.0)


@pytest.mark.sme2(max_share={"Convolution": 0.01}, op_counts={"Transpose (ND, X32)": 7})
def test_the_tests_marker_is_judged_with_its_sentences(
    context: Contexts, measured: Measurement
) -> None:
    with pytest.raises(pytest.fail.Exception) as failed:
        judge(context(sme2_update_baselines=True), measured)
    said = str(failed.value)
    assert "Convolution share " in said
    assert "is above the limit 1.0% for toy_cnn[fp32] on host (sme2-off)" in said
    assert "operator counts differ for toy_cnn[fp32] on host (sme2-off)" in said
    assert "Transpose (ND, X32): expected ×7/run, got ×2/run" in said


def test_a_changed_structure_fails_with_a_compact_diff(
    context: Contexts, measured: Measurement
) -> None:
    recorded_with(context, measured, "Max Pooling (NHWC, F32)", 2)
    with pytest.raises(pytest.fail.Exception) as failed:
        judge(context(), measured)
    said = str(failed.value)
    assert (
        "operator structure of toy_cnn[fp32] on host (sme2-off) changed from the baseline" in said
    )
    assert "− Max Pooling (NHWC, F32) ×2/run" in said


@pytest.mark.sme2(speedup_floor=1.5)
def test_strict_turns_a_skipped_gate_into_a_failure(
    context: Contexts, measured: Measurement
) -> None:
    judge(context(sme2_update_baselines=True), measured)
    judge(context(), measured)  # the host has no SME2: the floor is skipped, the case passes
    with pytest.raises(pytest.fail.Exception, match="gate skipped under --sme2-strict: host CPU"):
        judge(context(sme2_strict=True), measured)


def test_a_case_that_cannot_be_judged_as_asked_is_skipped_saying_why(context: Contexts) -> None:
    """A calibration of an emulator's measurement (exact instruction counts, no latency gate)
    judges nothing: the test is skipped with the reason."""
    with pytest.raises(pytest.skip.Exception, match="time is not meaningful"):
        judge(context(sme2_calibrate="2"), counted_measurement())


def test_a_user_error_fails_in_its_one_line(tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the baselines should go")
    path = blocked / "host" / "toy_cnn-fp32.json"
    with pytest.raises(pytest.fail.Exception) as failed:
        or_fail(lambda: read(path, update=False))
    said = str(failed.value)
    assert said.startswith(f"{path}: cannot read the baseline (Not a directory)")
    assert "\n" not in said
    assert not failed.value.pytrace and failed.value.__cause__ is None

    def mistaken() -> None:
        raise ConfigError("--sme2-runs='oops': expected a int")

    with pytest.raises(pytest.fail.Exception, match=r"^--sme2-runs='oops': expected a int$"):
        or_fail(mistaken)


def _two_convs() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 10),
    ).eval()


def _pixels(size: int) -> Callable[[int], tuple[Any, ...]]:
    def inputs(seed: int) -> tuple[Any, ...]:
        import torch

        return (torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(seed)),)

    return inputs


def test_a_slowed_case_fails_only_once_fresh_measurements_confirm_it(
    item: pytest.Item, context: Contexts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same graph on 4× the pixels, judged against the baseline of the small one: the latency
    gate fails, and the failure stands only after three fresh measurements of the case, each
    after a pause and once the machine runs the reference workload at its undisturbed speed.
    The pauses are short here: their length is tests/measure/test_measure.py's subject."""
    monkeypatch.setattr(settle, "CONFIRM_PAUSE_S", (0.2, 0.5))
    small = ModelSpec("slowed", _two_convs, _pixels(48), "two convs", ("fp32",))
    big = replace(small, inputs=_pixels(96))
    timed = {"sme2_runs": "20", "sme2_rounds": "4"}
    # 4× the pixels is 3.7× the planned memory too, a failure of its own that is not time's and
    # would end the case before the re-measure this test is about
    loose = {"sme2_instruction_tolerance": "400", "sme2_memory_tolerance": "400"}

    def of(spec: ModelSpec, **options: Any) -> CaseContext:
        made = context(**timed, **options)
        case = replace(made.case, model=spec)
        return replace(made, case=case, program=case_program(case, export_model(spec, "fp32")))

    recorded = of(small, sme2_update_baselines=True)
    judge(recorded, CaseMeasure(recorded)(""))
    slowed = of(big, **loose)
    with pytest.raises(pytest.fail.Exception) as failed:
        judge(slowed, CaseMeasure(slowed)(""))
    said = str(failed.value)
    assert re.search(
        r"E2E latency of slowed\[fp32\] on host \(sme2-off\) rose \S+% relative to the machine's "
        r"speed \(fastest of 20 runs .* ms vs baseline .* ms; .*\), beyond the 25% tolerance",
        said,
    ), said
    assert re.search(
        r"the failure persisted in 3 fresh measurements spread in time \(after a \S+ s pause, "
        r"machine at its undisturbed speed after \S+ s: reference workload at \S+× its "
        r"undisturbed time; after a .*; after a .*\)",
        said,
    ), said
    runs = {path.name for path in (slowed.directory / RUNS_DIR).iterdir()}
    assert {"confirm", "confirm-2", "confirm-3"} <= runs  # the fresh measurements' files
