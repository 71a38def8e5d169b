"""Trace → Profile, and a pair of variants → Comparison. Pure functions over data.

Two rules the reference workflow got wrong are enforced here:

* E2E latency of a run is its ``Method::execute`` duration, never a sum of rows — events nest
  (``Method::execute`` ⊃ ``DELEGATE_CALL`` ⊃ XNNPACK ops;
  ``OPERATOR_CALL`` ⊃ ``native_call_*``), so a
  sum counts the same time three or four times.
* Only leaf events (XNNPACK operators and ``native_call_*`` kernels) are classified, and **Other is
  the residual**: E2E − (Convolution + GEMM + Data Movement + Elementwise). The five categories
  therefore add up to E2E exactly; delegate-call overhead and operator dispatch land in Other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_sme2.analysis.categories import CATEGORIES, Classifier
from pytest_sme2.analysis.ops import parse_op_name
from pytest_sme2.analysis.stats import LatencyStats, Ratio, median_ratio
from pytest_sme2.analysis.trace import Event, Run, Trace
from pytest_sme2.errors import TraceError

XNNPACK_BACKEND = "XnnpackBackend"
NON_DELEGATED = "non-delegated"
OTHER = "Other"
NAMED_CATEGORIES = tuple(c for c in CATEGORIES if c != OTHER)
DELEGATE_CALL = "DELEGATE_CALL"
OPERATOR_CALL = "OPERATOR_CALL"
MILLISECONDS = "ms"
#: the unit of a profile of an instruction-timed trace (:mod:`pytest_sme2.analysis.attribution`):
#: its "ns" are instructions, so its "ms" are millions of instructions
INSTRUCTIONS = "M instr"


@dataclass(frozen=True)
class OperatorStat:
    """One operator kind (event name without ``#n``) over the kept runs of a trace."""

    name: str
    category: str
    subcategory: str
    count: int
    total_ms: float
    mean_ms: float
    per_run_ms: float
    share: float
    delegated: bool
    packed: bool
    backend: str = NON_DELEGATED


@dataclass(frozen=True)
class Profile:
    """What one variant's traced runs show: E2E per run, where the time went, by operator.

    ``categories_ms`` and ``subcategories_ms`` are mean milliseconds per run; the five categories
    sum to ``latency.mean_ms``. ``operators`` is sorted by total time, largest first.

    Every ``*_ms`` value is in ``unit``: milliseconds, or — for a device whose time means nothing
    but which counts instructions (qemu-sme2) — millions of guest instructions
    (:data:`INSTRUCTIONS`), so shares, the Other residual and the top operators follow the same
    rules in both.
    """

    e2e_ms: tuple[float, ...]
    warmup: int
    latency: LatencyStats
    categories_ms: Mapping[str, float]
    subcategories_ms: Mapping[str, float]
    operators: tuple[OperatorStat, ...]
    delegated_ms: float
    non_delegated_ms: float
    #: ``DELEGATE_CALL``s per kept run: more than one means a split graph
    delegate_calls_per_run: float = 0.0
    #: delegate call instruction id → backend name, from the ETRecord when one was given
    backends: Mapping[int, str] = field(default_factory=dict)
    unit: str = MILLISECONDS

    @property
    def counts_instructions(self) -> bool:
        return self.unit == INSTRUCTIONS

    @property
    def runs(self) -> int:
        return len(self.e2e_ms)

    @property
    def shares(self) -> dict[str, float]:
        """Each category's share of mean E2E, as a fraction (0–1)."""
        mean = self.latency.mean_ms
        return {c: (v / mean if mean else 0.0) for c, v in self.categories_ms.items()}

    @property
    def packed_operators(self) -> tuple[str, ...]:
        """Operator kinds whose datatype is a packed SME type (PF32, PF16, PQS8, …)."""
        return tuple(sorted(op.name for op in self.operators if op.packed))

    def top_operators(self, n: int = 10) -> tuple[OperatorStat, ...]:
        return self.operators[:n]

    def to_json(self) -> dict[str, Any]:
        """The one JSON form of a profile (``sme2 analyze --json``, the case record): stable keys
        other tools can rely on, and every field, so :meth:`from_json` gives back an equal
        Profile. ``shares`` is derived, for readers.

        Keys name their unit: ``*_ms`` in milliseconds, ``*_minstr`` (millions of instructions)
        for an instruction-timed profile — a reader that takes every ``_ms`` for time (the
        reference kit's tools, a spreadsheet) is never shown instructions as milliseconds."""
        data = {
            "runs": self.runs,
            "warmup": self.warmup,
            "unit": self.unit,
            "e2e_ms": list(self.e2e_ms),
            "latency": asdict(self.latency),
            "categories_ms": dict(self.categories_ms),
            "shares": self.shares,
            "subcategories_ms": dict(self.subcategories_ms),
            "delegated_ms": self.delegated_ms,
            "non_delegated_ms": self.non_delegated_ms,
            "delegate_calls_per_run": self.delegate_calls_per_run,
            "backends": {str(k): v for k, v in self.backends.items()},
            "operators": [asdict(op) for op in self.operators],
        }
        return _suffixed(data, MS_SUFFIX, unit_suffix(self.unit))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Profile:
        suffix = unit_suffix(data["unit"])
        if f"e2e{suffix}" in data:  # a record of an older pytest-sme2 has "_ms" for every unit
            data = _suffixed(data, suffix, MS_SUFFIX)
        return cls(
            e2e_ms=tuple(data["e2e_ms"]),
            warmup=data["warmup"],
            latency=LatencyStats(**data["latency"]),
            categories_ms=dict(data["categories_ms"]),
            subcategories_ms=dict(data["subcategories_ms"]),
            operators=tuple(OperatorStat(**op) for op in data["operators"]),
            delegated_ms=data["delegated_ms"],
            non_delegated_ms=data["non_delegated_ms"],
            delegate_calls_per_run=data["delegate_calls_per_run"],
            backends={int(k): v for k, v in data["backends"].items()},
            unit=data["unit"],
        )


MS_SUFFIX = "_ms"
#: the key suffix of a quantity in millions of instructions (:data:`INSTRUCTIONS`)
MINSTR_SUFFIX = "_minstr"


def unit_suffix(unit: str) -> str:
    """The key/column suffix that names ``unit``: ``_ms``, or ``_minstr`` for instructions."""
    return MINSTR_SUFFIX if unit == INSTRUCTIONS else MS_SUFFIX


def _suffixed(data: Any, old: str, new: str) -> Any:
    """``data`` with every mapping key ending in ``old`` ending in ``new`` instead (nested)."""
    if old == new:
        return data
    if isinstance(data, Mapping):
        return {
            (k.removesuffix(old) + new if k.endswith(old) else k): _suffixed(v, old, new)
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [_suffixed(v, old, new) for v in data]
    return data


def event_backend(event: Event, backends: Mapping[int, str] | None = None) -> str:
    """The backend that ran ``event``: the ETRecord's name for its delegate call where known;
    else ``XnnpackBackend`` for XNNPACK-style names (only XNNPACK's profiler writes them),
    ``delegated`` for other delegate events, and ``non-delegated`` for everything else."""
    if not event.delegated:
        return NON_DELEGATED
    if backends and event.instruction_id in backends:
        return backends[event.instruction_id]
    return XNNPACK_BACKEND if parse_op_name(event.name).source == "xnnpack" else "delegated"


def profile(
    trace: Trace,
    *,
    warmup: int = 0,
    classifier: Classifier | None = None,
    backends: Mapping[int, str] | None = None,
    unit: str = MILLISECONDS,
) -> Profile:
    """Summarise ``trace`` dropping its first ``warmup`` runs (cold: allocation, weight packing).

    ``backends`` (``pytest_sme2.analysis.etrecord.delegate_backends``) names delegated operators'
    backend. ``unit`` says what the trace's times are: :data:`INSTRUCTIONS` for an instruction-timed
    one.
    """
    kept = trace.runs[warmup:]
    if not kept:
        raise TraceError(
            trace.path or "<etdump>",
            f"has {len(trace.runs)} run(s); nothing left after dropping {warmup} warm-up run(s)",
        )
    n = len(kept)
    tally = _tally(kept, classifier or Classifier(), backends)
    e2e = tuple(run.e2e_ms for run in kept)
    mean_e2e = sum(e2e) / n
    operators, named_ms, sub_ms = _operators(tally.ops, n, mean_e2e)
    categories = {c: named_ms.get(c, 0.0) for c in NAMED_CATEGORIES}
    categories[OTHER] = mean_e2e - sum(categories.values())
    return Profile(
        e2e_ms=e2e,
        warmup=warmup,
        latency=LatencyStats.of(e2e),
        categories_ms={c: categories[c] for c in CATEGORIES},
        subcategories_ms=dict(sorted(sub_ms.items())),
        operators=tuple(operators),
        delegated_ms=tally.delegated_ms / n,
        non_delegated_ms=tally.non_delegated_ms / n,
        delegate_calls_per_run=tally.delegate_calls / n,
        backends=dict(backends or {}),
        unit=unit,
    )


@dataclass(frozen=True)
class _Tally:
    """What one pass over a trace's events sums: per operator kind, an accumulator
    ``[count, total_ms, backend, category, sub, packed]``; the delegate and operator calls' time."""

    ops: dict[str, list]
    delegated_ms: float
    non_delegated_ms: float
    delegate_calls: int


def _tally(
    runs: Sequence[Run], classifier: Classifier, backends: Mapping[int, str] | None
) -> _Tally:
    """Sum ``runs``' events by operator kind. Each distinct name is classified once: a trace
    repeats a few hundred names ~10^5 times."""
    ops: dict[str, list] = {}
    entry_of: dict[str, list | None] = {}
    delegated_ms = non_delegated_ms = 0.0
    delegate_calls = 0
    for run in runs:
        for event in run.events:
            name = event.name
            try:
                entry = entry_of[name]
            except KeyError:
                backend = event_backend(event, backends)
                entry = entry_of[name] = _entry(name, backend, classifier, ops)
            ms = (event.end_ns - event.start_ns) / 1e6
            if entry is not None:
                entry[0] += 1
                entry[1] += ms
            elif name == DELEGATE_CALL:
                delegated_ms += ms
                delegate_calls += 1
            elif name == OPERATOR_CALL:
                non_delegated_ms += ms
    return _Tally(ops, delegated_ms, non_delegated_ms, delegate_calls)


def _operators(
    ops: Mapping[str, list], n: int, mean_e2e: float
) -> tuple[list[OperatorStat], dict[str, float], dict[str, float]]:
    """Each operator kind's statistics over ``n`` runs, slowest first, and the time per run of
    each named category and subcategory they add up to."""
    named_ms = dict.fromkeys(NAMED_CATEGORIES, 0.0)
    sub_ms: dict[str, float] = {}
    operators = []
    for key, (count, total, backend, category, sub, packed) in ops.items():
        if category != OTHER:
            named_ms[category] += total / n
        sub_key = f"{category}/{sub}"
        sub_ms[sub_key] = sub_ms.get(sub_key, 0.0) + total / n
        operators.append(
            OperatorStat(
                name=key,
                category=category,
                subcategory=sub,
                count=count,
                total_ms=total,
                mean_ms=total / count,
                per_run_ms=total / n,
                share=(total / n) / mean_e2e if mean_e2e else 0.0,
                delegated=backend != NON_DELEGATED,
                packed=packed,
                backend=backend,
            )
        )
    operators.sort(key=lambda op: (-op.total_ms, op.name))
    return operators, named_ms, sub_ms


def _entry(name: str, backend: str, classifier: Classifier, ops: dict[str, list]) -> list | None:
    """The accumulator of ``name``'s operator kind (created on first sight), None if not a leaf."""
    if not classifier.is_leaf(name):
        return None
    parsed = parse_op_name(name)
    entry = ops.get(parsed.key)
    if entry is None:
        category, sub = classifier.classify(name), classifier.subcategory(name)
        entry = ops[parsed.key] = [0, 0.0, backend, category, sub, parsed.packed]
    return entry


def by_unpacked_kind(per_name: Iterable[tuple[str, float]]) -> dict[str, float]:
    """(operator name, value) pairs summed by ``OpName.unpacked_key``: how SME2-on and SME2-off
    operators are matched. SME2-on renames ``F32`` to ``PF32``, and those renamed operators are
    exactly the ones SME2 changes, so the same graph node must meet its other variant under one
    key (several names of one kind, ``F16`` and ``PF16`` layers beside each other, are summed)."""
    kinds: dict[str, float] = {}
    for name, value in per_name:
        key = parse_op_name(name).unpacked_key
        kinds[key] = kinds.get(key, 0.0) + value
    return kinds


def per_run_by_kind(prof: Profile) -> dict[str, float]:
    """Per-run time (or instructions) of each operator kind, matched across variants
    (:func:`by_unpacked_kind`)."""
    return by_unpacked_kind((op.name, op.per_run_ms) for op in prof.operators)


@dataclass(frozen=True)
class Comparison:
    """SME2-off vs SME2-on for one model × dtype on one device.

    ``speedup`` is median(off) / median(on) of the *timing-only* runs (tracing costs 3–10 %), with
    a bootstrap CI paired by round when the runs were interleaved. Category and operator speedups
    come from the traced runs' ``Profile``s.
    """

    on: Profile
    off: Profile
    on_latencies_ms: tuple[float, ...]
    off_latencies_ms: tuple[float, ...]
    speedup: Ratio

    @property
    def category_speedups(self) -> dict[str, float | None]:
        """off ÷ on mean time per category; None where SME2-on spends no time in it."""
        return {
            c: (self.off.categories_ms[c] / on_ms if on_ms > 0 else None)
            for c, on_ms in self.on.categories_ms.items()
        }

    @property
    def operator_speedups(self) -> dict[str, float | None]:
        """off ÷ on per-run time per operator kind present in both variants, keyed by the SME2-off
        name. Kinds are matched on ``OpName.unpacked_key`` (:func:`per_run_by_kind`)."""
        on = per_run_by_kind(self.on)
        speedups: dict[str, float | None] = {}
        for op in self.off.operators:
            on_ms = on.get(parse_op_name(op.name).unpacked_key)
            if on_ms is not None:
                speedups[op.name] = op.per_run_ms / on_ms if on_ms > 0 else None
        return speedups


def compare(
    on: Profile,
    off: Profile,
    *,
    on_latencies_ms: Sequence[float],
    off_latencies_ms: Sequence[float],
    interleaved: bool,
) -> Comparison:
    """Pair two variants' profiles with their timing-only latencies into a Comparison."""
    paired = interleaved and len(on_latencies_ms) == len(off_latencies_ms)
    return Comparison(
        on=on,
        off=off,
        on_latencies_ms=tuple(on_latencies_ms),
        off_latencies_ms=tuple(off_latencies_ms),
        speedup=median_ratio(off_latencies_ms, on_latencies_ms, paired=paired),
    )
