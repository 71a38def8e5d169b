"""Where the plugin leaves per-session and per-test results for the report hooks to read.

Its own module so that ``plugin`` (which writes them) and ``report.hooks`` (which reads them) do
not import each other.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_sme2.judge.history import HistoryRecord
    from pytest_sme2.judge.unused_baselines import UnusedBaselines
    from pytest_sme2.records.measurement import Measurement
    from pytest_sme2.records.verdict import Verdict
    from pytest_sme2.report.kit_json import Program
    from pytest_sme2.settings import Settings

SETTINGS_KEY: pytest.StashKey[Settings] = pytest.StashKey()
MEASUREMENT_KEY: pytest.StashKey[Measurement] = pytest.StashKey()
#: where the test's measurement left its files, and where its report files go
ARTIFACTS_DIR_KEY: pytest.StashKey[Path] = pytest.StashKey()
#: the measured program (.pte, ETRecord), copied into the test's run directory for the kit's tools
PROGRAM_KEY: pytest.StashKey[Program] = pytest.StashKey()
#: the folder of a test's run directory that holds the runner's own files (rounds, traced and
#: evidence runs): a dot-folder beside the kit's experiment folders, out of the way of its tools
RUNS_DIR = ".sme2-runs"
VERDICTS_KEY: pytest.StashKey[tuple[Verdict, ...]] = pytest.StashKey()
#: the baseline file written and one line per change
BASELINE_CHANGES_KEY: pytest.StashKey[tuple[Path, tuple[str, ...]]] = pytest.StashKey()
#: the history record a judged case appended (``--sme2-history``)
HISTORY_KEY: pytest.StashKey[HistoryRecord] = pytest.StashKey()
#: the baselines no case of the suite uses, found (or removed) when the session ended
UNUSED_BASELINES_KEY: pytest.StashKey[UnusedBaselines] = pytest.StashKey()
