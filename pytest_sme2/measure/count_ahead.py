"""Counting ahead: the counted runs of a session's emulated cases, made before its first case is
measured, two at a time over the cores, longest first.

Why: a counted case runs its SME2-on and SME2-off variants side by side
(:mod:`pytest_sme2.measure.case`), but under qemu SME2-on emulates several times slower than
SME2-off (vit_tiny's counted runs: 80 s against 11 s on a 2-core Xeon VM), so one core idles for
most of each case, and a session alone (the main job, ``auto``) counts its cases one after
another. Counted here, the long SME2-on runs of two cases share the cores.

Safe by construction: a count is kept under the key of everything it is a function of
(:mod:`pytest_sme2.devices.stored_counts`) and each case reads back only its own key, so a count
made here that no case asks for is time lost, never a wrong count. A count that fails here is
left for its case, which counts again and fails with its own one line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.devices.base import Device, evidence_request
from pytest_sme2.measure.side_by_side import side_by_side
from pytest_sme2.records.device import Variant

#: How much longer an SME2-on count is taken to run than SME2-off's, for ordering alone (qemu
#: emulates SME with helper calls: vit_tiny 7.3×, squeezesam_like about as much).
_SME2_ON_WEIGHT = 8


@dataclass(frozen=True)
class CountProgram:
    """A program a case counts on its device, and its counted run's deadline: the case's own
    (None: the device's default), so a run that hangs ahead is killed when its case's would be."""

    device: Device
    pte: Path
    inputs: Path
    timeout_s: float | None = None


@dataclass(frozen=True)
class CountJob:
    """One variant of one program to count, its files under ``workdir``."""

    program: CountProgram
    variant: Variant
    workdir: Path

    @property
    def weight(self) -> int:
        """A guess at the job's length: the program's size, SME2-on's weighed up."""
        size = os.path.getsize(self.program.pte)
        return size * _SME2_ON_WEIGHT if self.variant is Variant.ON else size


def count_jobs(programs: Sequence[CountProgram], workdir: Path) -> tuple[CountJob, ...]:
    """Every variant of each program whose device counts and keeps its counts, each program
    once."""
    jobs = []
    for index, program in enumerate(dict.fromkeys(programs)):
        if program.device.counts_kept():
            for variant in program.device.info().variants:
                jobs.append(CountJob(program, variant, workdir / f"{index}-{variant}"))
    return tuple(jobs)


def count_ahead(jobs: Sequence[CountJob]) -> int:
    """Count ``jobs`` on two threads, the longest first, each thread taking the next job as it
    finishes one; how many counts were made (the rest failed and are left to their cases)."""
    queue = sorted(jobs, key=lambda job: job.weight, reverse=True)
    done = side_by_side(lambda: _take(queue), lambda: _take(queue))
    return sum(done)


def _take(queue: list[CountJob]) -> int:
    """Count the queue's next job until none is left (``list.pop`` is atomic under the GIL)."""
    made = 0
    while True:
        try:
            job = queue.pop(0)
        except IndexError:
            return made
        made += _count(job)


def _count(job: CountJob) -> bool:
    """Count one job; False where it failed (its case will fail with its own line)."""
    program = job.program
    request = evidence_request(
        program.pte, program.inputs, job.workdir, variant=job.variant, timeout_s=program.timeout_s
    )
    try:
        program.device.counted_run(request)
    except Exception:  # its case counts again and reports the error
        return False
    return True
