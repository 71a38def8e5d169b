"""Charts as PNG bytes: category time SME2-off vs SME2-on, per-run E2E latency, and E2E across
thread counts (a thread sweep).

Why PNG through matplotlib's Agg canvas (no pyplot): no global figure state and no display
needed, and a PNG embeds as a ``data:`` URI, so the charts survive ``--self-contained-html``, a
copied report file and a CI artifact viewer alike.
"""

from __future__ import annotations

import base64
import io

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter

from pytest_sme2.analysis.categories import CATEGORIES
from pytest_sme2.analysis.efficiency import ideal_macs_per_sme, operand_bits
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.report.efficiency_view import EfficiencyView, efficiency_view
from pytest_sme2.report.format import (
    case_title,
    counts_instructions,
    latency_source,
    ordered_variants,
    unit,
)
from pytest_sme2.report.scaling_view import E2E_WORDS, ScalingView

#: One colour per category, the same in every chart (colour-blind safe Tableau order).
CATEGORY_COLOURS = {
    "Convolution": "#4e79a7",
    "GEMM": "#f28e2b",
    "Data Movement": "#59a14f",
    "Elementwise": "#e15759",
    "Other": "#9c9c9c",
}
#: Segments below this share get no label (it would not fit).
LABEL_MIN_SHARE = 0.04
DPI = 100
#: The minor grid lines of a log axis, per decade (×2 and ×5).
MINOR_SUBS = (2.0, 5.0)


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buffer)
    return buffer.getvalue()


def category_chart(m: Measurement) -> bytes:
    """Stacked bars of mean ms (or, where the device counts instructions, millions of
    instructions) per traced run by category, one bar per variant, % labels."""
    variants = ordered_variants(m)
    u = unit(m)
    fig = Figure(figsize=(6.4, 4.2), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(variants))
    bottoms = np.zeros(len(variants))
    for category in CATEGORIES:
        values = np.array([m.variants[v].profile.categories_ms[category] for v in variants])
        # Other is a residual: clock jitter can make it a hair negative; a bar cannot show that.
        heights = np.clip(values, 0.0, None)
        ax.bar(x, heights, 0.55, bottom=bottoms, label=category, color=CATEGORY_COLOURS[category])
        for i, v in enumerate(variants):
            share = m.variants[v].profile.shares[category]
            if share >= LABEL_MIN_SHARE:
                ax.text(
                    x[i],
                    bottoms[i] + heights[i] / 2,
                    f"{values[i]:.3g} {u} ({100 * share:.0f}%)",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white",
                    fontweight="bold",
                )
        bottoms += heights
    for i, v in enumerate(variants):
        ax.text(
            x[i],
            bottoms[i],
            f"E2E {m.variants[v].profile.latency.mean_ms:.3g} {u}",
            ha="center",
            va="bottom",
            fontsize=9,
        )
    ax.set_xticks(x, [str(v) for v in variants])
    ax.set_xlim(-0.75, len(variants) - 0.25)
    ax.set_ylim(0, max(bottoms.max(), 1e-9) * 1.12)
    if counts_instructions(m):
        ax.set_ylabel(f"{u} per inference (guest instructions, millions)")
        ax.set_title(f"Where the instructions go: {case_title(m)}", fontsize=10)
    else:
        ax.set_ylabel("ms per run (traced runs, mean)")
        ax.set_title(f"Where the time goes: {case_title(m)}", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return _png(fig)


def latency_chart(m: Measurement) -> bytes:
    """Box plot with every run's E2E as a dot, one column per variant."""
    variants = ordered_variants(m)
    fig = Figure(figsize=(5.2, 4.2), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    samples = [np.asarray(m.variants[v].latencies_ms) for v in variants]
    ax.boxplot(samples, positions=range(len(variants)), widths=0.5, showfliers=False)
    jitter = np.random.default_rng(0)  # fixed: the same measurement draws the same picture
    for i, data in enumerate(samples):
        ax.scatter(i + jitter.uniform(-0.12, 0.12, data.size), data, s=14, alpha=0.7, zorder=3)
    ax.set_xticks(range(len(variants)), [str(v) for v in variants])
    ax.set_ylabel("E2E ms per run")
    ax.set_xlabel(latency_source(m))
    title = "E2E latency per run"
    if not m.device.time_meaningful:
        title += f"\n(time on {m.device.name} is not a performance signal)"
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def scaling_chart(view: ScalingView) -> bytes:
    """E2E per thread count, one line per variant, each beside its ideal scaling (dashed: E2E
    at the fewest threads divided by the added threads); a count without a figure is a gap."""
    fig = Figure(figsize=(5.6, 4.0), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    rows = view.scaling.rows
    for variant in view.scaling.variants:
        points = [
            (r.figure.threads, r.figure.e2e[variant]) for r in rows if variant in r.figure.e2e
        ]
        threads, e2e = zip(*points, strict=True)
        (line,) = ax.plot(threads, e2e, marker="o", label=variant)
        ideal = [e2e[0] * threads[0] / t for t in threads]
        ax.plot(threads, ideal, linestyle="--", color=line.get_color(), alpha=0.5)
    ax.set_xticks([r.figure.threads for r in rows])
    ax.set_xlabel("threads (dashed: ideal scaling)")
    ax.set_ylabel(E2E_WORDS[view.unit])
    ax.set_ylim(bottom=0)
    ax.set_title(f"Thread scaling: {view.title}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def roofline_chart(m: Measurement, view: EfficiencyView) -> bytes:
    """Roofline-style: each GEMM and convolution operator's work (x, MACs) against what its cost
    achieved (y), SME2-on and SME2-off, under the limit (dashed). Emulated: MACs per instruction
    of each variant and SME2-on's per SME instruction, under one full-tile outer product per SME
    instruction; timed: GFLOP/s under the chip's peak (where known)."""
    fig = Figure(figsize=(6.4, 4.2), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    series = []
    for variant, found in view.variants.items():
        known = [op for op in found if op.macs]
        if view.counted:
            series.append((f"{variant} per instruction", known, "macs_per_instruction"))
            if variant is Variant.ON:
                series.append((f"{variant} per SME instruction (≈)", known, "macs_per_sme"))
        else:
            series.append((f"{variant}", known, "gflops"))
    for label, known, figure in series:
        points = [(op.macs, getattr(op, figure)) for op in known if getattr(op, figure)]
        if points:
            x, y = zip(*points, strict=True)
            ax.scatter(x, y, s=22, alpha=0.75, label=label)
    for limit, words in _roofline_limits(m, view):
        ax.axhline(limit, linestyle="--", color="#444444", linewidth=1)
        ax.set_ylim(top=max(limit * 3, ax.get_ylim()[1]))
        ax.text(ax.get_xlim()[0], limit, f" {words}", va="bottom", fontsize=8)
    for axis in (ax.xaxis, ax.yaxis):
        # Minor lines at 2 and 5 of each decade only: matplotlib's default eight cost a tick
        # object each, 40 % of the chart's time (measured: 26 charts, 4.3 s -> 3.3 s on 2 cores)
        axis.set_minor_locator(LogLocator(subs=MINOR_SUBS))
        axis.set_minor_formatter(NullFormatter())  # 2×10⁵, 5×10⁵… overlap
    ax.set_xlabel("operator work (multiply-adds per inference)")
    ax.set_ylabel("multiply-adds per instruction" if view.counted else "achieved GFLOP/s")
    ax.set_title(f"Work and efficiency per operator\n{case_title(m)}", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")
    return _png(fig)


def _roofline_limits(m: Measurement, view: EfficiencyView) -> list[tuple[float, str]]:
    """The ceiling lines and their words: a full-tile outer product per SME instruction at
    SME2-on's SVL for each operand width its SME operators have (an int8-dynamic model's fp32
    layers have FP32's), or the chip's peak GFLOP/s."""
    if view.counted:
        svl = view.svl_bytes or 0
        on = view.variants.get(Variant.ON, ())
        widths = sorted({operand_bits(op.name) for op in on if op.ideal and op.macs_per_sme})
        return [
            (
                ideal_macs_per_sme(svl, bits),
                f"ideal: {ideal_macs_per_sme(svl, bits):,} MACs per {bits}-bit outer product, "
                f"SVL {svl * 8}",
            )
            for bits in widths
        ]
    if m.peak is None or not m.peak.gflops:
        return []
    return [(m.peak.gflops, f"peak {m.peak.gflops:,.0f} GFLOP/s")]


def render_charts(m: Measurement) -> dict[str, bytes]:
    """Every chart of a measurement, by file stem; no latency chart where the profiles count
    instructions (emulated time is no signal); a roofline where the operators' work is known."""
    charts = {"categories": category_chart(m)}
    if not counts_instructions(m):
        charts["latency"] = latency_chart(m)
    view = efficiency_view(m)
    if view is not None:
        charts["roofline"] = roofline_chart(m, view)
    return charts


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
