"""What a gate says: a Verdict (pass, fail or skip, with a reviewer's sentence), and the pieces
every gate module shares to say it — the case's name in a sentence, the advice to record a
better value, one variant's category shares against the stored ones."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_sme2.judge.baseline import Tolerances, moved_shares
from pytest_sme2.run.devices.base import Variant
from pytest_sme2.run.measurement import Measurement


class Status(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class Verdict:
    gate: str
    status: Status
    message: str
    details: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "gate": self.gate,
            "status": self.status.value,
            "message": self.message,
            "details": list(self.details),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        return cls(data["gate"], Status(data["status"]), data["message"], tuple(data["details"]))


def case_name(m: Measurement) -> str:
    threads = "" if m.threads == 1 else f", {m.threads} threads"
    return f"{m.model}[{m.dtype}] on {m.device.name}{threads}"


RECORD_IT = "record it with --sme2-update-baselines"


def shares_verdict(
    m: Measurement,
    variant: Variant,
    shares: Mapping[str, float],
    stored: Mapping[str, float],
    tol: Tolerances,
    word: str,
    gate: str,
) -> Verdict:
    """One variant's category shares (of time, or of instructions: ``word``) against the
    stored ones, each by :func:`share_move`; the moved ones listed."""
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
