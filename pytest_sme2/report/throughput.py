"""Throughput of a language model's phase: tokens/s, and what bounds it.

A model registered with ``tokens`` (``pytest_sme2.export.model_spec``) processes that many tokens
per inference: a prefill its whole prompt, a decode step one. Users compare phases in tokens/s, as
ExecuTorch's llama runner prints them (prompt evaluation, generation); where time is emulated the
same figure is instructions per token, exact like the instructions it is made of. What the
linear layers do follows from the phase: with one token each multiplies a weight matrix by
one activation row (matrix × vector, GEMV: the weights' bytes per token bound it); with a prompt,
by as many rows (matrix × matrix, GEMM: arithmetic bounds it). What bounds the phase is the
profile's to say: its largest category (a decode step can spend more in data movement, copying
its KV cache, than in its GEMVs).
"""

from __future__ import annotations

from pytest_sme2.analysis.categories import CATEGORIES, GEMM
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.report.format import (
    Table,
    counts_instructions,
    ordered_variants,
    pct,
    ratio,
    timing_stats,
)


def per_token(m: Measurement, variant: Variant) -> float | None:
    """Tokens/s of ``variant`` (its median timing-only run), or instructions per token where the
    device counts instructions; None for a model without tokens or a variant not measured."""
    if not m.tokens or variant not in m.variants:
        return None
    if counts_instructions(m):
        evidence = m.variants[variant].evidence
        return evidence.instructions / m.tokens if evidence and evidence.instructions else None
    median_ms = timing_stats(m, variant).median_ms
    return m.tokens / (median_ms / 1000.0) if median_ms > 0 else None


def per_token_text(m: Measurement, variant: Variant) -> str:
    value = per_token(m, variant)
    if value is None:
        return "—"
    return f"{value:,.0f} instr/token" if counts_instructions(m) else f"{value:,.1f} tokens/s"


def phase(m: Measurement) -> str:
    """ "64 tokens per inference, linear layers matrix × matrix (GEMM)" — a prefill's prompt or
    an encoder's sequence alike — or "1 token per inference (a decode step), linear layers
    matrix × vector (GEMV)"."""
    if m.tokens == 1:
        return "1 token per inference (a decode step), linear layers matrix × vector (GEMV)"
    return f"{m.tokens} tokens per inference, linear layers matrix × matrix (GEMM)"


def throughput_table(m: Measurement) -> Table | None:
    """Per variant: tokens per inference, tokens/s (instructions per token where emulated), and
    the GEMM category's share of the inference; then SME2-off ÷ SME2-on of the per-token cost."""
    if not m.tokens:
        return None
    label = "instructions/token" if counts_instructions(m) else "tokens/s"
    rows = []
    for variant in ordered_variants(m):
        shares = m.variants[variant].profile.shares
        rows.append((str(variant), str(m.tokens), per_token_text(m, variant), pct(shares[GEMM])))
    on, off = per_token(m, Variant.ON), per_token(m, Variant.OFF)
    if on and off:
        gain = off / on if counts_instructions(m) else on / off
        rows.append(("SME2 gain", "", ratio(gain), ""))
    return Table(("variant", "tokens/inference", label, f"{GEMM} share"), tuple(rows))


def phase_line(m: Measurement) -> str | None:
    """One sentence: the phase, its throughput with SME2 on (or the variant measured), and what
    bounds it there — the largest category, and the GEMM category's share beside it."""
    if not m.tokens:
        return None
    head = m.headline
    shares = m.variants[head].profile.shares
    top = max(CATEGORIES, key=lambda category: shares[category])
    gemm = "" if top == GEMM else f"; {GEMM} {pct(shares[GEMM])}"
    return (
        f"{phase(m)}: {per_token_text(m, head)} with {head}. Bottleneck: {top} "
        f"({pct(shares[top])} of the inference{gemm})."
    )
