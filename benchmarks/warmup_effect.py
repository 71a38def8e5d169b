"""Does the first execution differ from the second? Instructions per operator, on qemu-sme2.

The counted run of an emulated device pays for every execution it makes (seconds each under the
exec log); a warm-up before the counted one is worth its cost only where the first execution does
work the second does not (XNNPACK's runtime set-up, a weight cache, lazy symbol binding). This
runs every example (its emulation size) × dtype × variant once with two executions, inputs set
before each (the runner does), counts both from one exec log, and prints per case the totals of
execution 1 and 2 and every operator event whose count differs, with what differs outside them.

    python benchmarks/warmup_effect.py [--models toy_cnn vit_tiny] [--dtypes fp32 int8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_sme2.analysis.trace import Trace
    from pytest_sme2.devices.qemu import QemuSme2Device
    from pytest_sme2.records.device import Variant

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo's models/

DEFAULT_DTYPES = ("fp32", "int8", "int8-dynamic", "8da4w")


def operator_counts(trace: Trace) -> list[tuple[str, int]]:
    """The run's leaf events (operators) in order, each with its instructions."""
    from pytest_sme2.analysis.categories import is_leaf

    return [(e.name, e.end_ns - e.start_ns) for e in trace.runs[0].events if is_leaf(e.name)]


def compare(model: str, dtype: str, variant: Variant, device: QemuSme2Device, workdir: Path) -> str:
    """One case's line: both executions' totals and the operators whose counts differ."""
    from pytest_sme2.analysis.attribution import instruction_trace
    from pytest_sme2.analysis.trace import read_etdump
    from pytest_sme2.devices.base import RunRequest
    from pytest_sme2.devices.qemu_count import count_executions
    from pytest_sme2.export.exporter import export_model
    from pytest_sme2.export.model_spec import get_model
    from pytest_sme2.runner.invoke import Executions

    artifact = export_model(get_model(model).for_emulation(), dtype)
    plan = Executions(runs=1, warmup=1, traced=True)
    start = time.perf_counter()
    request = RunRequest(artifact.pte, artifact.inputs, plan, workdir, variant=variant)
    counted = count_executions(device.guest, request)
    result, executions = counted.run, counted.executions
    seconds = time.perf_counter() - start
    assert result.etdump is not None
    trace = read_etdump(result.etdump)
    first, second = (
        instruction_trace(trace, i, executions[i].clock_reads) for i in range(len(executions))
    )
    total = [t.runs[0].e2e_ns for t in (first, second)]
    ops = [operator_counts(t) for t in (first, second)]
    if [name for name, _ in ops[0]] != [name for name, _ in ops[1]]:
        return f"{model}[{dtype}] {variant}: the two executions ran different operators"
    differing = [
        f"{name} {a:,} → {b:,} ({b - a:+,})"
        for (name, a), (_, b) in zip(*ops, strict=True)
        if a != b
    ]
    outside = (total[1] - total[0]) - sum(b - a for (_, a), (_, b) in zip(*ops, strict=True))
    said = "; ".join(differing) if differing else "no operator differs"
    return (
        f"{model}[{dtype}] {variant}: exec1 {total[0]:,} exec2 {total[1]:,} "
        f"({total[1] - total[0]:+,}, outside operators {outside:+,}); {said} [{seconds:.0f} s]"
    )


def main() -> None:
    import models  # noqa: F401  (registers the examples)
    from pytest_sme2.devices.qemu import QemuSme2Device
    from pytest_sme2.errors import ExportError
    from pytest_sme2.export.model_spec import registered_models
    from pytest_sme2.records.device import Variant

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", help="examples to run (default: all)")
    parser.add_argument("--dtypes", nargs="*", default=DEFAULT_DTYPES)
    args = parser.parse_args()
    device = QemuSme2Device()
    device.prepare()
    with tempfile.TemporaryDirectory(prefix="warmup-effect-") as tmp:
        for spec in registered_models():
            if args.models and spec.name not in args.models:
                continue
            for dtype in (d for d in args.dtypes if d in spec.dtypes):
                for variant in (Variant.ON, Variant.OFF):
                    workdir = Path(tmp) / f"{spec.name}-{dtype}-{variant}"
                    try:
                        line = compare(spec.name, dtype, variant, device, workdir)
                    except ExportError as err:
                        line = f"{spec.name}[{dtype}]: does not export ({err})"
                        print(line, flush=True)
                        break
                    print(line, flush=True)


if __name__ == "__main__":
    main()
