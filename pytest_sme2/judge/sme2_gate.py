"""The ``sme2-kernels`` gate (``require_sme2_kernels``): did SME2 run with SME2 on, and nothing
SME with it off? Each proof the measurement holds is judged on its own (packed operator names,
executed kernels), and any one failing fails the gate.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytest_sme2.analysis.kernels import layers_without_sme2
from pytest_sme2.analysis.ops import parse_op_name
from pytest_sme2.judge.gate import Judging
from pytest_sme2.judge.wording import case_name
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status, Verdict

#: The gate :class:`Sme2Kernels` gives its verdict as.
SME2_GATE = "sme2-kernels"

#: The packed operand type XNNPACK names an operator with when SME kernels run it, per dtype.
#: Dynamic int8 has none: its ``QP8`` operators are named alike on NEON.
PACKED_TYPE: Mapping[str, str] = {"fp32": "PF32", "fp16": "PF16", "int8": "PQS8"}


class Sme2Kernels:
    """``require_sme2_kernels``: did SME2 run with SME2 on, and nothing SME with it off?

    Two proofs, each required where it exists: operator names packed for the dtype (``PF32``,
    ``PF16``, ``PQS8``) in the SME2-on trace, and, where the device shows them (qemu's exec log,
    XNNPACK's kernel log), executed SME2 kernels. Names alone cannot tell SME1 from SME2 and say
    nothing for dynamic int8; kernels alone would miss a dtype whose operators fell back to NEON.
    Where the device shows kernels per operator (qemu-sme2), every weight type of GEMM-like
    layers must also have run one (:func:`pytest_sme2.analysis.kernels.layers_without_sme2`): an
    SME2 kernel in an fp32 layer must not pass a case whose 8da4w layers all ran NEON.
    """

    name = SME2_GATE

    def check(self, judging: Judging) -> list[Verdict]:
        m = judging.measurement
        if not judging.expectations.require_sme2_kernels:
            return []
        if not m.device.has_sme2 or Variant.ON not in m.variants:
            reason = m.device.limits.get("sme2", f"{m.device.name} has no SME2")
            return [Verdict(SME2_GATE, Status.SKIP, reason)]
        proofs = []
        for found in (_sme_leaked(m), _named_proof(m), _kernel_proof(m)):
            if isinstance(found, Verdict):
                return [found]
            if found is not None:
                proofs.append(found)
        if not proofs:
            return [
                Verdict(
                    SME2_GATE,
                    Status.SKIP,
                    f"operator names cannot prove SME2 for {m.dtype} (its QP8 GEMMs are named "
                    f"alike on NEON) and {m.device.name} shows no executed kernels",
                )
            ]
        return [Verdict(SME2_GATE, Status.PASS, "; ".join(proofs))]


def _sme_leaked(m: Measurement) -> Verdict | None:
    """A failure where SME ran with SME2 off (packed operators, SME or SME2 kernels): the off
    variant is the comparison's NEON side and must be SME-free."""
    off = m.variants.get(Variant.OFF)
    leaked = (
        *(off.profile.packed_operators if off else ()),
        *(off.evidence.sme2_kernels + off.evidence.sme_kernels if off and off.evidence else ()),
    )
    if not leaked:
        return None
    return Verdict(
        SME2_GATE,
        Status.FAIL,
        f"SME ran with SME2 off for {case_name(m)}: the off variant is not SME-free",
        leaked,
    )


def _named_proof(m: Measurement) -> str | Verdict | None:
    """The SME2-on operators named packed for the dtype (a proof), a failure where none ran, or
    None where the dtype has no such name (dynamic int8)."""
    expected = PACKED_TYPE.get(m.dtype)
    if expected is None:
        return None
    on = m.variants[Variant.ON]
    named = [n for n in on.profile.packed_operators if expected in parse_op_name(n).datatypes]
    if not named:
        return Verdict(
            SME2_GATE,
            Status.FAIL,
            f"no packed {expected} operator ran with SME2 on for {case_name(m)}",
            on.profile.packed_operators,  # the packed operators that did run, if any
        )
    return f"{expected} operators ran: {', '.join(named)}"


def _kernel_proof(m: Measurement) -> str | Verdict | None:
    """The SME2 kernels the device saw executed with SME2 on (a proof), a failure where none ran
    or some GEMM-like layers ran without one, or None where the device shows no kernels."""
    evidence = m.variants[Variant.ON].evidence
    if evidence is None:
        return None
    if evidence.operator_kernels:
        missing = layers_without_sme2(
            evidence.operator_kernels,
            evidence.instructions or sum(op.instructions for op in evidence.operator_kernels),
        )
        if missing:
            # an SME2 kernel elsewhere (a PF32 layer beside 8da4w's QB4W ones) proves nothing
            # for these layers
            sentences = "; ".join(group.sentence(m.dtype) for group in missing)
            return Verdict(SME2_GATE, Status.FAIL, f"{sentences} ({case_name(m)})")
    if not evidence.sme2_kernels:
        only_sme1 = (
            f"; only SME1 kernels ran: {', '.join(evidence.sme_kernels)}"
            if evidence.sme_kernels
            else ""
        )
        return Verdict(
            SME2_GATE,
            Status.FAIL,
            f"no SME2 kernel executed with SME2 on for {case_name(m)} "
            f"({evidence.source}){only_sme1}",
        )
    return f"SME2 kernels executed ({evidence.source}): {', '.join(evidence.sme2_kernels)}"


SME2_KERNELS = Sme2Kernels()
