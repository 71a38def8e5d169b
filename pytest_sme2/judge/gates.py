"""Judging: a Measurement against its Baseline and the test's expectations → Verdicts, by every gate
in turn (:meth:`pytest_sme2.judge.quantities.Quantities.gates`, then the gates plugins add); what
the plugin then does with them, :func:`pytest_sme2.judge.lifecycle.decide`.

Rules, as the user's CI relies on them:

* structure (operator kinds and counts per run, packed SME operators) must match exactly;
* category shares stay within an absolute tolerance of the baseline (default 5 points), and
  within the limits the test's ``sme2`` marker sets;
* SME2 speedup is at least the floor and not worse than the baseline beyond tolerance;
* every quantity against the baseline "moved" by the rule a baseline update uses (its spec's):
  a gate fails on a move for the worse and names a move for the better;
* time (latency, shares, speedup, load time against the baseline) is judged only against the time
  record of the measuring machine's class; with none, those gates are "not judged" and the
  portable ones (structure, packed operators, kernels, parity, instruction counts) still are;
* wall-clock time is not judged where other work took the CPU from the runs, unless
  ``--sme2-judge-disturbed``; a time-only failure is confirmed by fresh measurements
  (:func:`pytest_sme2.judge.decision.judge_confirmed`);
* instruction counts of a multi-threaded emulated case are not judged (a thread pool's spin-wait
  varies them).

Every verdict carries a sentence a reviewer would write, and, for structure, a compact diff.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_sme2.judge.baseline import from_measurement
from pytest_sme2.judge.baseline_model import Baseline
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gate import Gate, Judging
from pytest_sme2.judge.moves import Tolerances
from pytest_sme2.judge.policy import Policy
from pytest_sme2.judge.quantities import gate_names
from pytest_sme2.judge.thread_gates import without_emulated_counts
from pytest_sme2.judge.time_gates import without_disturbed_time
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status, Verdict


@dataclass(frozen=True)
class Judge:
    """How one case is judged: by the session's gates (``policy``), against its stored baseline
    (None: only the gates that need none) and the test's expectations. Called on a measurement,
    it gives every gate's verdicts."""

    policy: Policy
    baseline: Baseline | None
    expectations: Expectations

    @property
    def gates(self) -> tuple[Gate, ...]:
        return (*self.policy.quantities.gates(), *self.policy.gates)

    def __call__(self, m: Measurement) -> tuple[Verdict, ...]:
        """Every gate's verdict for ``m``, the time gates' dropped (one skip saying why) where
        other work took the CPU from its runs, unless ``--sme2-judge-disturbed``.

        Against the baseline, ``m`` is judged in its baseline form (``from_measurement``) with the
        "moved" rules a baseline update uses: what fails here is exactly what
        ``--sme2-update-baselines`` would record.
        """
        policy = self.policy
        now = from_measurement(m, policy.tolerances, policy.quantities)
        judging = Judging(
            m, self.baseline, now, self.expectations, policy.tolerances, policy.loss_tolerance
        )
        gates = self.gates
        verdicts = [verdict for gate in gates for verdict in gate.check(judging)]
        verdicts = without_emulated_counts(m, verdicts, gate_names(gates, "counted"))
        if policy.judge_disturbed:
            return tuple(verdicts)
        return tuple(without_disturbed_time(m, verdicts, self.time_gates))

    @property
    def time_gates(self) -> tuple[str, ...]:
        """What the names of the wall-clock gates' verdicts begin with."""
        return gate_names(self.gates, "wall_clock")

    def only_time_failed(self, verdicts: tuple[Verdict, ...]) -> bool:
        """Some gate failed, and every failed one is time-based (worth a fresh measurement)."""
        failed = [v.gate for v in verdicts if v.status is Status.FAIL]
        return bool(failed) and all(gate.startswith(self.time_gates) for gate in failed)


def judge(
    m: Measurement,
    baseline: Baseline | None,
    expectations: Expectations,
    tolerances: Tolerances,
    *,
    judge_disturbed: bool = False,
) -> tuple[Verdict, ...]:
    """Every built-in gate's verdict for ``m`` (:class:`Judge` with the session's defaults but
    ``tolerances`` and ``judge_disturbed``)."""
    policy = Policy(tolerances, judge_disturbed=judge_disturbed)
    return Judge(policy, baseline, expectations)(m)
