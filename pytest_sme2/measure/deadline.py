"""How long one runner call may take before it is killed as hung: the one place of deadlines
(what a case's baseline knows of its executions comes in through :func:`case_deadline`, called
by :meth:`pytest_sme2.judge.baseline.Baseline.deadline`).

A hang costs CI its whole job and names no case, so every runner call has a deadline
(:func:`pytest_sme2.runner.invoke.run_process`). A fixed deadline must be generous enough for the
slowest model on the slowest device (15 minutes native, an hour emulated), which is also how long
a hung toy model holds the session. What a case's baseline says about its executions gives a
deadline that fits the case: a multiple of its slowest expected execution, plus a margin for
starting the process and loading (and packing) the program. Without a baseline, the device's
generous default applies; ``--sme2-timeout`` overrides both.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Headroom over the expected time of a call's executions: tracing (3–10 %), a neighbour's load
#: on a shared machine (runs seen 52 % slower) and a model grown since its baseline all fit in it.
SLACK = 20.0
#: Start, load and weight packing of a native run (toy_cnn: 0.1 s on the host).
NATIVE_MARGIN_S = 60.0
#: The same under emulation: qemu starts, loads and packs the program in 0.5–1 s here.
EMULATED_MARGIN_S = 120.0
#: The guest's speed under qemu in the slowest kind of call, the counted run, whose execution log
#: slows the guest about tenfold: measured here 4.5–6 M counted instructions per second, start and
#: set-up included (vit_tiny int8 SME2-off: 2 × 31.4 M in 14 s); plain traced runs go 50–100 M/s.
EMULATED_INSTRUCTIONS_PER_S = 4e6


@dataclass(frozen=True)
class Deadline:
    """The deadline of each runner call of one case."""

    #: ``--sme2-timeout``: wins over everything, for every call
    fixed_s: float | None = None
    #: the slowest execution the baseline expects of this case (any variant), in seconds
    execution_s: float | None = None
    margin_s: float = NATIVE_MARGIN_S

    def seconds(self, executions: int) -> float | None:
        """The deadline of a call making ``executions`` executions (warm-up included); None: the
        device's own default, when nothing is known."""
        if self.fixed_s is not None:
            return self.fixed_s
        if self.execution_s is None:
            return None
        return self.margin_s + SLACK * executions * self.execution_s


#: Nothing known and nothing set: each call gets its device's generous default.
DEFAULT_DEADLINE = Deadline()


def case_deadline(
    fixed_s: float | None,
    *,
    time_meaningful: bool,
    slowest_ms: float | None = None,
    instructions: int | None = None,
) -> Deadline:
    """The deadline of a case's runner calls from what its baseline expects of one execution.

    A device whose time means something is judged by its own machine class's slowest run
    (``slowest_ms``: another class's phone may be five times slower). Under emulation time is
    recorded nowhere, but the guest's instructions per inference are, exactly, and qemu's speed
    has a floor (:data:`EMULATED_INSTRUCTIONS_PER_S`). Either unknown: the device's default.
    """
    if time_meaningful:
        if slowest_ms is None:
            return Deadline(fixed_s)
        return Deadline(fixed_s, slowest_ms / 1000, NATIVE_MARGIN_S)
    if instructions is None:
        return Deadline(fixed_s, margin_s=EMULATED_MARGIN_S)
    return Deadline(fixed_s, instructions / EMULATED_INSTRUCTIONS_PER_S, EMULATED_MARGIN_S)
