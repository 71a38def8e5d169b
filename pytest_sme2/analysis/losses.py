"""SME2 losses: the operators that cost more with SME2 on than off, in one measurement. Pure
functions over the two variants' profiles (and, on a timing device, their traced runs).

Why: a case's speedup floor judges the whole inference, and an operator that SME2 slows down
hides behind the others' gains. XNNPACK's packed SME2 GEMMs ran 1.4–3× slower than its NEON ones
at one row (M = 1) on a Dimensity 9500 (google/XNNPACK #10719): exactly such an operator.

Operator kinds are matched across the variants as every per-operator comparison matches them
(:func:`pytest_sme2.analysis.profile.per_run_by_kind`: ``PF32`` = ``F32``). A kind present on one
side only is not a loss: a different graph is the structure gates' subject.

Two costs, by what the device's numbers are:

* **instructions per run** (emulated devices): exact and repeatable, so compared directly;
* **milliseconds per run** (timing devices): each traced run's time in the operator kind, compared
  conservatively: a loss only where *every* SME2-on run was slower than *every* SME2-off run by
  more than the tolerance; the fastest runs give the ratio shown. A neighbour that slows some runs
  cannot make a loss; one that slows a whole variant's traced run (one runner process per
  variant, back to back) is the judge's to refuse (a disturbed measurement is not judged, a time
  failure is confirmed by fresh measurements).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pytest_sme2.analysis.categories import is_leaf
from pytest_sme2.analysis.kernels import is_kernel
from pytest_sme2.analysis.ops import parse_op_name
from pytest_sme2.analysis.profile import Profile, by_unpacked_kind
from pytest_sme2.analysis.trace import Run

#: How much dearer (%) an operator may be with SME2 on than off before the gate fails the case.
#: Instructions are exact under emulation, so any excess is real; 10 % leaves room for what SME2
#: legitimately adds around a faster kernel (packing the left-hand side) in an operator that
#: gains little, and still fails the losses that matter: #10719's M = 1 GEMMs were 40 % to 3×
#: dearer.
LOSS_TOLERANCE_PERCENT = 10.0
#: Instructions per run (SME2 on) below which an operator kind is not judged. An XNNPACK operator
#: costs about 300 instructions whatever its kernel (the backend's dispatch 180–250, the runtime's
#: invoke 30–70, the thread pool's 40–75; qemu-sme2, ExecuTorch 1.5.1), and tiny ones differ by
#: that overhead more than by their kernels: toy_cnn's 500–1,100-instruction fully connected
#: layers are 6–22 % dearer with SME2, a Linear(4, 2) at one row 384 vs 293 instructions. At
#: 10,000 the overhead moves a ratio by at most 3 %.
MIN_INSTRUCTIONS = 10_000
#: Milliseconds per run below which an operator kind is not judged on a timing device: XNNPACK
#: floors each operator's time to whole microseconds, 2 % of 50 µs.
MIN_MS = 0.05
#: Traced runs each variant needs before time is compared: fewer cannot show that every run of
#: one variant was slower than every run of the other by chance of a neighbour.
MIN_TIMED_RUNS = 3
INSTRUCTIONS_UNIT = "instructions"
MS_UNIT = "ms"
#: How many kernels a loss names per side (most instructions first).
KERNELS_NAMED = 2


@dataclass(frozen=True)
class OperatorLoss:
    """One operator kind that cost more with SME2 on than off.

    ``on`` and ``off`` are its cost per run (instructions, or the fastest run's milliseconds);
    ``kernels_on`` / ``kernels_off`` the kernels that ran in it, most instructions first, where
    the device shows them (empty elsewhere).
    """

    operator: str
    on: float
    off: float
    unit: str
    kernels_on: tuple[str, ...] = ()
    kernels_off: tuple[str, ...] = ()

    @property
    def ratio(self) -> float:
        """on ÷ off: how many times dearer SME2 made it (> 1 for a loss)."""
        return self.on / self.off if self.off else float("inf")

    def cost(self, value: float) -> str:
        """``value`` (``on`` or ``off``) as a reader reads it, with its unit."""
        if self.unit == INSTRUCTIONS_UNIT:
            return f"{value:,.0f} instructions"
        return f"{value:.3f} ms"

    def sentence(self) -> str:
        """``<operator> costs <on> with SME2 on vs <off> off (×r) [kernels]``."""
        kernels = ""
        if self.kernels_on or self.kernels_off:
            kernels = (
                f" [on: {', '.join(self.kernels_on) or 'no named kernel'}; "
                f"off: {', '.join(self.kernels_off) or 'no named kernel'}]"
            )
        return (
            f"{self.operator} costs {self.cost(self.on)} per run with SME2 on vs "
            f"{self.cost(self.off)} off (×{self.ratio:.2f}){kernels}"
        )


def names_by_kind(names: Iterable[str]) -> dict[str, str]:
    """Unpacked kind → the operator names of it (joined), as a reader finds them in the tables."""
    found: dict[str, list[str]] = {}
    for name in names:
        found.setdefault(parse_op_name(name).unpacked_key, []).append(name)
    return {key: " + ".join(sorted(group)) for key, group in found.items()}


def kernels_of_kinds(
    functions_by_kind: Mapping[str, Mapping[str, int]],
) -> dict[str, tuple[str, ...]]:
    """Unpacked kind → its kernels (microkernels and packing routines), most instructions first,
    at most :data:`KERNELS_NAMED`; from ``kernels.kernels_by_kind``'s functions per kind."""
    summed: dict[str, dict[str, int]] = {}
    for kind, functions in functions_by_kind.items():
        into = summed.setdefault(parse_op_name(kind).unpacked_key, {})
        for name, count in functions.items():
            if is_kernel(name):
                into[name] = into.get(name, 0) + count
    return {
        key: tuple(sorted(kernels, key=lambda n: -kernels[n])[:KERNELS_NAMED])
        for key, kernels in summed.items()
    }


def instructions_per_run(prof: Profile) -> dict[str, float]:
    """Operator name → instructions per run of an instruction-counted profile (its "ms" are
    millions of instructions)."""
    return {op.name: op.per_run_ms * 1e6 for op in prof.operators}


def instruction_losses(
    on: Mapping[str, float],
    off: Mapping[str, float],
    tolerance_percent: float,
    kernels_on: Mapping[str, tuple[str, ...]] | None = None,
    kernels_off: Mapping[str, tuple[str, ...]] | None = None,
) -> tuple[OperatorLoss, ...]:
    """The operator kinds whose instructions per run with SME2 on (``on``: operator name →
    instructions per run, as :func:`instructions_per_run` gives or a baseline stores) exceed
    SME2-off's by more than ``tolerance_percent``, the dearest first; kinds under
    :data:`MIN_INSTRUCTIONS` with SME2 on are not judged. ``kernels_*``: :func:`kernels_of_kinds`
    of each variant, where the device shows them."""
    on_cost, off_cost = by_unpacked_kind(on.items()), by_unpacked_kind(off.items())
    names = names_by_kind(on)
    losses = [
        OperatorLoss(
            names[key],
            round(cost),
            round(off_cost[key]),
            INSTRUCTIONS_UNIT,
            (kernels_on or {}).get(key, ()),
            (kernels_off or {}).get(key, ()),
        )
        for key, cost in on_cost.items()
        if key in off_cost
        and cost >= MIN_INSTRUCTIONS
        and cost > off_cost[key] * (1 + tolerance_percent / 100)
    ]
    return tuple(sorted(losses, key=lambda loss: -loss.ratio))


def run_times_by_kind(runs: Sequence[Run]) -> dict[str, tuple[float, ...]]:
    """Unpacked kind → its milliseconds in each of ``runs`` (0 in a run it did not occur in),
    matched as the profiles match operators."""
    times: dict[str, list[float]] = {}
    for index, run in enumerate(runs):
        for event in run.events:
            if not is_leaf(event.name):
                continue
            per_run = times.setdefault(parse_op_name(event.name).unpacked_key, [0.0] * len(runs))
            per_run[index] += event.duration_ms
    return {key: tuple(values) for key, values in times.items()}


def time_losses(
    on_runs: Mapping[str, Sequence[float]],
    off_runs: Mapping[str, Sequence[float]],
    tolerance_percent: float,
    names: Mapping[str, str] | None = None,
) -> tuple[OperatorLoss, ...]:
    """The operator kinds every one of whose SME2-on runs took longer than every one of its
    SME2-off runs by more than ``tolerance_percent`` (:func:`run_times_by_kind` of each variant's
    kept traced runs), the dearest first, costed by each side's fastest run. Kinds faster than
    :data:`MIN_MS` on both sides are not judged; ``names`` (unpacked kind → shown name) defaults
    to the kind."""
    losses = [
        OperatorLoss((names or {}).get(key, key), min(on), min(off_runs[key]), MS_UNIT)
        for key, on in on_runs.items()
        if key in off_runs
        and min(on) >= MIN_MS
        and min(on) > max(off_runs[key]) * (1 + tolerance_percent / 100)
    ]
    return tuple(sorted(losses, key=lambda loss: -loss.ratio))
