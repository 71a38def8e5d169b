"""``--sme2-update-baselines``: a new measurement merged into the stored baseline, keeping every
value still within tolerance, so ``git diff baselines/`` shows only what really moved.

Apart from :mod:`pytest_sme2.judge.baseline` because it is the update flow's one decision (what to
keep, what to replace, and the line that says so), made by the gates' own "moved" rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pytest_sme2.judge.baseline import (
    Baseline,
    Move,
    TimeRecord,
    Tolerances,
    VariantBaseline,
    VariantTimes,
    init_time_move,
    instruction_ratio_move,
    instructions_move,
    kernel_selection_diff,
    latency_move,
    moved_shares,
    notes_diff,
    peak_rss_move,
    speedup_move,
    structure_diff,
)
from pytest_sme2.records.device import describe_class


def merge(old: Baseline | None, new: Baseline, tol: Tolerances) -> tuple[Baseline, tuple[str, ...]]:
    """``new``, keeping every value still within tolerance ``tol`` of ``old``; and the changes.

    Structure is compared by :func:`structure_diff`, every other quantity by its "moved" rule
    (:class:`Move`), the gates' own. Only the time record of ``new``'s machine
    class is touched: every other class's record is kept as it was, to the byte. Returns the
    baseline to store and one line per change.
    """
    if old is None:
        return new, ("new baseline",)
    changes: list[str] = []
    variants: dict[str, VariantBaseline] = {}
    for name, nv in new.variants.items():
        ov = old.variants.get(name)
        if ov is None:
            changes.append(f"{name}: new variant")
            variants[name] = nv
            continue
        changes += [f"{name} {line}" for line in structure_diff(ov, nv)]
        if not ov.operator_sme2_kernels and nv.operator_sme2_kernels:
            changes.append(f"{name} SME2 kernels per operator kind recorded")
        changes += [f"{name} {line}" for line in kernel_selection_diff(ov, nv)[0]]
        variants[name] = nv
        if _replaced(ov.instructions, nv.instructions, instructions_move, tol):
            changes.append(f"{name} instructions/inference {ov.instructions} → {nv.instructions}")
        elif not ov.instruction_shares and nv.instruction_shares:
            changes.append(f"{name} instructions per operator and category shares recorded")
        elif moved_shares(nv.instruction_shares, ov.instruction_shares, tol):
            changes.append(f"{name} instruction shares moved beyond ±{tol.share_points:g} points")
        elif ov.operator_instructions.keys() == nv.operator_instructions.keys():
            # within tolerance: the instruction counts stay as they were, to the byte
            variants[name] = replace(
                nv,
                instructions=ov.instructions,
                operator_instructions=ov.operator_instructions,
                instruction_shares=ov.instruction_shares,
            )
        changes += [f"{name} {line}" for line in _load_changes(ov, nv, tol)]
        if not _replaced(ov.init_instructions, nv.init_instructions, instructions_move, tol):
            variants[name] = replace(variants[name], init_instructions=ov.init_instructions)
    changes += [
        f"{name}: variant no longer measured" for name in old.variants if name not in new.variants
    ]
    instruction_ratio = old.instruction_ratio
    if _replaced(old.instruction_ratio, new.instruction_ratio, instruction_ratio_move, tol):
        changes.append(f"instruction ratio {old.instruction_ratio}× → {new.instruction_ratio}×")
        instruction_ratio = new.instruction_ratio
    machines = dict(old.machines)
    for class_id, record in new.machines.items():
        machines[class_id], record_changes = _merge_record(old.machines.get(class_id), record, tol)
        changes += [f"[{class_id}] {line}" for line in record_changes]
    merged = replace(
        new,
        variants=variants,
        instruction_ratio=instruction_ratio,
        machines=machines,
        tolerances=tol,
    )
    return merged, tuple(changes)


def _load_changes(old: VariantBaseline, new: VariantBaseline, tol: Tolerances) -> list[str]:
    """What an update records of a variant's load: init instructions that appeared or moved
    beyond the instruction tolerance, and a planned memory that changed at all (exact)."""
    changes = []
    if _replaced(old.init_instructions, new.init_instructions, instructions_move, tol):
        changes.append(f"init instructions {old.init_instructions} → {new.init_instructions}")
    if old.planned_bytes != new.planned_bytes:
        changes.append(f"planned memory {old.planned_bytes} → {new.planned_bytes} bytes")
    return changes


def _replaced(
    old: float | None,
    new: float | None,
    rule: Callable[[float, float, Tolerances], Move],
    tol: Tolerances,
) -> bool:
    """Whether a stored number gives way to the new one: it appeared, vanished or moved by
    ``rule``."""
    if old is None or new is None:
        return old != new
    return rule(new, old, tol) is not Move.WITHIN


def _merge_record(
    old: TimeRecord | None, new: TimeRecord, tol: Tolerances
) -> tuple[TimeRecord, list[str]]:
    """One machine class's record, updated where a time moved beyond tolerance; the notes follow
    the times (they say what the machine was when the kept times were taken)."""
    if old is None:
        return new, [f"new time record: {describe_class(new.machine_class)}"]
    changes: list[str] = []
    variants: dict[str, VariantTimes] = {}
    for name, nv in new.variants.items():
        ov = old.variants.get(name)
        if ov is None:
            changes.append(f"{name}: new variant")
            variants[name] = nv
            continue
        latency = ov.latency
        if latency_move(nv.latency, ov.latency, old.latency_percent(tol)):
            changes.append(
                f"{name} fastest run {ov.latency.min_ms} → {nv.latency.min_ms} ms "
                f"(median {ov.latency.median_ms} → {nv.latency.median_ms} ms)"
            )
            latency = nv.latency
        shares = dict(ov.shares)
        for cat in moved_shares(nv.shares, ov.shares, tol):
            changes.append(
                f"{name} {cat} share {100 * ov.shares.get(cat, 0.0):.1f}% → "
                f"{100 * nv.shares[cat]:.1f}%"
            )
            shares[cat] = nv.shares[cat]
        load_lines, times = _merge_load_times(ov, nv, tol)
        changes += [f"{name} {line}" for line in load_lines]
        variants[name] = replace(times, latency=latency, shares=shares)
    speedup = old.speedup
    if new.speedup is None or old.speedup is None:
        if new.speedup != old.speedup:
            changes.append(
                f"speedup {old.speedup and old.speedup.value} → {new.speedup and new.speedup.value}"
            )
        speedup = new.speedup
    elif speedup_move(new.speedup, old.speedup, tol):
        changes.append(f"speedup {old.speedup.value}× → {new.speedup.value}×")
        speedup = new.speedup
    notes = old.notes
    if changes:
        changes += [f"note {line}" for line in notes_diff(old.notes, new.notes)]
        notes = new.notes
    merged = replace(
        new, notes=notes, variants=variants, speedup=speedup, calibration=old.calibration
    )
    return merged, changes


def _merge_load_times(
    old: VariantTimes, new: VariantTimes, tol: Tolerances
) -> tuple[list[str], VariantTimes]:
    """A variant's program load, method init and peak resident memory as an update stores them:
    each the new one where it appeared or moved beyond its tolerance, else the stored one (a
    record written before they were kept gets them); and one line per change."""
    changes: list[str] = []
    kept = old
    for key, what, rule in (
        ("program_load_ms", "program load ms", init_time_move),
        ("method_init_ms", "method init ms", init_time_move),
        ("peak_rss_bytes", "peak resident memory bytes", peak_rss_move),
    ):
        before, after = getattr(old, key), getattr(new, key)
        if _replaced(before, after, rule, tol):
            changes.append(f"{what} {before} → {after}")
            kept = replace(kept, **{key: after})
    return changes, kept
