"""What an operator is doing in a model, where its name tells: the roles a report's advice speaks
of — a KV-cache write, a repeat of key/value heads, an attention mask or softmax guard built in
the graph, an unfused softmax, a dtype cast, a layout change.

Why apart from the categories: a category says where time is counted (Data Movement, Elementwise);
a role says why the operator is there, which is what decides the advice. A decoder's Data Movement
is ``index_put`` (the cache write) and ``expand_copy`` (GQA's repeat of K/V), not the layout
changes a convnet's is, and its ``where``/``eq`` build a mask, not activations to fuse. Names
only: ``native_call_<op>`` of ExecuTorch's own kernels and XNNPACK's operator types
(``Transpose (ND, X32)``), parsed by :func:`pytest_sme2.analysis.ops.parse_op_name`.
"""

from __future__ import annotations

from collections.abc import Iterable

from pytest_sme2.analysis.ops import parse_op_name

CACHE_WRITE = "cache write"
KV_REPEAT = "key/value repeat"
BROADCAST = "broadcast copy"
MASK = "mask"
SOFTMAX = "unfused softmax"
CAST = "dtype cast"
LAYOUT = "layout"

#: What each role is, in the sentence that names its operators.
ROLE_TEXT = {
    CACHE_WRITE: "the KV-cache write",
    KV_REPEAT: "a repeat of the key/value heads (GQA's, where the keys have fewer heads)",
    BROADCAST: "a tensor copied out to a broadcast shape",
    MASK: "an attention mask or softmax guard built in the graph (torch's SDPA decomposition: "
    "eq(-inf), all, where)",
    SOFTMAX: "a softmax outside the delegate",
    CAST: "dtype casts (fp16 ↔ fp32 around operators XNNPACK did not take)",
    LAYOUT: "layout changes (transposes, permutes)",
}

_NATIVE_ROLES = {
    **dict.fromkeys(
        ("index_put", "index_copy", "update_cache", "slice_scatter", "select_scatter"),
        CACHE_WRITE,
    ),
    **dict.fromkeys(("expand_copy", "repeat", "repeat_interleave"), KV_REPEAT),
    **dict.fromkeys(
        (
            *("where", "eq", "ne", "lt", "le", "gt", "ge"),
            *("logical_not", "logical_and", "logical_or", "all", "any", "masked_fill", "isinf"),
            *("tril", "triu", "full_like"),
        ),
        MASK,
    ),
    **dict.fromkeys(("_softmax", "softmax", "_log_softmax", "log_softmax"), SOFTMAX),
    **dict.fromkeys(("_to_dim_order_copy", "_to_copy"), CAST),
    **dict.fromkeys(("permute_copy", "transpose_copy", "t_copy"), LAYOUT),
}


def operator_role(name: str, *, decoder: bool) -> str | None:
    """The role of the operator an event ``name`` names, None where its name does not tell.
    In a ``decoder`` (a language model's phase, or a program with a cache write) an
    ``expand_copy`` is GQA's repeat of the key/value heads; elsewhere only a broadcast copy."""
    op = parse_op_name(name)
    if op.source == "xnnpack":
        return LAYOUT if op.operator.startswith("Transpose") else None
    role = _NATIVE_ROLES.get(op.operator)
    return BROADCAST if role == KV_REPEAT and not decoder else role


#: ExecuTorch's LLM kernels (``extension/llm/custom_ops``, the ``llama::`` operators): export_llm's
#: ``use_sdpa_with_kv_cache`` and optimum-executorch's ``--use_custom_sdpa --use_custom_kv_cache``
#: put attention and the cache write in them on purpose, outside any delegate — advice to make
#: them delegable, or to export with them, would be wrong for a program that has them.
LLM_KERNELS = frozenset(
    {"custom_sdpa", "sdpa_with_kv_cache", "custom_quantized_sdpa", "update_cache"}
    | {"update_cache_with_indices"}
)


def is_llm_kernel(name: str) -> bool:
    """Whether the event ``name`` is one of ExecuTorch's LLM kernels (:data:`LLM_KERNELS`)."""
    op = parse_op_name(name)
    return op.source == "native" and op.operator in LLM_KERNELS


def is_decoder(names: Iterable[str], tokens: int | None) -> bool:
    """Whether a program is a language model's phase: it has tokens, or writes a cache."""
    return tokens is not None or any(
        operator_role(name, decoder=True) == CACHE_WRITE for name in names
    )
