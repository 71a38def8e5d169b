"""A case's runner deadlines from what its baseline knows of its executions.

Apart from :mod:`pytest_sme2.run.deadline`, which holds the numbers a measurement is handed: a
device and a measurement know nothing of baselines, the judgement stage reads them.
"""

from __future__ import annotations

from pytest_sme2.judge.baseline import Baseline
from pytest_sme2.run.deadline import (
    EMULATED_INSTRUCTIONS_PER_S,
    EMULATED_MARGIN_S,
    NATIVE_MARGIN_S,
    Deadline,
)
from pytest_sme2.run.devices.base import DeviceInfo


def case_deadline(baseline: Baseline | None, device: DeviceInfo, fixed_s: float | None) -> Deadline:
    """The deadline of a case's runner calls on ``device``, from its baseline.

    A device whose time means something is judged by its own machine class's latencies (another
    class's phone may be five times slower). Under emulation time is recorded nowhere, but the
    guest's instructions per inference are, exactly, and qemu's speed has a floor.
    """
    if baseline is None:
        return Deadline(fixed_s)
    if device.time_meaningful:
        record = baseline.record_for(device)
        if record is None:
            return Deadline(fixed_s)
        # the reference workload runs under the same deadline in every round
        slowest_ms = max(
            max((times.latency.max_ms, *times.latency.reference_samples_ms))
            for times in record.variants.values()
        )
        return Deadline(fixed_s, slowest_ms / 1000, NATIVE_MARGIN_S)
    counts = [v.instructions for v in baseline.variants.values() if v.instructions]
    if not counts:
        return Deadline(fixed_s, margin_s=EMULATED_MARGIN_S)
    return Deadline(fixed_s, max(counts) / EMULATED_INSTRUCTIONS_PER_S, EMULATED_MARGIN_S)
