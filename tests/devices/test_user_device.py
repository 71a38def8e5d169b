"""A device defined in a user's conftest through the hook runs a case end to end: the worked example
of docs/extending.md — a board reached through a command prefix, here this machine pinned to one
core — records a baseline in its own folder, with the lab's power profile in its machine class,
and the next session judges against it. Inner sessions: pytest's wiring (a conftest's hooks and
options) is the subject."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from pytest_sme2.cache import cache_root
from pytest_sme2.runner.build import build_runner
from tests.inner import INNER_TEST, REPO, inner_conftest

pytest_plugins = ["pytester"]

#: Resolved at import, before pytester points HOME elsewhere: the exports and runner are reused.
CACHE = cache_root()


def worked_example() -> str:
    """The conftest of docs/extending.md's worked example, as the page shows it."""
    page = (REPO / "docs" / "extending.md").read_text()
    section = page.split("## A worked example", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S)[1]  # type: ignore[index]


def test_a_conftests_device_records_a_baseline_and_is_judged_against_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SME2_CACHE_DIR", str(CACHE))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join((str(REPO), os.environ.get("PYTHONPATH", ""))))
    monkeypatch.setenv("LAB_POWER_PROFILE", "quiet-bench")
    pytester.makeconftest(worked_example() + inner_conftest("tiny"))
    pytester.makepyfile(test_board=INNER_TEST)
    via = "taskset -c 0" if shutil.which("taskset") else "env"
    baselines = tmp_path / "baselines"
    args = (
        "-p",
        "no:cacheprovider",
        "--sme2-device=board",
        f"--board-via={via}",
        f"--board-runner={build_runner('host')}",
        f"--sme2-baseline-dir={baselines}",
        "-rA",
    )
    recorded = pytester.runpytest_subprocess(*args, "--sme2-update-baselines", "--sme2-artifacts=a")
    recorded.assert_outcomes(passed=1)
    stored = json.loads((baselines / "board" / "tiny-fp32.json").read_text())
    assert stored["device"] == "board"
    ((class_id, record),) = stored["machines"].items()
    assert record["machine_class"]["power_profile"] == "quiet-bench"
    assert record["machine_class"]["cpu"].startswith("board ")
    assert class_id.startswith("board-")

    judged = pytester.runpytest_subprocess(*args, "--sme2-artifacts=b")
    judged.assert_outcomes(passed=1)
    report = (pytester.path / "b" / "board" / "tiny-fp32" / "sme2_report.md").read_text()
    assert f"| machine class | {class_id} |" in report
    assert "| class: power_profile | quiet-bench |" in report
    # time judged against the record it wrote, of its own class
    assert re.search(r"\| latency\[sme2-off\] \| pass \| E2E latency [0-9.]+× the baseline", report)
