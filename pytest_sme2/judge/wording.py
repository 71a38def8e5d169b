"""The pieces every gate shares to say what it found: the case's name in a sentence, the advice
to record a better value, one variant's category shares against the stored ones (the verdict
itself is a record: :mod:`pytest_sme2.records.verdict`)."""

from __future__ import annotations

from collections.abc import Mapping

from pytest_sme2.judge.baseline import Tolerances, moved_shares
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status, Verdict


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
