"""Fleets: one session over several devices (``--sme2-device=SPEC,SPEC``), every case on every
device. Two phones are two adb doubles that run the host runner for real, one of which is
unplugged mid-session: xdist's groups and a lost device failing the rest of its cases are
pytest's wiring, so that test is an inner session. Two qemu-sme2 vector lengths are two real
emulated devices, measured and judged on the objects as the session's fixtures do it, and
compared by the session report and ``sme2 compare``; ``auto``'s emulated device that cannot be
prepared is skipped by the session object of a command line that names no device. What ``auto``
names on each kind of machine is tested on the parsed options (tests/devices/test_device_spec.py),
a fleet's devices and their machine info on the objects (tests/devices/test_kinds.py)."""

from __future__ import annotations

import itertools
import json
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_sme2 import cli
from pytest_sme2.cache import cache_root
from pytest_sme2.case_context import OUTCOME_KEY, CaseJudge, CaseMeasure, prepared_device
from pytest_sme2.case_files import write_case_files
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.model_spec import registered_models
from pytest_sme2.export.reference import REFERENCE
from pytest_sme2.judge.baseline_file import read
from pytest_sme2.measure.fleet import xdist_group
from pytest_sme2.records.device import Variant
from pytest_sme2.report.from_files import load_test_dir
from pytest_sme2.runner.build import build_runner
from pytest_sme2.session import Sme2Session
from pytest_sme2.settings import Case
from tests.adb_double import install
from tests.devices.test_device_android import _FEATURES, NO_SME2_PHONE, cpuinfo
from tests.inner import INNER_TEST, inner_conftest

pytest_plugins = ["pytester"]

#: the exports and tasks each test finishes are its own (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("own_progress")

REPO = Path(__file__).resolve().parents[2]
#: Resolved at import, before pytester points HOME elsewhere: inner runs reuse the real caches.
CACHE = cache_root()


@pytest.mark.skipif(
    (sys.platform, os.uname().machine) != ("linux", "x86_64"), reason="auto's x86-64 Linux fleet"
)
def test_a_default_device_that_cannot_be_prepared_skips_its_cases_saying_why(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``auto`` here (x86-64, no SME2) is the host and the emulated qemu-sme2 (which devices, on
    every kind of machine: tests/devices/test_device_spec.py; the two measured, CI's example
    suite): the session of a command line that names no device, whose qemu cannot be prepared,
    skips the emulated case (``sme2_device``), saying so and how to leave it out, while the host
    prepares for its cases."""
    monkeypatch.delenv("PYTEST_ADDOPTS")  # this suite's inner sessions' --sme2-device=host
    monkeypatch.setenv("SME2_QEMU", str(tmp_path / "no-such-qemu"))
    session = Sme2Session(pytester.parseconfig())
    host, emulated = session.settings.devices
    with pytest.raises(pytest.skip.Exception) as skipped:
        prepared_device(session.fleet, emulated)
    said = str(skipped.value)
    assert said.startswith("qemu-sme2 could not be prepared: "), said
    assert "--sme2-device=auto adds the emulated SME2 device" in said
    assert "--sme2-device=host measures the host alone" in said
    assert prepared_device(session.fleet, host).info().name == "host"


def _judged(
    session: Sme2Session, case: Case, node: pytest.Item, reference: tuple[Path, Path]
) -> pytest.TestReport:
    """``case`` measured and judged in ``node`` as the session's fixtures do it, its files
    written as the session writes them: the test's report, carrying its outcome."""
    device = prepared_device(session.fleet, case.device)
    artifact = export_model(case.model, case.dtype)
    stored = read(session.baseline_path(case), update=session.settings.update_baselines)
    assert stored.baseline is not None, "the committed baseline of the device"
    directory = session.artifacts_dir(case, node.path)
    context = session.case_context(node, case, artifact, device, stored, reference, directory)
    measured = CaseMeasure(context)
    CaseJudge(context, context.check(measured)).check(measured(""))
    report = pytest.TestReport(
        node.nodeid, (str(node.path), 1, node.name), {}, "passed", None, "call"
    )
    outcome = write_case_files(
        node.stash[OUTCOME_KEY],
        report,
        config=session.config,
        settings=session.settings,
        trends=None,
    )
    report.sme2_outcome = outcome.to_json()
    return report


def test_a_qemu_fleet_of_two_vector_lengths_runs_each_case_once_per_device(
    pytester: pytest.Pytester,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The issue's command (``--sme2-device=qemu-sme2:vl=32,qemu-sme2:vl=64``) against the
    committed baselines of both devices, on the objects: the session object of that command
    line, each case measured and judged as its fixtures do it (the case's context, ``sme2_measure``,
    ``sme2_judge``), its files written, its report handed to the session, the session ended; then
    ``sme2 compare`` over the two run directories."""
    import models  # noqa: F401  (registers the examples)

    fleet = "qemu-sme2:vl=32,qemu-sme2:vl=64"
    artifacts = tmp_path / "artifacts"
    session = Sme2Session(
        pytester.parseconfig(
            f"--sme2-device={fleet}",
            "--sme2-models=toy_cnn",
            "--sme2-dtypes=fp32",
            f"--sme2-baseline-dir={REPO / 'baselines'}",
            f"--sme2-artifacts={artifacts}",
        )
    )
    cases = session.settings.cases(registered_models())
    # an emulated device's cases may spread over xdist's workers: neither is a group
    assert [xdist_group(case.device) for case in cases] == [None, None]
    assert [case.id for case in cases] == [
        "qemu-sme2:vl=32-toy_cnn-fp32",
        "qemu-sme2:vl=64-toy_cnn-fp32",
    ]
    reference = export_model(REFERENCE, "fp32")
    for case in cases:
        node = pytest.Function.from_parent(
            request.node.parent, name=f"test_model[{case.id}]", callobj=request.function
        )
        session.pytest_runtest_logreport(
            _judged(session, case, node, (reference.pte, reference.inputs))
        )
    session.pytest_sessionfinish(pytest.Session.from_config(session.config), pytest.ExitCode.OK)

    counts = {}
    for spec in fleet.split(","):
        folder = spec.replace(":", "@")
        m, _ = load_test_dir(artifacts / folder / "toy_cnn-fp32" / "manifest.json")
        assert m.device.name == spec
        counts[spec] = m.variants[Variant.ON].evidence.instructions
    # SME2 kernels step through the matrix by the vector length: half of it, more instructions
    assert counts["qemu-sme2:vl=32"] > counts["qemu-sme2:vl=64"], counts
    # one report compares them: the session report.md and the HTML report, a row per device
    assert session.written == artifacts / "report.md"
    report = session.written.read_text()
    across = report.split("## Across devices", 1)[1].split("\n\n#", 1)[0]
    for spec in counts:
        (row,) = [line for line in across.splitlines() if f"| {spec} " in line]
        assert "instruction ratio" in row and "M instr" in row, row
    summary: list[str] = []
    session.pytest_html_results_summary(summary)
    table = "".join(summary).split("SME2 across devices", 1)[1].split("</table>", 1)[0]
    assert all(spec in table for spec in counts) and "instruction ratio" in table
    # and `sme2 compare` over two run directories, one per device
    one, other = (artifacts / spec.replace(":", "@") for spec in counts)
    capsys.readouterr()
    assert cli.main(["compare", str(one), str(other)]) == 0
    compared = capsys.readouterr().out
    assert compared.startswith("# SME2 across devices")
    rows = [line for line in across.splitlines() if line.startswith("| toy_cnn")]
    assert len(rows) == 2
    assert [line for line in compared.splitlines() if line.startswith("| toy_cnn")] == rows
    assert cli.main(["compare", str(one), str(one)]) == 2
    assert "both hold runs of qemu-sme2:vl=32 only" in capsys.readouterr().err


TIMELINE_CONFTEST = """

import json
import os
import time
from pathlib import Path

import pytest

from tests.adb_double import configure


@pytest.fixture(autouse=True)
def timeline(sme2_case):
    started = time.time()
    yield
    ended = time.time()
    with open(os.environ["FLEET_TIMELINE"], "a") as handle:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "")
        handle.write(json.dumps([sme2_case.device.id, worker, started, ended]) + "\\n")
    unplug = os.environ.get("FLEET_UNPLUG")  # "<device spec> <its root>", after its first case
    if unplug and sme2_case.device.id == unplug.split()[0] and sme2_case.model.name == "one":
        configure(Path(unplug.split()[1]), gone=True)
"""


@pytest.fixture
def two_phones(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[str], list[Path]]:
    """Two phones without SME2 (adb doubles) behind one ``adb``, as one adb server shows two
    phones: ``-s SERIAL`` goes to that phone, ``adb devices`` lists both. Returns their specs."""
    roots = {serial: tmp_path / serial for serial in ("PHONEA1", "PHONEB2")}
    adbs = {
        serial: install(
            root, serial=serial, cpuinfo=cpuinfo(8, _FEATURES), properties=NO_SME2_PHONE
        )
        for serial, root in roots.items()
    }
    server = tmp_path / "adb"
    server.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = devices ]; then\n'
        "  echo 'List of devices attached'\n"
        + "".join(f"  {adb} devices | grep -v '^List'\n" for adb in adbs.values())
        + "  exit 0\nfi\n"
        + 'case "$2" in\n'
        + "".join(f'  {serial}) exec {adb} "$@";;\n' for serial, adb in adbs.items())
        + "esac\n"
        + "echo \"adb: device '$2' not found\" >&2; exit 1\n"
    )
    server.chmod(0o755)
    monkeypatch.setenv("SME2_CACHE_DIR", str(CACHE))
    monkeypatch.setenv("PYTHONPATH", f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("FLEET_TIMELINE", str(tmp_path / "timeline.jsonl"))
    pytester.makeconftest(inner_conftest("one", "two", "three") + TIMELINE_CONFTEST)
    pytester.makepyfile(test_fleet=INNER_TEST)
    pytester.makeini(f"[pytest]\naddopts = --sme2-adb={server}\n")
    return [f"android:serial={serial}" for serial in roots], list(roots.values())


def _run(pytester: pytest.Pytester, specs: list[str], *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        f"--sme2-device={','.join(specs)}",
        f"--sme2-runner-on={build_runner('host')}",
        "--sme2-update-baselines",
        f"--sme2-baseline-dir={pytester.path / 'baselines'}",
        *args,
        timeout=900,
    )


def _timeline(tmp_path: Path) -> list[tuple[str, str, float, float]]:
    lines = (tmp_path / "timeline.jsonl").read_text().splitlines()
    return [tuple(json.loads(line)) for line in lines]


def test_one_worker_owns_each_phone_and_a_phone_lost_fails_its_remaining_cases_only(
    pytester: pytest.Pytester,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    two_phones: tuple[list[str], list[Path]],
) -> None:
    """One session on two workers: each phone's cases form one xdist group (one worker owns it,
    its cases never overlap), and the second phone, unplugged after its first case, fails its
    remaining cases in one line each while the first phone's go on."""
    specs, roots = two_phones
    monkeypatch.setenv("FLEET_UNPLUG", f"{specs[1]} {roots[1]}")
    junit = tmp_path / "junit.xml"
    result = _run(pytester, specs, "-n", "2", f"--junitxml={junit}")
    result.assert_outcomes(passed=4, errors=2)
    outcome = {}
    for case in ET.parse(junit).iter("testcase"):
        error = case.find("error")
        name = case.get("name", "").split("]@")[0] + "]"  # less xdist's group
        outcome[name] = error.get("message") if error is not None else "passed"
    for model in ("one", "two", "three"):
        assert outcome[f"test_model[{specs[0]}-{model}-fp32]"] == "passed"
    assert outcome[f"test_model[{specs[1]}-one-fp32]"] == "passed"
    lost = outcome[f"test_model[{specs[1]}-two-fp32]"]
    assert "\n" not in lost.strip()
    assert f'"Failed: {specs[1]} (sme2-off): lost the connection to android device PHONEB2' in lost
    after = outcome[f"test_model[{specs[1]}-three-fp32]"]
    assert f'"Failed: {specs[1]} was lost earlier in this session: {specs[1]} (sme2-off): ' in after
    timeline = _timeline(tmp_path)
    assert len(timeline) == 6
    for spec in specs:
        runs = sorted(
            (start, end, worker) for device, worker, start, end in timeline if device == spec
        )
        assert len(runs) == 3 and len({worker for _, _, worker in runs}) == 1, runs
        for (_, end, _), (start, _, _) in itertools.pairwise(runs):
            assert end <= start, runs  # one case of a phone at a time
    # and the fleet did use both workers: one phone each
    assert len({worker for _, worker, _, _ in timeline}) == 2
