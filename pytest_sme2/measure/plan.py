"""What one measurement is asked for: how much to measure (:class:`MeasurePlan`, the session's
settings) and the case's program with what its outputs are checked against (:class:`CaseProgram`).

Apart from :mod:`pytest_sme2.measure.case` so the pieces it is made of (the runner calls, the
timing rounds) read them without importing the whole of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.analysis.numerics import ExportNumerics
from pytest_sme2.analysis.tolerances import Tolerance
from pytest_sme2.errors import ConfigError


@dataclass(frozen=True)
class MeasurePlan:
    """How much to measure. ``runs`` timing-only runs per variant are split over ``rounds``."""

    runs: int = 20
    warmup: int = 2
    threads: int = 1
    rounds: int = 10
    traced_runs: int = 10
    #: also time every variant at 1 thread in the same rounds, where ``threads`` > 1: what a
    #: thread-gain floor compares against (``judge.thread_gates``), measured beside the N-thread
    #: runs so that the machine's state of the moment cancels in their ratio
    with_one_thread: bool = False
    #: every runner call's deadline in seconds (``--sme2-timeout``); None: from the baseline
    #: (:mod:`pytest_sme2.measure.deadline`), else the device's default
    timeout_s: float | None = None
    #: ``--sme2-peak``: the chip's peak GFLOP/s operators are shown against; None: the known
    #: chips' published figure (:data:`pytest_sme2.analysis.efficiency.CHIP_PEAKS`)
    peak_gflops: float | None = None

    def __post_init__(self) -> None:
        for name in ("runs", "rounds", "traced_runs", "threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--sme2-{name.replace('_', '-')} must be ≥ 1")
        if self.warmup < 0:
            raise ConfigError("--sme2-warmup must be ≥ 0")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ConfigError("--sme2-timeout must be > 0 seconds (or 0 for the default)")

    def runs_per_round(self) -> list[int]:
        """Split ``runs`` over at most ``rounds`` rounds, as evenly as possible."""
        rounds = min(self.rounds, self.runs)
        base, extra = divmod(self.runs, rounds)
        return [base + (1 if i < extra else 0) for i in range(rounds)]


@dataclass(frozen=True)
class CaseProgram:
    """The case's exported program, and what the record carries of it and checks it against."""

    model: str
    dtype: str
    pte: Path
    inputs: Path
    #: names the backend of delegated operators
    etrecord: Path | None = None
    #: the export's eager outputs: every variant's outputs must match them in count and shape
    expected_outputs: Path | None = None
    #: what the export found of the program's numbers, carried into the record for the report
    numerics: ExportNumerics | None = None
    #: tokens per inference (for tokens/s), carried into the record
    tokens: int | None = None
    #: SME2-on outputs must match SME2-off within this (a registered program's), else the
    #: ``dtype`` label's
    parity_tolerance: Tolerance | None = None
