"""The SME2 speedup (SME2-off ÷ SME2-on E2E latency), as one spec: at least the marker's floor
(``speedup-floor``) and, stored in the machine class's time record, not worse than the stored
speedup beyond its tolerance (``speedup-baseline``). Either fails only when the bootstrap 95 %
interval lies wholly beyond it: one noisy median never moves it, a real change of the kernels does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from pytest_sme2.analysis.stats import Ratio
from pytest_sme2.judge.baseline_model import SpeedupBaseline, TimeRecord
from pytest_sme2.judge.gate import Judging
from pytest_sme2.judge.moves import Move, Tolerances, stable
from pytest_sme2.judge.wording import RECORD_IT, case_name
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status, Verdict


def speedup_baseline(s: Ratio) -> SpeedupBaseline:
    """A measured speedup and its interval as a baseline stores them."""
    return SpeedupBaseline(stable(s.value), stable(s.low), stable(s.high))


def speedup_move(now: SpeedupBaseline, stored: SpeedupBaseline, tol: Tolerances) -> Move:
    """Moved when the new 95 % interval lies wholly beyond ``speedup_percent`` of the stored
    speedup."""
    limit = tol.speedup_percent / 100
    if now.high < stored.value * (1 - limit):
        return Move.FELL
    if now.low > stored.value * (1 + limit):
        return Move.ROSE
    return Move.WITHIN


class Speedup:
    """The spec of a machine class's SME2 speedup, and the marker's floor."""

    name = "speedup"
    wall_clock = True
    schema: Mapping[str, Any] = {
        "speedup": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "required": ["value", "low", "high"],
                    "additionalProperties": False,
                    "properties": {
                        "value": {"$ref": "#/$defs/positive"},
                        "low": {"$ref": "#/$defs/positive"},
                        "high": {"$ref": "#/$defs/positive"},
                    },
                },
            ]
        }
    }
    required = ()

    def measured(self, m: Measurement) -> dict[str, Any]:
        comparison = m.comparison
        return {"speedup": speedup_baseline(comparison.speedup) if comparison else None}

    def to_json(self, record: TimeRecord) -> dict[str, Any]:
        return {"speedup": None if record.speedup is None else asdict(record.speedup)}

    def from_json(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        speedup = doc.get("speedup")
        return {"speedup": SpeedupBaseline(**speedup) if speedup else None}

    def merge(
        self, old: TimeRecord, new: TimeRecord, tol: Tolerances
    ) -> tuple[dict[str, Any], list[str]]:
        before, after = old.speedup, new.speedup
        if after is None or before is None:
            lines = (
                []
                if after == before
                else [f"speedup {before and before.value} → {after and after.value}"]
            )
            return {"speedup": after}, lines
        if speedup_move(after, before, tol):
            return {"speedup": after}, [f"speedup {before.value}× → {after.value}×"]
        return {"speedup": before}, []

    def check(self, judging: Judging) -> list[Verdict]:
        m, exp, record = judging.measurement, judging.expectations, judging.record
        comparison = m.comparison
        floor = exp.speedup_floor_at(m.threads)
        if comparison is None or not m.device.time_meaningful:
            if floor is None and (record is None or record.speedup is None):
                return []
            reason = m.device.limits.get(
                "speedup", f"{m.device.name} cannot measure an SME2 speedup"
            )
            return [Verdict(self.name, Status.SKIP, reason)]
        s = comparison.speedup
        verdicts = []
        if floor is not None:
            at = f" at {m.threads} threads" if isinstance(exp.speedup_floor, Mapping) else ""
            if s.high < floor:
                message = f"SME2 speedup {s.describe()} is below the floor {floor:g}×{at} for "
                verdicts.append(Verdict("speedup-floor", Status.FAIL, message + case_name(m)))
            else:
                message = f"SME2 speedup {s.describe()} ≥ floor {floor:g}×{at}"
                verdicts.append(Verdict("speedup-floor", Status.PASS, message))
        if record is not None and record.speedup is not None:
            verdicts.append(_against_baseline(m, s, record.speedup, judging.tolerances))
        return verdicts


def _against_baseline(
    m: Measurement, s: Ratio, stored: SpeedupBaseline, tol: Tolerances
) -> Verdict:
    move = speedup_move(speedup_baseline(s), stored, tol)
    beyond = f" beyond the {tol.speedup_percent:g}% tolerance"
    message = {
        Move.FELL: f"SME2 speedup {s.describe()} fell below the baseline {stored.value:g}×"
        f"{beyond} for {case_name(m)}",
        Move.WITHIN: f"SME2 speedup {s.value:.2f}× vs baseline {stored.value:g}×",
        Move.ROSE: f"SME2 speedup {s.describe()} rose above the baseline {stored.value:g}×"
        f"{beyond}: {RECORD_IT}",
    }[move]
    return Verdict("speedup-baseline", Status.FAIL if move is Move.FELL else Status.PASS, message)


SPEEDUP = Speedup()
