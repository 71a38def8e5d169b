"""E2E latency, as a spec of the time record: each variant's timing-only latencies (and the
reference workload's beside them) stored per machine class, judged against the same class's
only (``latency[variant]``), and the class's calibration, which sets its tolerance.

The gate fails when the fastest run, relative to the reference workload's fastest run in the same
rounds, rose from the stored one by more than the record's tolerance (default 3 %, or calibrated:
``TimeRecord.latency_percent``; ``LatencyBaseline.change_from`` says why); what else changed on
the machine since the record (its notes) is said alongside.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from pytest_sme2.analysis.stats import LatencyStats
from pytest_sme2.judge.baseline_model import (
    Calibration,
    LatencyBaseline,
    TimeRecord,
    VariantTimes,
    notes_diff,
)
from pytest_sme2.judge.gate import Judging
from pytest_sme2.judge.moves import Move, Tolerances, relative_move, stable
from pytest_sme2.judge.wording import RECORD_IT, case_name
from pytest_sme2.records.measurement import Measurement, VariantMeasurement
from pytest_sme2.records.verdict import Status, Verdict


def latency_baseline(samples: Sequence[float], reference: Sequence[float]) -> LatencyBaseline:
    """Latency samples (and the reference workload's beside them) as a baseline stores them."""
    lat = LatencyStats.of(samples)
    return LatencyBaseline(
        median_ms=stable(lat.median_ms),
        mean_ms=stable(lat.mean_ms),
        min_ms=stable(lat.min_ms),
        max_ms=stable(lat.max_ms),
        std_ms=stable(lat.std_ms),
        samples_ms=tuple(stable(s) for s in samples),
        reference_samples_ms=tuple(stable(s) for s in reference),
    )


def latency_move(now: LatencyBaseline, stored: LatencyBaseline, percent: float) -> Move:
    """The fastest run relative to the machine's speed, against the stored one, beyond
    ``percent`` (the record's tolerance): a rise fails the gate, a fall is the new floor."""
    return relative_move(now.change_from(stored), 1.0, percent)


class Latency:
    """The spec of a variant's E2E latency in its machine class's record."""

    name = "latency"
    wall_clock = True
    schema: Mapping[str, Any] = {
        "latency": {
            "type": "object",
            "required": ["median_ms", "mean_ms", "min_ms", "max_ms", "std_ms", "samples_ms"],
            "additionalProperties": False,
            "properties": {
                "median_ms": {"$ref": "#/$defs/positive"},
                "mean_ms": {"$ref": "#/$defs/positive"},
                "min_ms": {"$ref": "#/$defs/positive"},
                "max_ms": {"$ref": "#/$defs/positive"},
                "std_ms": {"$ref": "#/$defs/non_negative"},
                "samples_ms": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"$ref": "#/$defs/positive"},
                },
                "reference_samples_ms": {"type": "array", "items": {"$ref": "#/$defs/positive"}},
            },
        }
    }
    required = ("latency",)

    def measured(self, m: Measurement, vm: VariantMeasurement, counts: bool) -> dict[str, Any]:
        return {"latency": latency_baseline(vm.latencies_ms, m.reference_ms)}

    def to_json(self, part: VariantTimes) -> dict[str, Any]:
        return {"latency": asdict(part.latency)}

    def from_json(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        lat = doc["latency"]
        samples = {
            "samples_ms": tuple(lat["samples_ms"]),
            "reference_samples_ms": tuple(lat.get("reference_samples_ms", ())),
        }
        return {"latency": LatencyBaseline(**{**lat, **samples})}

    def merge(
        self, old: VariantTimes, new: VariantTimes, tol: Tolerances
    ) -> tuple[dict[str, Any], list[str]]:
        """The stored latency until the new one moved beyond the record's tolerance (``tol`` as
        the record judges: its calibration applied)."""
        if not latency_move(new.latency, old.latency, tol.latency_percent):
            return {"latency": old.latency}, []
        line = (
            f"fastest run {old.latency.min_ms} → {new.latency.min_ms} ms "
            f"(median {old.latency.median_ms} → {new.latency.median_ms} ms)"
        )
        return {"latency": new.latency}, [line]

    def check(self, judging: Judging) -> list[Verdict]:
        # Same machine class, so judged; what else changed since the record is said alongside.
        record, measured = judging.record, judging.measured_record
        if record is None or measured is None:
            return []
        m = judging.measurement
        noted = tuple(
            f"since recorded: {line}" for line in notes_diff(record.notes, m.device.notes)
        )
        percent = record.latency_percent(judging.tolerances)
        return [
            _verdict(
                m,
                str(variant),
                len(vm.latencies_ms),
                measured.variants[variant].latency,
                stored.latency,
                percent,
                noted,
            )
            for variant, vm in m.variants.items()
            if (stored := record.variants.get(variant)) is not None
        ]


def _verdict(
    m: Measurement,
    variant: str,
    runs: int,
    measured: LatencyBaseline,
    stored: LatencyBaseline,
    percent: float,
    noted: tuple[str, ...],
) -> Verdict:
    """One variant's latency of ``runs`` timing-only runs against the stored one."""
    change = measured.change_from(stored)
    numbers = (
        f"fastest of {runs} runs {measured.min_ms:g} ms vs baseline "
        f"{stored.min_ms:g} ms; median {measured.median_ms:g} ms vs "
        f"{stored.median_ms:g} ms"
    )
    relative = None not in (measured.relative_fastest, stored.relative_fastest)
    if relative:
        numbers += (
            f"; reference workload's fastest {min(measured.reference_samples_ms):g} ms vs "
            f"{min(stored.reference_samples_ms):g} ms"
        )
    what = "relative to the machine's speed" if relative else "in raw time (no reference timed)"
    move = latency_move(measured, stored, percent)
    beyond = f"beyond the {percent:g}% tolerance"
    gate = f"latency[{variant}]"
    if move is Move.ROSE:
        message = (
            f"E2E latency of {case_name(m)} ({variant}) rose {100 * (change - 1):.1f}% {what} "
            f"({numbers}), {beyond}"
        )
        return Verdict(gate, Status.FAIL, message, noted)
    faster = f", faster {beyond}: {RECORD_IT}" if move is Move.FELL else ""
    message = f"E2E latency {change:.3f}× the baseline {what} ({numbers}){faster}"
    return Verdict(gate, Status.PASS, message, noted)


class CalibrationPart:
    """The spec of a record's calibration (``--sme2-calibrate``): written only by a calibration,
    kept as it is by every update (:mod:`pytest_sme2.judge.calibration`)."""

    name = "calibration"
    schema: Mapping[str, Any] = {
        "calibration": {
            "description": "how the class's noise was measured when its tolerance was set",
            "type": "object",
            "required": ["runs", "noise_percent", "tolerance_percent", "statistic", "when"],
            "additionalProperties": False,
            "properties": {
                "runs": {"type": "integer", "minimum": 2},
                "noise_percent": {"$ref": "#/$defs/non_negative"},
                "tolerance_percent": {"$ref": "#/$defs/positive"},
                "statistic": {"type": "string", "minLength": 1},
                "when": {"type": "string", "minLength": 1},
            },
        }
    }
    required = ()

    def measured(self, m: Measurement) -> dict[str, Any]:
        return {"calibration": None}

    def to_json(self, record: TimeRecord) -> dict[str, Any]:
        """Only where calibrated: uncalibrated records keep the shape they always had."""
        cal = record.calibration
        return {} if cal is None else {"calibration": asdict(cal)}

    def from_json(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        cal = doc.get("calibration")
        return {"calibration": Calibration(**cal) if cal else None}

    def merge(
        self, old: TimeRecord, new: TimeRecord, tol: Tolerances
    ) -> tuple[dict[str, Any], list[str]]:
        return {"calibration": old.calibration}, []


LATENCY = Latency()
CALIBRATION = CalibrationPart()
