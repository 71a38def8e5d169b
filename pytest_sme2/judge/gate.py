"""A gate, and what it is given: the extension point for gates of one's own, and the interface
every built-in gate implements.

A plugin or a conftest adds gates through the ``pytest_sme2_gates(config)`` hook
(:mod:`pytest_sme2.hookspec`); they are judged after the built-in ones, on the same
:class:`Judging`, and their verdicts count as any other's: they fail the test, are skipped
(and fail under ``--sme2-strict``), appear in every report and the history. For instance::

    class MaxPlannedMemory:
        name = "planned-memory-ceiling"

        def check(self, judging):
            m = judging.measurement
            for variant, vm in m.variants.items():
                mib = vm.load.planned_bytes / 2**20 if vm.load else 0
                ok = mib <= 64
                yield Verdict(f"{self.name}[{variant}]", Status.PASS if ok else Status.FAIL,
                              f"planned memory {mib:.1f} MiB {'≤' if ok else '>'} 64 MiB")

    def pytest_sme2_gates(config):
        return [MaxPlannedMemory()]

A gate whose numbers come from wall-clock time says so with ``wall_clock = True``: a failure of
only such gates is confirmed by fresh measurements, and they are not judged where other work took
the CPU from the runs (:mod:`pytest_sme2.judge.time_gates`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pytest_sme2.analysis.losses import LOSS_TOLERANCE_PERCENT
from pytest_sme2.judge.baseline_model import Baseline, TimeRecord
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.moves import Tolerances
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Verdict


@dataclass(frozen=True)
class Judging:
    """What every gate is given: one measurement of a case and what it is judged against."""

    measurement: Measurement
    #: the case's stored baseline; None where it has none yet (then only the gates that need no
    #: baseline judge)
    stored: Baseline | None
    #: the measurement in its baseline form (rounded as stored): compared with ``stored`` by each
    #: quantity's own "moved" rule, the one a baseline update applies
    now: Baseline
    #: the test's ``sme2`` marker
    expectations: Expectations
    #: the session's (``--sme2-*-tolerance``)
    tolerances: Tolerances
    #: the session's ``--sme2-loss-tolerance`` (%), None: off; not a baseline tolerance (the
    #: ``sme2-losses`` gate compares the measurement's own variants), so not in ``tolerances``,
    #: which a baseline file records
    loss_tolerance: float | None = LOSS_TOLERANCE_PERCENT

    @property
    def record(self) -> TimeRecord | None:
        """The stored time record of the measuring machine's class, None where there is none."""
        return self.stored.record_for(self.measurement.device) if self.stored else None

    @property
    def measured_record(self) -> TimeRecord | None:
        """The measurement's own time record, None where the device's time means nothing."""
        return self.now.record_for(self.measurement.device)


@runtime_checkable
class Gate(Protocol):
    """A gate: judges a case, one :class:`Verdict` per thing it judged (pass, fail, or skip saying
    why not), each with the sentence a reviewer would write.

    ``name`` is its verdicts' gate name, or what they begin with (``latency`` for
    ``latency[sme2-on]``): the reports, the history and junit properties show it. Optionally,
    ``wall_clock = True``: its numbers are wall-clock time (see the module's docstring).
    """

    name: str

    def check(self, judging: Judging) -> Iterable[Verdict]: ...


def is_wall_clock(gate: Gate) -> bool:
    """Whether ``gate`` judges wall-clock time (its optional ``wall_clock``, default False)."""
    return bool(getattr(gate, "wall_clock", False))
