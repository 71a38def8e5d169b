"""Disk and permissions, for real: a full artifacts disk and a read-only baseline directory are
tmpfs mounts, so the errors are the kernel's own (ENOSPC, EROFS). Each gives one line naming the
path, no traceback, and leaves every stored baseline as it was.

Two inner sessions, each where the session is the subject (its report files, its one-line
failures, its exit status): one whose artifacts disk fills in the middle of it — before the
reports of the case that filled it, and before the runner of the case after it — and one whose
baseline directory is read-only. The baseline they start from is recorded on the objects."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from pytest_sme2.judge.baseline_file import load
from pytest_sme2.judge.moves import Tolerances
from pytest_sme2.judge.policy import Policy
from tests.inner import INNER_TEST, InnerProject
from tests.judge.host_case import case_check, host_device, measure_on_host
from tests.judge.small_model import small_model


@contextmanager
def mounted(path: Path, *mount: str) -> Iterator[Path]:
    """``mount ARGS... path`` for the block; skips where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", *mount, str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"needs permission to mount: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def small_disk(path: Path) -> AbstractContextManager[Path]:
    return mounted(path, "-t", "tmpfs", "-o", "size=4m", "tmpfs")


#: The inner project's models, run in this order: ``new`` and ``fills`` have no baseline yet,
#: ``kept`` has one (:func:`recorded`).
NAMES = ("new", "fills", "kept")

#: The project registers :func:`~tests.judge.small_model.small_model` under each name, seeded
#: by its place: the program :func:`recorded` measures, so one export serves both.
CONFTEST = """
import torch

from pytest_sme2 import register_model
from tests.judge.small_model import Small, small_model
""" + "".join(
    f'\n\n@register_model("{name}", inputs=small_model("{name}").inputs, dtypes=("fp32",))\n'
    f"def {name}():\n    torch.manual_seed({seed})\n    return Small().eval()\n"
    for seed, name in enumerate(NAMES)
)

#: The project's test: every case judged; ``fills`` then fills the artifacts disk, unbuffered
#: (a buffered file would raise again as it closes), before its report files are written.
FILLING_TEST = """
def test_model(sme2_case, sme2_measurement, sme2_judge, sme2_artifacts_dir):
    sme2_judge(sme2_measurement)
    if sme2_case.model.name != "fills":
        return
    with open(sme2_artifacts_dir / "filler", "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(bytes(65536))
        except OSError:
            pass
"""


def _no_traceback(result: pytest.RunResult) -> None:
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text and "INTERNALERROR" not in text, text


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The baselines directory holding ``kept``'s, as a session under
    ``--sme2-update-baselines`` records it: measured on the host by ``measure`` and judged
    through ``CaseCheck``."""
    directory = tmp_path_factory.mktemp("recorded")
    device, kept = host_device(), small_model("kept", NAMES.index("kept"))

    def measured(label: str):
        return measure_on_host(device, kept, directory / label)

    check = case_check(directory, Policy(Tolerances(), update=True), measured, model="kept")
    assert check.check(measured("record")).failure is None
    return directory / "baselines"


def test_a_disk_that_fills_mid_session_fails_the_reports_and_the_next_runner_in_one_line(
    tmp_path: Path, recorded: Path
) -> None:
    """``new`` is judged and recorded; ``fills`` is judged and recorded, then fills the disk: its
    per-test files and report.md cannot be written, and CI must not archive a report that looks
    complete, so the test fails and says why; ``kept``'s runner then cannot write its files and
    the case fails naming the file, its stored baseline untouched, updating or not."""
    baselines = shutil.copytree(recorded, tmp_path / "baselines")
    stored = (baselines / "host" / "kept-fp32.json").read_bytes()
    project = InnerProject(tmp_path / "project", CONFTEST, test_disk=FILLING_TEST)
    with small_disk(tmp_path / "artifacts") as artifacts:
        result = project.run(
            f"--sme2-models={','.join(NAMES)}",
            f"--sme2-baseline-dir={baselines}",
            "--sme2-update-baselines",
            f"--sme2-artifacts={artifacts}",
        )
    result.assert_outcomes(passed=1, failed=1, errors=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    for line in (  # each where pytest prints it: the test's failure, the session's end
        rf"pytest-sme2: cannot write the report files of test_disk.py::test_model\[fills-fp32\] "
        rf"to {artifacts}/host/fills-fp32: No space left on device( \(\S+\))?$",
        rf"(E\s+)?host \(sme2-off\): runner failed \(exit 1\): error: cannot write "
        rf"{artifacts}/host/kept-fp32/\S+: No space left on device; full log: not kept "
        rf"\({artifacts}/host/kept-fp32/\S+/runner.log: No space left on device\); command: .*",
        rf"pytest-sme2: cannot write the session report {artifacts}/report.md: "
        r"No space left on device",
    ):
        result.stdout.re_match_lines([line])
    _no_traceback(result)
    for case in ("new", "fills"):  # judged and stored before the disk filled
        assert load(baselines / "host" / f"{case}-fp32.json") is not None
    assert (baselines / "host" / "kept-fp32.json").read_bytes() == stored


def test_a_read_only_baseline_directory_fails_the_new_case_in_one_line_and_keeps_the_rest(
    tmp_path: Path, recorded: Path
) -> None:
    baselines = shutil.copytree(recorded, tmp_path / "baselines")
    stored = {path: path.read_bytes() for path in baselines.rglob("*") if path.is_file()}
    project = InnerProject(tmp_path / "project", CONFTEST, test_disk=INNER_TEST)
    with mounted(tmp_path / "ro", "--bind", "-o", "ro", str(baselines)) as read_only:
        result = project.run("--sme2-models=new", f"--sme2-baseline-dir={read_only}")
    result.assert_outcomes(failed=1)
    result.stdout.re_match_lines(
        [
            rf"(E\s+)?{read_only}/host/new-fp32.json: cannot write the baseline \(Read-only file "
            r"system\); the stored file, if any, is unchanged: make the directory writable or "
            r"point --sme2-baseline-dir elsewhere"
        ]
    )
    _no_traceback(result)
    assert {path: path.read_bytes() for path in baselines.rglob("*") if path.is_file()} == stored
