"""What a remote xdist worker sends back with a measured test's report, and how the controller
lays it out as if the test had run there: :class:`Shipment`.

A worker on another machine writes its run directories and history records on its own disk (the
controller's paths mean nothing there); the controller's report.md, pytest-html report and history
page link to them. So each test's report carries its run directory, packed (a tar.gz: a small
model's run directory is a few hundred kB), and the history lines its judging appended; the
controller unpacks the directory under its own artifacts root at the same place relative to it
(``<device>/<case>``), moves the outcome's and the records' paths there, and appends the records
to a history file of that worker's. One payload per test, on the report, as the outcome itself
crosses: a worker killed half way has delivered every test it finished.
"""

from __future__ import annotations

import base64
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_sme2.judge.history import HistoryRecord
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.outcome import CaseOutcome


@dataclass(frozen=True)
class Shipment:
    """One measured test's files and history lines, from the worker ``worker`` whose artifacts
    root (where ``archive``'s paths start) is ``root``."""

    worker: str
    root: Path
    #: the run directory, a tar.gz with paths relative to ``root``
    archive: bytes
    #: the history records the test's judging appended there, one JSON line each
    history: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (base64 for the archive): the report crosses xdist and pytest-html as is."""
        return {
            "worker": self.worker,
            "root": str(self.root),
            "archive": base64.b64encode(self.archive).decode("ascii"),
            "history": list(self.history),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Shipment:
        archive = base64.b64decode(data["archive"])
        return cls(data["worker"], Path(data["root"]), archive, tuple(data["history"]))


def pack(outcome: CaseOutcome, root: Path, worker: str, history: Sequence[str]) -> Shipment:
    """The shipment of ``outcome``'s run directory (under ``root``) and its ``history`` lines."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        if outcome.run_dir is not None and outcome.run_dir.is_dir():
            tar.add(outcome.run_dir, arcname=str(outcome.run_dir.relative_to(root)))
    return Shipment(worker, root, buffer.getvalue(), tuple(history))


def unpack(shipment: Shipment, root: Path) -> None:
    """The shipped run directory, under ``root`` (files only: no link or device leaves it)."""
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(shipment.archive), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4
            tar.extractall(root, filter="data")
        else:  # pragma: no cover
            tar.extractall(root)  # our own worker's run directory


def moved(path: Path | None, old: Path, new: Path) -> Path | None:
    """``path`` under ``new`` where it was under ``old``; any other path as it was."""
    if path is None or not path.is_relative_to(old):
        return path
    return new / path.relative_to(old)


def relocate(outcome: CaseOutcome, old: Path, new: Path) -> CaseOutcome:
    """``outcome`` with its files' paths under ``new`` where they were under ``old`` (the
    measurement's through its lossless JSON, whose paths are relative to a base)."""
    m = outcome.measurement
    return replace(
        outcome,
        measurement=None if m is None else Measurement.from_json(m.to_json(old), new),
        run_dir=moved(outcome.run_dir, old, new),
        case_report=moved(outcome.case_report, old, new),
        pte=moved(outcome.pte, old, new),
        etrecord=moved(outcome.etrecord, old, new),
    )


def relocated_record(line: str, old: Path, new: Path) -> HistoryRecord:
    """A shipped history line as the controller keeps it: its run directory moved (the
    measurement's paths are relative to it, so they move with it)."""
    doc = json.loads(line)
    doc["artifacts"] = str(moved(Path(doc["artifacts"]), old, new))
    return HistoryRecord.from_json(doc)
