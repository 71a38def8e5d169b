"""pytest glue: options, the ``sme2`` marker, the hookspecs and the fixtures. What the session
knows, and its hooks, are one object registered as a plugin at configure time,
:class:`~pytest_sme2.session.Sme2Session`; each fixture here is a few lines that ask it or a stage
module, and the per-case ones are a few lines over the case's values
(:class:`~pytest_sme2.case_context.CaseContext`, built once per test).

Nothing heavy is imported at plugin load, so a pytest run that uses none of this pays nothing and
cannot be broken by it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_sme2.case_context import (
    CaseContext,
    CaseJudge,
    CaseMeasure,
    case_of,
    or_fail,
    prepared_device,
)
from pytest_sme2.collection import choose_loadgroup, count_collected, export_collected
from pytest_sme2.session import SESSION_KEY, Sme2Session, start_progress
from pytest_sme2.settings import CATEGORY_OVERRIDES_INI, FLEET_INI, OPTIONS

if TYPE_CHECKING:
    from pytest_sme2.analysis.profile import Comparison
    from pytest_sme2.analysis.trace import Trace
    from pytest_sme2.devices.base import Device
    from pytest_sme2.export.exporter import Artifact
    from pytest_sme2.export.model_spec import ModelSpec
    from pytest_sme2.judge.baseline import Baseline
    from pytest_sme2.judge.baseline_file import Stored
    from pytest_sme2.judge.history import HistoryLog
    from pytest_sme2.measure.fleet import Fleet
    from pytest_sme2.measure.settle import MachineSpeed
    from pytest_sme2.records.measurement import Measurement
    from pytest_sme2.settings import Case, Settings


MARKER_HELP = (
    "sme2(speedup_floor=None, max_share=None, min_share=None, require_sme2_kernels=False, "
    "op_counts=None, min_thread_gain=None): what a pytest-sme2 test expects beyond its baseline "
    "(a floor may be per thread count: speedup_floor={1: 1.5, 4: 1.2})"
)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """The hooks a conftest or plugin implements to add devices, machine info and gates; the
    built-in device kinds are added through the first, as a user's are."""
    from pytest_sme2 import hookspec
    from pytest_sme2.devices import kinds

    pluginmanager.add_hookspecs(hookspec)
    pluginmanager.register(kinds, "sme2-device-kinds")


def pytest_addoption(parser: pytest.Parser) -> None:
    from pytest_sme2.devices.kinds import BUILT_IN_KINDS

    group = parser.getgroup("sme2", "pytest-sme2 (SME2 profiling regression tests)")
    for option in OPTIONS:
        if option.kind == "bool":
            group.addoption(
                option.flag, action="store_true", default=None, dest=option.dest, help=option.help
            )
            parser.addini(option.dest, option.help, type="bool", default=option.default)
        else:
            group.addoption(
                option.flag,
                dest=option.dest,
                default=None,
                help=f"{option.help} (default: {option.default or 'none'})",
            )
            parser.addini(option.dest, option.help, default=option.default)
    parser.addini(
        CATEGORY_OVERRIDES_INI,
        "'Operator = Category' lines overriding the classifier",
        type="linelist",
        default=[],
    )
    parser.addini(FLEET_INI, "comma-separated device specs: a fleet (as --sme2-device)", default="")
    BUILT_IN_KINDS.add_options(group.addoption)  # a kind a conftest adds registers its own


@pytest.hookimpl(tryfirst=True)  # before xdist reads the mode (controller) or the groups (worker)
def pytest_cmdline_main(config: pytest.Config) -> None:
    choose_loadgroup(config)


def pytest_configure(config: pytest.Config) -> None:
    from pytest_sme2.interrupt import unwind_on_sigterm
    from pytest_sme2.lab.hooks import register

    config.addinivalue_line("markers", MARKER_HELP)
    session = config.stash[SESSION_KEY] = Sme2Session(config)
    config.pluginmanager.register(session, "sme2-session")
    register(config)  # the lab: workers named for devices, remote workers' files
    start_progress(config)
    if getattr(config.option, "dist", "no") != "no" and not session.worker:
        # The xdist controller (``-n``, or a lab's ``--tx``) collects nothing, so it never
        # resolves the settings; it writes the session report.md and must outlive its workers
        # to stop them in order.
        config.add_cleanup(unwind_on_sigterm(pass_on=True))


@pytest.fixture(scope="session")
def sme2_settings(pytestconfig: pytest.Config) -> Settings:
    """The resolved ``--sme2-*`` options and ini values."""
    return Sme2Session.of(pytestconfig).settings


@pytest.fixture(scope="session")
def sme2_fleet(pytestconfig: pytest.Config) -> Fleet:
    """The session's devices, prepared on first use (runner built/provisioned once each)."""
    return Sme2Session.of(pytestconfig).fleet


@pytest.fixture
def sme2_device(sme2_case: Case, sme2_fleet: Fleet) -> Device:
    """The current case's device, prepared; one line naming it if it cannot be, or was lost."""
    return prepared_device(sme2_fleet, sme2_case.device)


@pytest.fixture(scope="session")
def exported_model() -> Callable[[str | ModelSpec, str], Artifact]:
    """Factory: ``exported_model("toy_cnn", "fp16")`` → the cached, numerics-checked Artifact.

    Takes a registered name or a ``ModelSpec`` (e.g. ``spec.for_emulation()``)."""
    from pytest_sme2.export.exporter import export_model
    from pytest_sme2.export.model_spec import get_model

    def export(model: str | ModelSpec, dtype: str) -> Artifact:
        return export_model(get_model(model) if isinstance(model, str) else model, dtype)

    return export


@pytest.fixture(scope="session")
def sme2_reference() -> tuple[Path, Path]:
    """The reference workload's program and inputs, timed beside every model (machine speed)."""
    from pytest_sme2.export.exporter import export_model
    from pytest_sme2.export.reference import REFERENCE

    artifact = or_fail(lambda: export_model(REFERENCE, "fp32"))
    return artifact.pte, artifact.inputs


@pytest.fixture(scope="session")
def sme2_exports(request: pytest.FixtureRequest) -> None:
    """Every collected case exported before the session's first measurement (see ``prefetch``);
    a registered program has nothing to export. Then the emulated cases' counts, ahead of it
    (``count_collected``)."""
    cases = [case for case in map(case_of, request.session.items) if case is not None]
    export_collected(cases)
    session = Sme2Session.of(request.config)
    count_collected(cases, session.fleet, session.baseline_path, session.settings.plan.timeout_s)


@pytest.fixture
def sme2_artifact(
    sme2_case: Case,
    exported_model: Callable[[str | ModelSpec, str], Artifact],
    sme2_exports: None,
    sme2_baseline_path: Path,
) -> Artifact:
    """The current case's export. An export that fails or computes wrong numbers is an xfail
    while the case was never measured (no baseline: a dtype ExecuTorch cannot do for this model),
    and fails the test once it was (a baseline exists): a gated case that stops exporting is a
    regression — an ExecuTorch upgrade, a quantizer change, an edit to the model — not a known
    limitation. A user marks a known one with ``pytest.mark.xfail``.
    A registered program is checked instead (one host run); one that cannot be gated fails."""
    from pytest_sme2.errors import ExportError
    from pytest_sme2.export.program_files import ProgramSpec, prepare_program

    program = sme2_case.model
    if isinstance(program, ProgramSpec):
        return or_fail(lambda: prepare_program(program))
    try:
        return exported_model(sme2_case.model, sme2_case.dtype)
    except ExportError as err:
        reason = str(err)
    if sme2_baseline_path.exists():
        pytest.fail(f"{reason} (the case has a baseline, {sme2_baseline_path})", pytrace=False)
    pytest.xfail(reason)


@pytest.fixture
def sme2_artifacts_dir(
    sme2_case: Case, pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """Where this test's traces, logs and outputs go (``--sme2-artifacts``, else pytest's
    basetemp)."""
    session = Sme2Session.of(pytestconfig)
    return session.artifacts_dir(sme2_case, tmp_path_factory.getbasetemp())


@pytest.fixture
def sme2_machine_speed(sme2_case: Case, sme2_fleet: Fleet) -> MachineSpeed:
    """The device's undisturbed speed, as the reference workload has shown it this session."""
    return sme2_fleet.speed(sme2_case.device)


@pytest.fixture
def sme2_context(
    request: pytest.FixtureRequest,
    sme2_case: Case,
    sme2_artifact: Artifact,
    sme2_device: Device,
    sme2_stored_baseline: Stored,
    sme2_reference: tuple[Path, Path],
    sme2_artifacts_dir: Path,
) -> CaseContext:
    """The current case's values — case, settings, program, device, baseline, run directory,
    reference workload, machine speed, history — gathered once for ``sme2_measure`` and
    ``sme2_judge``."""
    session = Sme2Session.of(request.config)
    return session.case_context(
        request.node,
        sme2_case,
        sme2_artifact,
        sme2_device,
        sme2_stored_baseline,
        sme2_reference,
        sme2_artifacts_dir,
    )


@pytest.fixture
def sme2_measure(sme2_context: CaseContext) -> Callable[[str], Measurement]:
    """``sme2_measure(label)``: measure the current case afresh, its files under ``label``.

    Each runner call's deadline follows from the case's baseline
    (``pytest_sme2.measure.deadline``)."""
    return CaseMeasure(sme2_context)


@pytest.fixture
def sme2_measurement(sme2_measure: Callable[[str], Measurement]) -> Measurement:
    """Every variant the device supports, measured: timing-only rounds plus one traced run each."""
    return sme2_measure("")


@pytest.fixture
def sme2_comparison(sme2_measurement: Measurement) -> Comparison:
    """SME2-off vs SME2-on; skipped with the device's reason where it cannot run both."""
    comparison = sme2_measurement.comparison
    if comparison is None:
        pytest.skip(sme2_measurement.device.limits.get("speedup", "device runs one variant only"))
    return comparison


@pytest.fixture
def sme2_trace(sme2_measurement: Measurement) -> Trace:
    """The parsed ETDump of the headline variant (SME2-on where measured, else SME2-off)."""
    return sme2_measurement.variants[sme2_measurement.headline].parsed_trace()


@pytest.fixture
def sme2_baseline_path(sme2_case: Case, pytestconfig: pytest.Config) -> Path:
    """Where the current case's baseline is kept."""
    return Sme2Session.of(pytestconfig).baseline_path(sme2_case)


@pytest.fixture
def sme2_stored_baseline(sme2_baseline_path: Path, sme2_settings: Settings) -> Stored:
    """What the baseline path holds; one line failing the test if it cannot be used (under
    ``--sme2-update-baselines`` an invalid file is set aside instead: ``baseline_file.read``)."""
    from pytest_sme2.judge.baseline_file import read

    return or_fail(lambda: read(sme2_baseline_path, update=sme2_settings.update_baselines))


@pytest.fixture
def sme2_baseline(sme2_stored_baseline: Stored) -> Baseline | None:
    """The stored baseline for this test, or None when there is none yet."""
    return sme2_stored_baseline.baseline


@pytest.fixture(scope="session")
def sme2_history(pytestconfig: pytest.Config) -> HistoryLog | None:
    """This session's (and xdist worker's) history file under ``--sme2-history``, else None
    (``Sme2Session.history_log``); closed when the session ends."""
    return Sme2Session.of(pytestconfig).history_log()


@pytest.fixture
def sme2_judge(sme2_context: CaseContext, sme2_measure: Callable[[str], Measurement]) -> CaseJudge:
    """``sme2_judge(measurement)`` judges every gate, writes/updates the baseline as asked, and
    fails the test with reviewer sentences when a gate fails (or is skipped under --sme2-strict);
    a failure of only time gates is confirmed by a fresh measurement first (``judge.check``)."""
    return CaseJudge(sme2_context, sme2_context.check(sme2_measure))
