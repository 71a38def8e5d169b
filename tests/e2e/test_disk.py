"""Disk and permissions, for real: a full artifacts disk and a read-only baseline directory are
tmpfs mounts, so the errors are the kernel's own (ENOSPC, EROFS). Each gives one line naming the
path, no traceback, and leaves every stored baseline as it was."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from pytest_sme2.cache import cache_root
from pytest_sme2.judge.baseline_file import load
from tests.inner import INNER_TEST, InnerProject, inner_conftest

pytest_plugins = ["pytester"]

#: Resolved at import, before pytester points HOME elsewhere: inner runs reuse the real caches.
CACHE = cache_root()


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


FILL_THE_DISK = """
    with open(sme2_artifacts_dir / "filler", "wb") as handle:
        try:
            while True:
                handle.write(bytes(65536))
                handle.flush()
        except OSError:
            pass
"""


def _session(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=600)


def _no_traceback(result: pytest.RunResult) -> None:
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text and "INTERNALERROR" not in text, text


#: The inner project's two models, ``kept`` (with a baseline) and ``new``.
CONFTEST = inner_conftest("kept", "new")


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("SME2_CACHE_DIR", str(CACHE))
    pytester.makeconftest(CONFTEST)
    return pytester


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The baselines a first session of ``kept`` wrote (it fails: no baseline yet, written and
    to be reviewed), for each test to copy."""
    project = InnerProject(tmp_path_factory.mktemp("recorded"), CONFTEST, test_disk=INNER_TEST)
    baselines = project.path / "baselines"
    first = project.run("--sme2-models=kept", f"--sme2-baseline-dir={baselines}")
    first.assert_outcomes(failed=1)
    return baselines


def _copy(baselines: Path, to: Path) -> Path:
    shutil.copytree(baselines, to)
    return to


def test_a_full_artifacts_disk_fails_the_case_naming_the_file(
    inner: pytest.Pytester, tmp_path: Path, recorded: Path
) -> None:
    baselines = _copy(recorded, tmp_path / "baselines")
    inner.makepyfile(test_disk=INNER_TEST)
    stored = (baselines / "host" / "kept-fp32.json").read_bytes()
    with small_disk(tmp_path / "artifacts") as artifacts:
        (artifacts / "filler").write_bytes(bytes(4 << 20))  # the whole disk
        result = _session(
            inner,
            "--sme2-models=kept",
            f"--sme2-baseline-dir={baselines}",
            f"--sme2-artifacts={artifacts}",
        )
    result.assert_outcomes(errors=1)
    result.stdout.re_match_lines(
        [
            rf"(E\s+)?host \(sme2-off\): runner failed \(exit 1\): error: cannot write "
            rf"{artifacts}/host/kept-fp32/\S+: No space left on device; full log: not kept "
            rf"\({artifacts}/host/kept-fp32/\S+/runner.log: No space left on device\); command: .*"
        ]
    )
    _no_traceback(result)
    assert (baselines / "host" / "kept-fp32.json").read_bytes() == stored


def test_a_disk_that_fills_before_the_reports_fails_the_test_and_the_session_in_one_line(
    inner: pytest.Pytester, tmp_path: Path
) -> None:
    """Measured and judged, then the disk is full: the per-test files and report.md cannot be
    written. CI must not archive a report that looks complete, so the test fails and says why."""
    inner.makepyfile(
        test_disk="def test_model(sme2_case, sme2_measurement, sme2_judge, sme2_artifacts_dir):\n"
        "    sme2_judge(sme2_measurement)\n"
        "    if sme2_case.model.name != 'new':\n"
        "        return\n" + FILL_THE_DISK
    )
    with small_disk(tmp_path / "artifacts") as artifacts:
        result = _session(
            inner,
            "--sme2-models=kept,new",
            f"--sme2-baseline-dir={tmp_path / 'baselines'}",
            "--sme2-update-baselines",
            f"--sme2-artifacts={artifacts}",
        )
    result.assert_outcomes(passed=1, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.re_match_lines(
        [
            rf"pytest-sme2: cannot write the report files of test_disk.py::test_model\[new-fp32\] "
            rf"to {artifacts}/host/new-fp32: No space left on device( \(\S+\))?$",
            rf"pytest-sme2: cannot write the session report {artifacts}/report.md: "
            r"No space left on device",
        ],
        consecutive=False,
    )
    _no_traceback(result)
    for case in ("kept", "new"):  # judged and stored before the disk filled
        assert load(tmp_path / "baselines" / "host" / f"{case}-fp32.json") is not None


def test_a_read_only_baseline_directory_fails_the_new_case_in_one_line_and_keeps_the_rest(
    inner: pytest.Pytester, tmp_path: Path, recorded: Path
) -> None:
    inner.makepyfile(test_disk=INNER_TEST)
    baselines = _copy(recorded, tmp_path / "baselines")
    stored = {path: path.read_bytes() for path in baselines.rglob("*") if path.is_file()}
    with mounted(tmp_path / "ro", "--bind", "-o", "ro", str(baselines)) as read_only:
        result = _session(inner, "--sme2-models=new", f"--sme2-baseline-dir={read_only}")
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
