"""Category shares (Convolution, GEMM, …) against the stored ones: each moved beyond
``share_points`` percentage points either way fails, listed. The shares of time are a spec of the
time record (``shares[variant]``); the shares of instructions, their deterministic twin where the
device splits its exact count between operators, are judged the same way
(:mod:`pytest_sme2.judge.counted`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_sme2.judge.baseline_model import VariantTimes
from pytest_sme2.judge.gate import Judging
from pytest_sme2.judge.moves import Tolerances, points_move, stable
from pytest_sme2.judge.wording import case_name
from pytest_sme2.records.measurement import Measurement, VariantMeasurement
from pytest_sme2.records.verdict import Status, Verdict


def moved_shares(
    now: Mapping[str, float], stored: Mapping[str, float], tol: Tolerances
) -> list[str]:
    """The categories whose share moved beyond ``share_points``, in ``now``'s order."""
    return [
        c for c, share in now.items() if points_move(share, stored.get(c, 0.0), tol.share_points)
    ]


def shares_verdict(
    judging: Judging,
    gate: str,
    variant: str,
    shares: Mapping[str, float],
    stored: Mapping[str, float],
    word: str,
) -> Verdict:
    """One variant's category shares (of time, or of instructions: ``word``) against the stored
    ones, as ``gate[variant]``; the moved ones listed."""
    m, tol = judging.measurement, judging.tolerances
    moved = [
        f"{cat} {word} {100 * stored.get(cat, 0.0):.1f}% → {100 * shares[cat]:.1f}% "
        f"({100 * (shares[cat] - stored.get(cat, 0.0)):+.1f} points)"
        for cat in moved_shares(shares, stored, tol)
    ]
    name = f"{gate}[{variant}]"
    if moved:
        message = (
            f"category {word}s of {case_name(m)} ({variant}) moved beyond "
            f"±{tol.share_points:g} points"
        )
        return Verdict(name, Status.FAIL, message, tuple(moved))
    return Verdict(name, Status.PASS, f"category {word}s within ±{tol.share_points:g} points")


class TimeShares:
    """The spec of a variant's category shares of time, in its machine class's record."""

    name = "shares"
    wall_clock = True
    schema: Mapping[str, Any] = {"shares": {"$ref": "#/$defs/shares"}}
    required = ("shares",)

    def measured(self, m: Measurement, vm: VariantMeasurement, counts: bool) -> dict[str, Any]:
        return {"shares": {c: stable(s) for c, s in vm.profile.shares.items()}}

    def to_json(self, part: VariantTimes) -> dict[str, Any]:
        return {"shares": dict(part.shares)}

    def from_json(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        return {"shares": dict(doc["shares"])}

    def merge(
        self, old: VariantTimes, new: VariantTimes, tol: Tolerances
    ) -> tuple[dict[str, Any], list[str]]:
        """The stored shares, each category that moved replaced by its new share."""
        shares, lines = dict(old.shares), []
        for cat in moved_shares(new.shares, old.shares, tol):
            lines.append(
                f"{cat} share {100 * old.shares.get(cat, 0.0):.1f}% → {100 * new.shares[cat]:.1f}%"
            )
            shares[cat] = new.shares[cat]
        return {"shares": shares}, lines

    def check(self, judging: Judging) -> list[Verdict]:
        record, measured = judging.record, judging.measured_record
        if record is None or measured is None:
            return []
        m = judging.measurement
        return [
            shares_verdict(
                judging,
                self.name,
                variant,
                measured.variants[variant].shares,
                stored.shares,
                "share",
            )
            for variant in m.variants
            if (stored := record.variants.get(str(variant))) is not None
        ]


SHARES = TimeShares()
