"""How a session judges: the ``--sme2-*`` options judging reads, the gates plugins add, and the
quantities it gates (:class:`Policy`, built by ``Settings.policy``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_sme2.analysis.losses import LOSS_TOLERANCE_PERCENT
from pytest_sme2.judge.gate import Gate
from pytest_sme2.judge.moves import Tolerances
from pytest_sme2.judge.quantities import BUILTIN, Quantities


@dataclass(frozen=True)
class Policy:
    """How this session judges."""

    tolerances: Tolerances = field(default_factory=Tolerances)
    #: ``--sme2-update-baselines``
    update: bool = False
    #: ``--sme2-strict``: a skipped gate fails
    strict: bool = False
    #: ``--sme2-judge-disturbed``
    judge_disturbed: bool = False
    #: ``--sme2-calibrate``: measurements per case, 0 when not calibrating
    calibrate_runs: int = 0
    #: the gates plugins add (the ``pytest_sme2_gates`` hook), judged after the built-in ones
    gates: tuple[Gate, ...] = ()
    #: the quantities gated and stored
    quantities: Quantities = BUILTIN
    #: ``--sme2-loss-tolerance``: % an operator may cost more with SME2 on than off; None: off
    loss_tolerance: float | None = LOSS_TOLERANCE_PERCENT
