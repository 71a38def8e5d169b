"""Baselines that no case of the suite uses any more: a model renamed or unregistered, a dtype
dropped. They are listed at the end of a session that knows every case, and removed under
``--sme2-update-baselines`` (as syrupy does with unused snapshots), so ``baselines/`` keeps only
what is gated: a stale file would otherwise be reviewed, diffed and trusted for nothing.

Only this session's part of the baseline directory is looked at: its devices' folders, and of
those the files of its thread counts; another device's or thread count's files belong to the
sessions that run them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

#: ``<model>-<dtype>-t<N>.json``: a baseline of N threads (``baseline.baseline_path``); none: 1
_THREADS = re.compile(r"-t(\d+)\.json$")


def unused_baselines(
    directories: Iterable[Path], used: Collection[Path], threads: Collection[int]
) -> tuple[Path, ...]:
    """The baseline files in ``directories`` of one of ``threads`` that are not in ``used``."""
    found = []
    for directory in sorted(set(directories)):
        for path in sorted(directory.glob("*.json")) if directory.is_dir() else ():
            match = _THREADS.search(path.name)
            if path not in used and (int(match[1]) if match else 1) in threads:
                found.append(path)
    return tuple(found)


def settle_unused(
    directories: Iterable[Path],
    used: Collection[Path],
    threads: Collection[int],
    *,
    update: bool,
    named: bool,
) -> UnusedBaselines:
    """The last step of the baseline lifecycle (:mod:`pytest_sme2.judge.lifecycle`), at the end of
    a session over every case of the suite: the unused baselines found, and removed where
    ``update`` (``--sme2-update-baselines``, not under ``--collect-only``, not interrupted) —
    unless the session ``named`` its test files, when a model registered in a module it did not
    collect would look unused."""
    paths = unused_baselines(directories, used, threads)
    remove = update and not named
    for path in paths if remove else ():
        path.unlink(missing_ok=True)  # xdist's workers each remove: the first one does
    return UnusedBaselines(paths, remove, withheld=update and named)


@dataclass(frozen=True)
class UnusedBaselines:
    """The unused baselines a session found, and whether it removed them."""

    paths: tuple[Path, ...]
    removed: bool
    #: an update that would have removed them, but the session named its test files: a model
    #: registered in a test module it did not collect would look unused, so nothing is removed
    withheld: bool = False

    def merged(self, other: UnusedBaselines) -> UnusedBaselines:
        """Both findings as one: xdist's workers each look, and one may remove a file before
        another looks."""
        return UnusedBaselines(
            tuple(sorted({*self.paths, *other.paths})),
            self.removed or other.removed,
            self.withheld or other.withheld,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "paths": [str(path) for path in self.paths],
            "removed": self.removed,
            "withheld": self.withheld,
        }

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> UnusedBaselines:
        paths = doc["paths"]
        assert isinstance(paths, list)
        return cls(tuple(Path(path) for path in paths), bool(doc["removed"]), bool(doc["withheld"]))

    def lines(self, base: Path) -> list[str]:
        """What the terminal summary says: a heading line, then each path relative to ``base``
        (the directory pytest was invoked in), indented."""
        if self.removed:
            head = "unused baselines removed (no case of the suite uses them any more):"
        elif self.withheld:
            head = (
                "unused baselines, not removed (no collected case uses them, but this session "
                "named its test files: a model registered in a test module it did not collect "
                "would look unused; `pytest --sme2-update-baselines` without file arguments "
                "removes them):"
            )
        else:
            head = (
                "unused baselines (no collected case uses them; --sme2-update-baselines over the "
                "whole suite removes them):"
            )
        return [head, *(f"    {os.path.relpath(path, base)}" for path in self.paths)]
