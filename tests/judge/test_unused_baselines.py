"""Baselines no case of the suite uses any more: listed at the end of a session over the whole
suite, removed under ``--sme2-update-baselines`` (``judge.unused_baselines``, ``Sme2Session``),
and left alone by a session that runs a subset of the cases, which cannot know.

On the objects: the session object of a configuration pytest parsed from each command line, its
cases those of the suite's registered models, ended as pytest ends it (``pytest_sessionfinish``)
and asked what its terminal summary says. The session's wiring — each xdist worker finding and
removing, the controller saying what they found — is the session from an empty cache in
tests/e2e/test_report_e2e.py.
"""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest
from _pytest.terminal import TerminalReporter

from pytest_sme2.devices.kinds import BUILT_IN_KINDS
from pytest_sme2.devices.spec import Platform, parse_device_specs
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.judge.unused_baselines import UnusedBaselines, settle_unused, unused_baselines
from pytest_sme2.session import Sme2Session
from pytest_sme2.session_end import find_unused, whole_suite

pytest_plugins = ["pytester"]

#: the exports and tasks each test finishes are its own (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("own_progress")

#: where ``auto`` adds the emulated device (on any machine running this test)
X86_LINUX = Platform("Linux", "x86_64", frozenset({"avx2", "sse4_2"}))


def _never_built() -> None:
    raise AssertionError("finding unused baselines builds no model")


def _spec(name: str, dtypes: tuple[str, ...] = ("fp32",)) -> ModelSpec:
    """A registered model as the suite's cases see it: its name and dtypes (never built)."""
    return ModelSpec(name, _never_built, _never_built, "a model", dtypes)


def ended(
    pytester: pytest.Pytester,
    *args: str,
    registered: tuple[ModelSpec, ...],
    exitstatus: pytest.ExitCode = pytest.ExitCode.OK,
    deselected: bool = False,
) -> Sme2Session:
    """The session object of ``pytest *args`` in ``pytester``'s directory that collected the
    cases of ``registered`` (some deselected, where ``deselected``), ended with ``exitstatus``."""
    session = Sme2Session(pytester.parseconfig(*args))
    session.cases = {case.id: case for case in session.settings.cases(registered)}
    if deselected:  # pytest hands the hook the items deselected: only whether any were counts
        session.pytest_deselected([cast(pytest.Item, "test_suite.py::test_model[plug_a-fp32]")])
    finished = pytest.Session.from_config(session.config)
    finished.exitstatus = exitstatus
    session.pytest_sessionfinish(finished, exitstatus)
    return session


def said(session: Sme2Session) -> str:
    """What the session's terminal summary says."""
    out = io.StringIO()
    session.pytest_terminal_summary(TerminalReporter(session.config, out))
    return out.getvalue()


def test_only_this_sessions_thread_counts_and_unused_files_are_found(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    for name in ("a-fp32.json", "a-fp32-t2.json", "b-fp32.json", "b-fp32.json.invalid-1"):
        (host / name).write_text("{}")
    used = {host / "a-fp32.json"}
    assert unused_baselines([host, tmp_path / "none"], used, (1,)) == (host / "b-fp32.json",)
    assert unused_baselines([host], used, (1, 2)) == (host / "a-fp32-t2.json", host / "b-fp32.json")


def test_unused_baselines_are_removed_only_by_an_update_that_named_no_test_file(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    unused, used = host / "gone-fp32.json", host / "kept-fp32.json"

    def settle(**how: bool) -> UnusedBaselines:
        for path in (unused, used):
            path.write_text("{}")
        return settle_unused([host], {used}, (1,), **how)

    assert settle(update=False, named=False) == UnusedBaselines((unused,), removed=False)
    assert unused.exists()
    assert settle(update=True, named=True) == UnusedBaselines((unused,), False, withheld=True)
    assert unused.exists()
    assert settle(update=True, named=False) == UnusedBaselines((unused,), removed=True)
    assert not unused.exists() and used.exists()


def test_what_two_workers_found_is_one_finding():
    one = UnusedBaselines((Path("/b/host/x.json"),), removed=True)
    other = UnusedBaselines((Path("/b/host/y.json"), Path("/b/host/x.json")), removed=True)
    assert one.merged(UnusedBaselines.from_json(other.to_json())) == UnusedBaselines(
        (Path("/b/host/x.json"), Path("/b/host/y.json")), removed=True
    )
    assert one.lines(Path("/b")) == [
        "unused baselines removed (no case of the suite uses them any more):",
        "    host/x.json",
    ]


def test_a_removed_models_baseline_is_listed_then_removed_by_a_whole_suite_update(
    pytester: pytest.Pytester,
) -> None:
    """plug_b is no longer registered; its baseline and plug_a's are on disk, and one of plug_a
    at two threads (another session's, ``--sme2-threads=2``). A session over the whole suite lists
    plug_b's; one over a subset (its models or dtypes chosen, tests deselected) finds nothing;
    one that named its test file, or was only collecting, or was interrupted, removes nothing;
    an update over the whole suite removes it, and only it."""
    host = pytester.path / "baselines" / "host"
    host.mkdir(parents=True)
    gone, kept = host / "plug_b-fp32.json", host / "plug_a-fp32.json"
    two_threads = host / "plug_a-fp32-t2.json"
    for path in (gone, kept, two_threads):
        path.write_text("{}")
    suite = (_spec("plug_a"),)

    listed = ended(pytester, registered=suite)
    assert listed.unused == UnusedBaselines((gone,), removed=False)
    summary = said(listed)
    assert "pytest-sme2 unused baselines" in summary
    assert "unused baselines (no collected case uses them; --sme2-update-baselines over" in summary
    assert "    baselines/host/plug_b-fp32.json" in summary and "plug_a-fp32" not in summary

    for subset in (("--sme2-models=plug_a",), ("--sme2-dtypes=fp32",), ("-k", "plug_a")):
        session = ended(pytester, *subset, "--sme2-update-baselines", registered=suite)
        assert session.unused is None, subset
        assert "unused baselines" not in said(session)
    deselected = ended(pytester, "--sme2-update-baselines", registered=suite, deselected=True)
    assert deselected.unused is None
    assert gone.exists()

    # naming the test file: a module that registers models may be left out, so nothing goes
    named = ended(pytester, "test_suite.py", "--sme2-update-baselines", registered=suite)
    assert named.unused == UnusedBaselines((gone,), removed=False, withheld=True)
    assert "unused baselines, not removed (no collected case uses them, but" in said(named)
    for stopped in (
        ended(pytester, "--sme2-update-baselines", "--collect-only", registered=suite),
        ended(
            pytester,
            "--sme2-update-baselines",
            registered=suite,
            exitstatus=pytest.ExitCode.INTERRUPTED,
        ),
    ):
        assert stopped.unused == UnusedBaselines((gone,), removed=False)
    assert gone.exists()

    removed = ended(pytester, "--sme2-update-baselines", registered=suite)
    assert removed.unused == UnusedBaselines((gone,), removed=True)
    summary = said(removed)
    assert "unused baselines removed (no case of the suite uses them any more):" in summary
    assert "    baselines/host/plug_b-fp32.json" in summary
    assert not gone.exists() and kept.exists() and two_threads.exists()


def test_auto_leaves_the_emulated_devices_other_dtypes_alone(pytester: pytest.Pytester) -> None:
    """``auto`` on x86-64 Linux runs qemu-sme2 for each model's headline dtype only, a subset as
    under ``--sme2-dtypes``: an update over the whole suite neither lists nor removes the
    others."""
    for device in ("host", "qemu-sme2"):
        folder = pytester.path / "baselines" / device
        folder.mkdir(parents=True)
        for name in ("plug_a", "plug_b"):
            for dtype in ("fp32", "int8"):
                (folder / f"{name}-{dtype}.json").write_text("{}")
    config = pytester.parseconfig("--sme2-update-baselines")
    auto = parse_device_specs("auto", BUILT_IN_KINDS, platform=X86_LINUX)
    settings = replace(Sme2Session(config).settings, devices=auto)
    suite = (_spec("plug_a", ("fp32", "int8")), _spec("plug_b", ("fp32", "int8")))
    cases = settings.cases(suite)
    # host: 2 models × 2 dtypes; qemu-sme2: 2 models × fp32
    assert sorted(case.id for case in cases) == [
        "host-plug_a-fp32",
        "host-plug_a-int8",
        "host-plug_b-fp32",
        "host-plug_b-int8",
        "qemu-sme2-plug_a-fp32",
        "qemu-sme2-plug_b-fp32",
    ]
    assert whole_suite(settings, config, deselected=False)
    assert find_unused(settings, cases, config, pytest.ExitCode.OK).paths == ()
    assert (pytester.path / "baselines" / "qemu-sme2" / "plug_b-int8.json").exists()
