"""Counted instructions, as one spec: a variant's guest instructions per steady-state inference and,
where the device splits that count between operators (qemu-sme2), the instructions per operator
kind and each category's share of them. Stored in the variant's portable part and updated as one
block (kept to the byte while the count and the shares stay within tolerance, else all replaced),
judged by two gates: ``instructions[variant]`` and ``instruction-shares[variant]``.

Exact and repeatable under emulation, so judged without an interval or a re-measure: a model that
does 2 % more work with the same operators fails, which neither the on/off ratio (a uniform
increase leaves it unchanged) nor structure can see; the operator kinds that grew are named. Fewer
instructions pass as news.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from pytest_sme2.analysis.profile import Profile
from pytest_sme2.judge.baseline_model import VariantBaseline
from pytest_sme2.judge.gate import Judging
from pytest_sme2.judge.moves import Move, Tolerances, relative_move, stable
from pytest_sme2.judge.scalar import Sentences, percent_change
from pytest_sme2.judge.shares import moved_shares, shares_verdict
from pytest_sme2.judge.structure import portable_name
from pytest_sme2.judge.wording import case_name
from pytest_sme2.records.measurement import Measurement, VariantMeasurement
from pytest_sme2.records.verdict import Verdict

#: The fields of the block, as the variant's portable part names them.
_BLOCK = ("instructions", "operator_instructions", "instruction_shares")


def operator_instructions(prof: Profile) -> dict[str, int]:
    """Operator kind (portable name) → instructions per inference, of an instruction profile."""
    counts: Counter[str] = Counter()
    for op in prof.operators:
        counts[portable_name(op.name)] += round(op.per_run_ms * 1e6)  # M instr → instructions
    return dict(sorted(counts.items()))


def _moved(now: float, stored: float, tol: Tolerances) -> Move:
    """An exact count (or a ratio of two) beyond ``instruction_percent``."""
    return relative_move(now, stored, tol.instruction_percent)


_SENTENCES = Sentences(
    numbers=lambda then, now: f"{then:,} → {now:,} per inference{percent_change(then, now, 2)}",
    worse="instructions of {case} ({variant}) rose {numbers}, beyond the {percent:g}% tolerance",
    better="fewer instructions ({variant}): {numbers} — a new kernel? {record_it}",
    same="instructions ({variant}) {numbers}",
)


class CountedInstructions:
    """The spec of a variant's counted instructions (see the module's docstring)."""

    name = "instructions"
    counted = True
    schema: Mapping[str, Any] = {
        "instructions": {"oneOf": [{"type": "null"}, {"$ref": "#/$defs/count"}]},
        "operator_instructions": {
            "description": (
                "operator kind → instructions per inference (an operator may round to 0)"
            ),
            "type": "object",
            "propertyNames": {"minLength": 1},
            "additionalProperties": {"type": "integer", "minimum": 0},
        },
        "instruction_shares": {"$ref": "#/$defs/shares"},
    }
    required = ()

    def measured(self, m: Measurement, vm: VariantMeasurement, counts: bool) -> dict[str, Any]:
        """Counts only where repeatable (``counts``); per operator only where the device splits
        them (an instruction profile)."""
        prof = vm.profile
        split = prof.counts_instructions and counts
        return {
            "instructions": vm.evidence.instructions if vm.evidence and counts else None,
            "operator_instructions": operator_instructions(prof) if split else {},
            "instruction_shares": {c: stable(v) for c, v in prof.shares.items()} if split else {},
        }

    def to_json(self, part: VariantBaseline) -> dict[str, Any]:
        """The count always (null where none); the split where the file had it."""
        doc: dict[str, Any] = {"instructions": part.instructions}
        if part.operator_instructions is not None:
            doc["operator_instructions"] = dict(part.operator_instructions)
        if part.instruction_shares is not None:
            doc["instruction_shares"] = dict(part.instruction_shares)
        return doc

    def from_json(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        split = ("operator_instructions", "instruction_shares")
        return {
            "instructions": doc.get("instructions"),
            **{key: dict(doc[key]) if key in doc else None for key in split},
        }

    def merge(
        self, old: VariantBaseline, new: VariantBaseline, tol: Tolerances
    ) -> tuple[dict[str, Any], list[str]]:
        """The stored block while nothing in it moved, else the new one, and why."""
        before, after = old.instructions, new.instructions
        moved = (
            before != after
            if before is None or after is None
            else _moved(after, before, tol) is not Move.WITHIN
        )
        replaced = {key: getattr(new, key) for key in _BLOCK}
        if moved:
            return replaced, [f"instructions/inference {before} → {after}"]
        if not old.instruction_shares and new.instruction_shares:
            return replaced, ["instructions per operator and category shares recorded"]
        if moved_shares(new.instruction_shares or {}, old.instruction_shares or {}, tol):
            return replaced, [f"instruction shares moved beyond ±{tol.share_points:g} points"]
        if (old.operator_instructions or {}).keys() != (new.operator_instructions or {}).keys():
            return replaced, []
        # within tolerance: the instruction counts stay as they were, to the byte
        return {key: getattr(old, key) for key in _BLOCK}, []

    def check(self, judging: Judging) -> list[Verdict]:
        """Instructions per steady-state inference against the baseline, per variant."""
        if judging.stored is None:
            return []
        m, tol = judging.measurement, judging.tolerances
        verdicts = []
        for variant, vm in m.variants.items():
            stored = judging.stored.variants.get(str(variant))
            measured = judging.now.variants[str(variant)].instructions
            if measured is None or stored is None or not stored.instructions:
                continue
            move = _moved(measured, stored.instructions, tol)
            status, message = _SENTENCES.say(
                move,
                Move.ROSE,
                case=case_name(m),
                variant=variant,
                now=measured,
                stored=stored.instructions,
                percent=tol.instruction_percent,
            )
            grew = _operators_grown(stored.operator_instructions, vm.profile, tol)
            if move is Move.ROSE and grew:
                message += f"; grew: {', '.join(g.split(':')[0] for g in grew)}"
            grown = tuple(grew) if move is Move.ROSE else ()
            verdicts.append(Verdict(f"{self.name}[{variant}]", status, message, grown))
        return verdicts


def _operators_grown(stored: Mapping[str, int] | None, prof: Profile, tol: Tolerances) -> list[str]:
    """The operator kinds whose instructions per inference rose beyond the tolerance (new kinds
    too), most added instructions first, as "name: a → b (+x%)"."""
    if not stored or not prof.counts_instructions:
        return []
    now = operator_instructions(prof)
    grown = [
        (count - stored.get(name, 0), name, stored.get(name, 0), count)
        for name, count in now.items()
        if _moved(count, stored.get(name, 0), tol) is Move.ROSE
    ]
    return [
        f"{name}: {old:,} → {new:,}" + (f" (+{100 * (new / old - 1):.1f}%)" if old else " (new)")
        for _, name, old, new in sorted(grown, reverse=True)
    ]


class InstructionShares:
    """Category shares of instructions against the baseline, per variant, where the device splits
    its exact count between operators (qemu-sme2): the deterministic twin of the time shares,
    judged on every machine (in the time gates' place: ``time_gates``)."""

    name = "instruction-shares"
    counted = True

    def check(self, judging: Judging) -> list[Verdict]:
        if judging.stored is None:
            return []
        m = judging.measurement
        return [
            shares_verdict(
                judging,
                self.name,
                variant,
                judging.now.variants[variant].instruction_shares or {},
                stored.instruction_shares,
                "instruction share",
            )
            for variant, vm in m.variants.items()
            if (stored := judging.stored.variants.get(str(variant))) is not None
            and stored.instruction_shares
            and vm.profile.counts_instructions
        ]


COUNTED = CountedInstructions()
INSTRUCTION_SHARES = InstructionShares()
