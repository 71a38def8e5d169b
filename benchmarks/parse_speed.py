"""Parse speed and memory: our ETDump reader + analysis vs ExecuTorch's Inspector.

Makes one real trace (vit_tiny fp32 through the native runner, ≥ 200 runs and ≥ 50 000 events),
then in this one process times ``profile(read_etdump(...))`` and ``Inspector(...).to_dataframe()``
with imports excluded for both, measures each one's peak Python allocation (tracemalloc, in a
separate pass so tracing does not slow the timed one), and finally times our *import + parse*
in a fresh interpreter (the CLI's real cost). Last line:
``speed ratio X.X memory ratio Y.Y`` (Inspector ÷ ours).

    python benchmarks/parse_speed.py [--runs 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import tempfile
import time
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path

MIN_EVENTS = 50_000
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo's models/


def make_trace(directory: Path, runs: int) -> Path:
    import models  # noqa: F401  (registers vit_tiny)
    from pytest_sme2.export.exporter import export_model
    from pytest_sme2.export.model_spec import get_model
    from pytest_sme2.runner.build import build_runner
    from pytest_sme2.runner.invoke import Executions, RunnerCall, run_runner

    artifact = export_model(get_model("vit_tiny"), "fp32")
    result = run_runner(
        build_runner("host"),
        RunnerCall(
            artifact.pte,
            artifact.inputs,
            Executions(runs=runs, warmup=1, threads=1, traced=True),
            directory,
        ),
    )
    assert result.etdump is not None
    return result.etdump


def best_time(call: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def peak_bytes(call: Callable[[], object]) -> int:
    gc.collect()
    tracemalloc.start()
    result = call()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del result
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        etdump = make_trace(Path(tmp), args.runs)

        from pytest_sme2.analysis.profile import profile
        from pytest_sme2.analysis.trace import read_etdump

        trace = read_etdump(etdump)
        events = sum(len(run.events) for run in trace.runs) + len(trace.setup_events)
        print(
            f"trace: {etdump.stat().st_size / 1e6:.1f} MB, {len(trace.runs)} runs, {events} events"
        )
        if len(trace.runs) < 200 or events < MIN_EVENTS:
            sys.exit(f"trace too small ({len(trace.runs)} runs, {events} events): raise --runs")
        del trace

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            from executorch.devtools import Inspector

            inspector_import = time.perf_counter() - start

        def ours() -> object:
            return profile(read_etdump(etdump), warmup=1)

        def inspector() -> object:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return Inspector(etdump_path=str(etdump)).to_dataframe()

        ours_s = best_time(ours, args.repeat)
        inspector_s = best_time(inspector, max(1, args.repeat - 1))
        ours_peak = peak_bytes(ours)
        inspector_peak = peak_bytes(inspector)

        cold = subprocess.run(
            [
                sys.executable,
                "-c",
                "import time; t = time.perf_counter();"
                "from pytest_sme2.analysis.trace import read_etdump;"
                "from pytest_sme2.analysis.profile import profile;"
                f"profile(read_etdump({str(etdump)!r}), warmup=1);"
                "print(time.perf_counter() - t)",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        cold_s = float(cold.stdout.strip())

    print(
        f"ours:      {ours_s:.3f} s ({events / ours_s:,.0f} events/s), "
        f"peak {ours_peak / 1e6:.1f} MB (tracemalloc)"
    )
    print(
        f"Inspector: {inspector_s:.3f} s ({events / inspector_s:,.0f} events/s), "
        f"peak {inspector_peak / 1e6:.1f} MB (tracemalloc); "
        f"its import took {inspector_import:.1f} s"
    )
    print(f"ours, import + parse + analysis in a fresh interpreter: {cold_s:.3f} s")
    print(f"speed ratio {inspector_s / ours_s:.1f} memory ratio {inspector_peak / ours_peak:.1f}")


if __name__ == "__main__":
    main()
