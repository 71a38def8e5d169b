"""Load and memory: what loading the program cost each variant, and the memory it held.

ExecuTorch's dashboards track model load time beside latency, and SME2 moves it: XNNPACK and
KleidiAI pack the weights when the method is initialised, differently with SME2 on and off (a
Llama's load went from 13.8 s to 30.2 s on a phone when ExecuTorch moved to KleidiAI's QP8 path,
pytorch/executorch#5162). Every report shows it per variant under "Load and memory".
"""

from __future__ import annotations

from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import MIB, LoadMeasurement, Measurement
from pytest_sme2.report.format import Table, ms, ordered_variants, ratio


def mib(count: int | None) -> str:
    return "—" if count is None else f"{count / MIB:,.1f} MiB"


def init_text(load: LoadMeasurement | None) -> str:
    """Method init as the device measures it: guest instructions where it counts them, else
    the fastest runner process's milliseconds."""
    if load is None:
        return "—"
    if load.init_instructions is not None:
        return f"{load.init_instructions / 1e6:,.2f} M instr"
    return "—" if load.method_init_ms is None else f"{ms(load.method_init_ms)} ms"


def load_table(m: Measurement) -> Table | None:
    """Per variant: program load, method init, planned memory, peak resident memory; None where
    no variant has load figures (a runner that reports none)."""
    loads = {v: m.variants[v].load for v in ordered_variants(m)}
    if not any(loads.values()):
        return None
    rows = []
    for variant, load in loads.items():
        if load is None:
            rows.append((str(variant), "—", "—", "—", "—"))
            continue
        program = "—" if load.program_load_ms is None else f"{ms(load.program_load_ms)} ms"
        rows.append(
            (
                str(variant),
                program,
                init_text(load),
                mib(load.planned_bytes),
                mib(load.peak_rss_bytes),
            )
        )
    # the runner keeps a copy of the planned memory to restore it before each execution
    peak = "peak resident memory (with a copy of the plan)"
    headers = ("variant", "program load", "method init", "planned memory", peak)
    return Table(headers, tuple(rows))


def init_ratio(m: Measurement) -> float | None:
    """Method init, SME2-on ÷ SME2-off (instructions where counted, else time): above 1, SME2
    made loading dearer."""
    on, off = m.variants.get(Variant.ON), m.variants.get(Variant.OFF)
    if on is None or off is None or on.load is None or off.load is None:
        return None
    pairs = (
        (on.load.init_instructions, off.load.init_instructions),
        (on.load.method_init_ms, off.load.method_init_ms),
    )
    for with_sme2, without in pairs:
        if with_sme2 is not None and without:
            return with_sme2 / without
    return None


def load_line(m: Measurement) -> str | None:
    """One sentence on what SME2 did to method init, where both variants were measured."""
    change = init_ratio(m)
    if change is None:
        return None
    on, off = (init_text(m.variants[v].load) for v in (Variant.ON, Variant.OFF))
    return (
        f"Method init (weight packing) with {Variant.ON}: {on} against {off} with "
        f"{Variant.OFF} ({ratio(change)} of it)."
    )
