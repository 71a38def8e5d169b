"""What one test of a case left for the reports: :class:`CaseOutcome`, one frozen record per test.

The fixtures fill it in as the test goes (the measurement, then the verdicts and the baseline's
changes), the session makes it final when the test's report is made (the run directory written,
or why the case ended unmeasured), and every report reads it: the case's files, its pytest-html
row and extra, and the session report built from all of them (:mod:`pytest_sme2.report.
session_report`). Under pytest-xdist it crosses from the worker to the controller as one JSON
payload on the test's report, lossless (the measurement's JSON is), so the controller's reports
say what a session alone would, without reading the files back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status, Verdict

#: what the measurement's file paths are relative to in the payload: the file system's root, so
#: that they come back as they were in any process of the session
_ROOT = Path("/")


@dataclass(frozen=True)
class CaseOutcome:
    """One test of a case (a model × dtype × threads on one device): what it measured and judged,
    where its files are, or how it ended without a measurement and why."""

    nodeid: str
    #: the case: its device's spec (``qemu-sme2:vl=32``), model, dtype and thread count
    device: str
    model: str
    dtype: str
    threads: int
    #: the measurement the verdicts judge (the confirming one, where a fresh one was taken)
    measurement: Measurement | None = None
    verdicts: tuple[Verdict, ...] = ()
    #: the case's run directory: the runner's files, then the report files
    run_dir: Path | None = None
    #: the case's own report.md, once the report files are written into ``run_dir``
    case_report: Path | None = None
    #: the measured program (.pte and ETRecord), copied into the run directory for the kit's tools
    pte: Path | None = None
    etrecord: Path | None = None
    #: the baseline file the judging wrote, and one line per change it made there
    baseline: Path | None = None
    baseline_changes: tuple[str, ...] = ()
    #: a case that ended without a measurement: how ("xfailed", "failed", "error") and why, in
    #: one line (an export that failed is an xfail)
    unmeasured: tuple[str, str] | None = None
    #: the case's series on the history page, where the judging appended a history record
    history_anchor: str | None = None

    @property
    def failed_gates(self) -> bool:
        """Some gate failed (the test failed on its verdicts)."""
        return any(v.status is Status.FAIL for v in self.verdicts)

    def to_json(self) -> dict[str, Any]:
        """The outcome as plain JSON (an xdist report's payload): lossless."""
        return {
            "nodeid": self.nodeid,
            "device": self.device,
            "model": self.model,
            "dtype": self.dtype,
            "threads": self.threads,
            "measurement": (None if self.measurement is None else self.measurement.to_json(_ROOT)),
            "verdicts": [v.to_json() for v in self.verdicts],
            "run_dir": _path_json(self.run_dir),
            "case_report": _path_json(self.case_report),
            "pte": _path_json(self.pte),
            "etrecord": _path_json(self.etrecord),
            "baseline": _path_json(self.baseline),
            "baseline_changes": list(self.baseline_changes),
            "unmeasured": None if self.unmeasured is None else list(self.unmeasured),
            "history_anchor": self.history_anchor,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CaseOutcome:
        measurement = data["measurement"]
        unmeasured = data["unmeasured"]
        return cls(
            nodeid=data["nodeid"],
            device=data["device"],
            model=data["model"],
            dtype=data["dtype"],
            threads=data["threads"],
            measurement=None if measurement is None else Measurement.from_json(measurement, _ROOT),
            verdicts=tuple(Verdict.from_json(v) for v in data["verdicts"]),
            run_dir=_path(data["run_dir"]),
            case_report=_path(data["case_report"]),
            pte=_path(data["pte"]),
            etrecord=_path(data["etrecord"]),
            baseline=_path(data["baseline"]),
            baseline_changes=tuple(data["baseline_changes"]),
            unmeasured=None if unmeasured is None else (unmeasured[0], unmeasured[1]),
            history_anchor=data["history_anchor"],
        )


def _path_json(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _path(text: str | None) -> Path | None:
    return None if text is None else Path(text)
