"""The gates of a multi-threaded case: the gain from 1 to N threads against the marker's floor
(``min_thread_gain={2: 1.5}``), and the emulated thread counts that are not judged.

Why the gain is judged inside the N-thread case, from 1-thread runs timed in the same
measurement (``MeasurePlan.with_one_thread``) rather than from the 1-thread case: a verdict is per
test, and the 1-thread case is another test, maybe on another xdist worker and minutes apart,
on a shared machine whose speed moves by more than the gain being judged. Interleaved in the same
rounds, the two thread counts see the same machine, and their ratio is the model's. Only where a
floor is set: the 1-thread runs double the case's timing. It is a time gate
(``wall_clock``): a failure is confirmed by fresh measurements spread in time, and a
measurement whose runs lost the CPU is not judged (a busy machine takes a core from the pool
first) — never a false red.

On an emulator (qemu-sme2) time means nothing, and a count of guest instructions with a thread
pool includes the pool's spin-wait, which varies run to run: no deterministic per-thread figure
comes out of one exec log without modelling the pool's scheduling, so a multi-threaded
emulated case's instruction gates, and its gain, say "not judged: emulated threads" instead of
flaking. Its 1-thread case is judged as ever.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_sme2.analysis.scaling import thread_gain
from pytest_sme2.judge.gate import Judging
from pytest_sme2.judge.wording import case_name
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status, Verdict

#: The gate of the gain from 1 to N threads.
THREAD_GAIN = "thread-gain"
#: The gate that stands for the instruction gates of a multi-threaded emulated case.
EMULATED_THREADS = "emulated-threads"
#: What the report and the verdicts say of a figure a thread pool under emulation makes.
NOT_JUDGED = "not judged: emulated threads"


class ThreadGain:
    """Each variant's gain from 1 to ``m.threads`` threads against the marker's floor for that
    count (``min_thread_gain``); nothing where it sets none."""

    name = THREAD_GAIN
    wall_clock = True

    def check(self, judging: Judging) -> list[Verdict]:
        m = judging.measurement
        floor = judging.expectations.thread_gain_floor(m.threads)
        if floor is None:
            return []
        if not m.device.time_meaningful:
            reason = (
                f"thread gain of {case_name(m)} {NOT_JUDGED} ({m.device.name}'s time is no signal)"
            )
            return [Verdict(THREAD_GAIN, Status.SKIP, reason)]
        if not m.one_thread_ms:
            reason = (
                f"thread gain of {case_name(m)} not judged: no 1-thread runs were timed with it "
                "(a measurement taken outside sme2_measure)"
            )
            return [Verdict(THREAD_GAIN, Status.SKIP, reason)]
        return [
            _gain_verdict(m, variant, floor, one, m.variants[variant].latencies_ms)
            for variant, one in m.one_thread_ms.items()
            if variant in m.variants
        ]


def _gain_verdict(
    m: Measurement, variant: Variant, floor: float, one: Sequence[float], many: Sequence[float]
) -> Verdict:
    gain = thread_gain(one, many)
    numbers = (
        f"fastest of {len(one)} runs at 1 thread {min(one):g} ms, of {len(many)} at "
        f"{m.threads} threads {min(many):g} ms, timed in the same rounds"
    )
    gate = f"{THREAD_GAIN}[{variant}]"
    if gain < floor:
        message = (
            f"{variant} of {case_name(m)} gains {gain:.2f}× from 1 to {m.threads} threads, below "
            f"the floor {floor:g}× (min_thread_gain)"
        )
        return Verdict(gate, Status.FAIL, message, (numbers,))
    message = f"{variant} gains {gain:.2f}× from 1 to {m.threads} threads ≥ floor {floor:g}×"
    return Verdict(gate, Status.PASS, message, (numbers,))


def without_emulated_counts(
    m: Measurement, verdicts: list[Verdict], count_gates: tuple[str, ...]
) -> list[Verdict]:
    """``verdicts`` without the instruction gates' (those ``count_gates`` begin) where ``m`` is a
    multi-threaded emulated case (:attr:`Measurement.emulated_threads`), and one skip saying why
    in their place."""
    counted = [v for v in verdicts if v.gate.startswith(count_gates)]
    if not m.emulated_threads or not counted:
        return verdicts
    skip = Verdict(
        EMULATED_THREADS,
        Status.SKIP,
        f"instruction gates of {case_name(m)} {NOT_JUDGED}: a thread pool's spin-wait under "
        "emulation varies the count run to run; the 1-thread case judges the instructions",
        (f"not judged: {', '.join(dict.fromkeys(v.gate.split('[')[0] for v in counted))}",),
    )
    return [v for v in verdicts if v not in counted] + [skip]


THREAD_GAIN_GATE = ThreadGain()
