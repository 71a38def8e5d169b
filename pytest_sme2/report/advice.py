"""What to do about what a report measured: recommendations, each sentence carrying the numbers
that triggered it, and what the executed kernels say about the SME2 path of GEMM-like operators.

Apart from :mod:`pytest_sme2.report.content` (which states the numbers) because these sentences
judge: they draw on the profile *and* the device's evidence, and the SME2-path judgement is the
same rule the ``require_sme2_kernels`` gate fails on (:func:`pytest_sme2.analysis.kernels.
layers_without_sme2`), so a report cannot say less than the gate did.
"""

from __future__ import annotations

from pytest_sme2.analysis.categories import CONVOLUTION, DATA_MOVEMENT, ELEMENTWISE, GEMM
from pytest_sme2.analysis.kernel_names import readable
from pytest_sme2.analysis.kernels import (
    BOTTLENECK_SHARE,
    PACKING,
    SME_CAPABLE_SUBCATEGORIES,
    kernel_role,
    kernels_by_kind,
    layers_without_sme2,
    ran_sme2,
)
from pytest_sme2.analysis.profile import OTHER, OperatorStat, Profile
from pytest_sme2.analysis.roles import (
    BROADCAST,
    CACHE_WRITE,
    CAST,
    KV_REPEAT,
    LAYOUT,
    MASK,
    ROLE_TEXT,
    SOFTMAX,
    is_decoder,
    is_llm_kernel,
    operator_role,
)
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.report.content import non_delegated
from pytest_sme2.report.format import ms, pct, ratio

#: What removes an attention's mask, softmax guard, K/V repeat and cache write from the graph.
_CUSTOM_SDPA = (
    "Exporting attention with ExecuTorch's custom SDPA and KV-cache operators (export_llm's "
    "model.use_sdpa_with_kv_cache=True; optimum-executorch's --use_custom_sdpa "
    "--use_custom_kv_cache) runs the mask, the softmax, the K/V repeat and the cache write "
    "inside llama::custom_sdpa and llama::update_cache."
)

#: An SME2 operator spending at least this part of its instructions packing its input is worth a
#: sentence: its matmul got cheap, the packing did not (an int8-dynamic fully connected layer on
#: qemu-sme2 spent 78 % of its instructions in ``kai_run_lhs_quant_pack_qai8dxp_f32``).
PACKING_SHARE = 0.5


def recommendations(m: Measurement) -> list[str]:
    """Advice derived from the numbers, each sentence carrying the numbers that triggered it."""
    advice = [
        line
        for line in (_data_movement(m), _outside_delegate(m), _split_graph(m))
        if line is not None
    ]
    advice += sme2_path_advice(m)
    amdahl = _amdahl(m)
    if amdahl is not None:
        advice.append(amdahl)
    advice += _category_advice(m)
    return advice or ["Nothing stands out: no category or operator crosses the thresholds above."]


def _data_movement(m: Measurement) -> str | None:
    """Data Movement above 15 % of E2E, or transposes run often enough to be a bottleneck: layout
    advice where transposes are the bulk of it, else what its operators are doing (a decoder's
    cache write and K/V repeat are not layout churn)."""
    variant = m.headline
    prof = m.variants[variant].profile
    shares = prof.shares
    per_run = {op.name: op.count / prof.runs for op in prof.operators}
    dm_ops = [op for op in prof.operators if op.category == DATA_MOVEMENT]
    transposes = [op for op in dm_ops if op.subcategory == "transpose"]
    transposes_per_run = sum(per_run[op.name] for op in transposes)
    transpose_share = sum(op.share for op in transposes)
    if shares[DATA_MOVEMENT] < 0.15 and (
        transposes_per_run < 4 or transpose_share < BOTTLENECK_SHARE
    ):
        return None
    if transpose_share < shares[DATA_MOVEMENT] / 2:
        head = f"Data Movement is {pct(shares[DATA_MOVEMENT])} of E2E ({variant})"
        return _by_role(head, dm_ops, per_run, _decoder(m), _llm_kernels(prof))
    top = ", ".join(f"{op.name} ×{per_run[op.name]:g} ({pct(op.share)})" for op in dm_ops[:3])
    return (
        f"Layout churn: Data Movement is {pct(shares[DATA_MOVEMENT])} of E2E ({variant}) with "
        f"{transposes_per_run:g} transposes per run ({pct(transpose_share)}); top: {top}. Keep "
        "tensors in one layout end to end (channels-last / NHWC), fold permutes into the "
        "neighbouring operators and avoid reshape↔permute chains around attention."
    )


#: What removes the operators of each role, where an exporter option or a change does.
_REMEDIES = {
    CACHE_WRITE: _CUSTOM_SDPA,
    KV_REPEAT: _CUSTOM_SDPA,
    BROADCAST: "Let the consuming operator broadcast instead of materialising the copy "
    "(XNNPACK's binary and batch-matmul operators broadcast).",
    MASK: _CUSTOM_SDPA,
    SOFTMAX: _CUSTOM_SDPA,
    CAST: "Casts surround operators XNNPACK does not run in this dtype: make those delegable, "
    "or keep that part of the model in fp32.",
    LAYOUT: "Keep tensors in one layout end to end and fold permutes into their neighbours.",
}


def _llm_kernels(prof: Profile) -> bool:
    """Whether the program runs ExecuTorch's LLM kernels (``llama::custom_sdpa`` …)."""
    return any(is_llm_kernel(op.name) for op in prof.operators)


def _decoder(m: Measurement) -> bool:
    return is_decoder((op.name for op in m.variants[m.headline].profile.operators), m.tokens)


def _by_role(
    head: str,
    ops: list[OperatorStat],
    per_run: dict[str, float],
    decoder: bool,
    custom_kernels: bool,
) -> str:
    """``head``, then the largest of ``ops`` (at least 1 % of E2E) each with what it is doing
    (:func:`operator_role`), then what removes the roles that hold a bottleneck's share — not
    the custom SDPA to a program that already runs ExecuTorch's LLM kernels
    (``custom_kernels``)."""
    shown = [op for op in sorted(ops, key=lambda op: -op.share) if op.share >= 0.01][:4]
    roles = [operator_role(op.name, decoder=decoder) for op in shown]
    named = "; ".join(
        f"{op.name} ×{per_run[op.name]:g} ({pct(op.share)})"
        + (f": {ROLE_TEXT[role]}" if role else "")
        for op, role in zip(shown, roles, strict=True)
    )
    share: dict[str, float] = {}
    for op, role in zip(shown, roles, strict=True):
        if role is not None:
            share[role] = share.get(role, 0.0) + op.share
    remedies = [
        _REMEDIES[role]
        for role in share
        if share[role] >= BOTTLENECK_SHARE
        and (_REMEDIES[role] != _CUSTOM_SDPA or (decoder and not custom_kernels))
    ]
    return f"{head}: {named}." + "".join(f" {text}" for text in dict.fromkeys(remedies))


def _outside_delegate(m: Measurement) -> str | None:
    """At least :data:`BOTTLENECK_SHARE` of E2E in operators no delegate runs."""
    variant = m.headline
    prof = m.variants[variant].profile
    if not prof.latency.mean_ms or prof.non_delegated_ms / prof.latency.mean_ms < BOTTLENECK_SHARE:
        return None
    outside = non_delegated(m, variant)
    kernels = [op for op in outside if is_llm_kernel(op.name)]
    others = [op for op in outside if not is_llm_kernel(op.name)]
    said = f"{pct(prof.non_delegated_ms / prof.latency.mean_ms)} of E2E runs outside the delegate "
    said += f"({ms(prof.non_delegated_ms)} {prof.unit}/run)"
    if others:
        names = ", ".join(f"{op.name} ({ms(op.per_run_ms)} {prof.unit}/run)" for op in others[:4])
        said += f": {names}. Make these operators delegable (a supported op or dtype, or a "
        said += (
            "decomposition XNNPACK lowers), or they stay on ExecuTorch's own kernels with no SME2"
        )
    if kernels:
        names = ", ".join(f"{op.name} ({pct(op.share)})" for op in kernels)
        said += f"{';' if others else ':'} {names} {'is' if len(kernels) == 1 else 'are'} "
        said += "ExecuTorch's LLM kernels (llama::, the exporter's custom SDPA and KV cache), "
        said += "outside the delegate by design: attention and the cache write run there"
    return said + "."


def _split_graph(m: Measurement) -> str | None:
    calls = m.variants[m.headline].profile.delegate_calls_per_run
    if calls <= 1:
        return None
    return (
        f"The graph is split into {calls:g} delegate calls per run: every split point copies "
        "tensors and pays dispatch overhead; the non-delegated operators between them cause it."
    )


def _amdahl(m: Measurement) -> str | None:
    """A small measured speedup, with the bound Convolution + GEMM's SME2-off share puts on it."""
    comparison = m.comparison
    if comparison is None or not m.device.time_meaningful:
        return None
    s = comparison.speedup.value
    if s >= 1.2:
        return None
    matmul_off = comparison.off.shares[CONVOLUTION] + comparison.off.shares[GEMM]
    bound = 1 / (1 - matmul_off) if matmul_off < 1 else None
    return (
        f"SME2 speedup is only {s:.2f}×: Convolution + GEMM were {pct(matmul_off)} of E2E "
        f"with SME2 off, so even infinitely fast matrix kernels give at most "
        f"{ratio(bound) if bound else 'an unbounded'} (Amdahl). "
        "The rest of the model decides latency."
    )


def _category_advice(m: Measurement) -> list[str]:
    """What the headline variant's largest category shares say: compute-bound, unfused
    elementwise work, a large residual."""
    variant = m.headline
    prof = m.variants[variant].profile
    shares = prof.shares
    advice = []
    matmul_share = shares[CONVOLUTION] + shares[GEMM]
    if matmul_share >= 0.6:
        advice.append(
            f"Still compute-bound ({variant}): Convolution + GEMM are {pct(matmul_share)} of E2E. "
            "Lower precision (fp16, int8) or a smaller model moves latency most; "
            "layout work is minor."
        )
    if shares[ELEMENTWISE] >= 0.2:
        advice.append(_elementwise(prof, _decoder(m)))
    if shares[OTHER] >= 0.2:
        advice.append(
            f"Other is {pct(shares[OTHER])} of E2E ({ms(prof.categories_ms[OTHER])} "
            f"{prof.unit}/run): "
            "pooling, normalization, softmax, reductions and framework overhead (time in no "
            "classified operator). Check the operator table for the largest Other entries."
        )
    return advice


def _elementwise(prof: Profile, decoder: bool) -> str:
    """Elementwise work: a mask built in the graph said as such, else activations to fuse."""
    share = pct(prof.shares[ELEMENTWISE])
    ops = [op for op in prof.operators if op.category == ELEMENTWISE]
    masks = sum(op.share for op in ops if operator_role(op.name, decoder=decoder) == MASK)
    if masks >= prof.shares[ELEMENTWISE] / 2:
        per_run = {op.name: op.count / prof.runs for op in ops}
        head = f"Elementwise is {share} of E2E"
        return _by_role(head, ops, per_run, decoder, _llm_kernels(prof))
    return (
        f"Elementwise is {share} of E2E: fuse activations and bias adds into the preceding "
        "convolution / linear (XNNPACK fuses clamp-like activations)."
    )


def sme2_path_advice(m: Measurement) -> list[str]:
    """What the SME2-on variant's GEMM-like operators above :data:`BOTTLENECK_SHARE` did with
    SME2. Where the device shows kernels per operator (qemu-sme2), judged by them, whatever the
    names say: one sentence per weight type none of whose layers ran an SME2 kernel (the
    ``require_sme2_kernels`` failure), one for the other operators that ran none, one per SME2
    operator mostly packing its input. Elsewhere by name (``PF32``, ``PF16``, ``PQS8``)."""
    if Variant.ON not in m.variants or not m.device.has_sme2:
        return []
    on = m.variants[Variant.ON]
    gemm_like = [
        op
        for op in on.profile.operators
        if op.subcategory in SME_CAPABLE_SUBCATEGORIES and op.share >= BOTTLENECK_SHARE
    ]
    evidence = on.evidence
    if evidence is None or not evidence.operator_kernels:
        unpacked = [op for op in gemm_like if not op.packed]
        if not unpacked:
            return []
        return [
            "GEMM-like operators that did not take the SME2 packed path with SME2 on: "
            f"{_named(unpacked)}. Check their dtype (fp32/fp16/static int8 pack; dynamic int8 "
            "QP8 cannot show it by name, only executed kernels can)."
        ]
    missing = layers_without_sme2(
        evidence.operator_kernels,
        evidence.instructions or sum(op.instructions for op in evidence.operator_kernels),
    )
    advice = [f"{group.sentence(m.dtype)}." for group in missing]
    said = {kind for group in missing for kind in group.kinds}
    kinds = kernels_by_kind(evidence.operator_kernels)
    # an operator the kernels do not cover (none logged for it) is judged by its name
    other = [
        op
        for op in gemm_like
        if op.name not in said and not (ran_sme2(kinds[op.name]) if op.name in kinds else op.packed)
    ]
    if other:
        advice.append(
            f"GEMM-like operators that ran no SME2 kernel with SME2 on ({evidence.source}), "
            f"though other layers of their weight type did: {_named(other)}. XNNPACK chose "
            "another kernel for them (by shape or input type); the kernel view shows which."
        )
    for op in gemm_like:
        functions = kinds.get(op.name, {})
        if ran_sme2(functions):
            advice += _packing_sentence(op, functions)
    return advice


def _packing_sentence(op: OperatorStat, functions: dict[str, int]) -> list[str]:
    """One sentence when packing (quantizing) the input is at least :data:`PACKING_SHARE` of an
    SME2 operator's instructions: the cost SME2 left behind."""
    total = sum(functions.values())
    packing = {n: c for n, c in functions.items() if kernel_role(n) == PACKING}
    share = sum(packing.values()) / total if total else 0.0
    if share < PACKING_SHARE:
        return []
    names = ", ".join(readable(n) for n, c in packing.items() if c >= BOTTLENECK_SHARE * total)
    why = (
        " Dynamic int8 quantizes every input at run time; static int8 quantizes ahead of time."
        if "quant" in names
        else ""
    )
    return [
        f"{op.name} ({pct(op.share)} of E2E) runs SME2 kernels, but {pct(share)} of its "
        f"instructions pack its input ({names}): SME2 made its matmul cheap, not the packing." + why
    ]


def _named(ops: list[OperatorStat]) -> str:
    return ", ".join(f"{op.name} ({pct(op.share)})" for op in ops[:4])
