"""What the qemu-sme2 counted run costs, and where: qemu's own logging or our counting.

Per example (its emulation size; corpus members too with ``--corpus``) × dtype × variant, the run
the device counts (:data:`pytest_sme2.devices.base.EVIDENCE_WARMUP` warm-up executions, then the
counted one, traced) is made four ways:

* ``plain``: the exec log off, as a plain qemu run: the floor;
* ``null``: qemu writing the exec log to /dev/null: qemu's cost of producing the log;
* ``cat``: the log into a FIFO drained by ``cat > /dev/null``: adds the pipe;
* ``count``: the log into a FIFO drained by our counter (the device's counted run, stored),
  also in CPU seconds (qemu's and the counter's: what it costs beside other work);
* ``stored``: the same counted run read back from the store (the next session's cost,
  :mod:`pytest_sme2.devices.stored_counts`).

Each is split by the runner's own timings into the load phase (process start, program load,
method init: everything before the first ``Method::execute``, and the writing of results after
the last) and the executions. The table gives seconds per stage as load+executions, and the
ratio of the counted run to the plain one, whole and executions only. Exports come from the
export cache; the machine should be otherwise idle, as each stage is timed once.

``--suite`` then times the emulated example suite as CI runs it (``pytest tests/test_suite.py
--sme2-device=qemu-sme2 -n 2``, exports cached): once with ``--sme2-recount`` (every variant
counted, storing its count) and once as a warm session runs it (the counts read back).

    python benchmarks/evidence_cost.py [--models toy_cnn] [--dtypes fp32 int8] [--corpus] [--suite]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_sme2.records.device import Variant

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo's models/ and benchmarks/

#: fp32 only by default, so the examples take minutes; ``--dtypes`` adds the others
DEFAULT_DTYPES = ("fp32",)
STAGES = ("plain", "null", "cat", "count", "stored")
REPO = Path(__file__).resolve().parents[1]


def cases(models: list[str] | None, dtypes: list[str], corpus: bool) -> Iterator[tuple[str, str]]:
    """(model, dtype) of every example, and corpus member with ``corpus``, that was asked for."""
    import models as examples  # noqa: F401  (registers the examples)
    from pytest_sme2.export.model_spec import registered_models

    if corpus:
        import benchmarks.corpus_models  # noqa: F401  (registers the corpus)
    for spec in registered_models():
        if models and spec.name not in models:
            continue
        for dtype in dtypes:
            if dtype in spec.dtypes:
                yield spec.name, dtype


def split(seconds: float, timings: Path) -> tuple[float, float]:
    """A run's wall time as (load phase and results, executions), by the runner's timings."""
    executions = sum(json.loads(timings.read_text())["latencies_ms"]) / 1000
    return seconds - executions, executions


def timed(run: Callable[[], object]) -> float:
    """Wall seconds of ``run()``."""
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def cpu_seconds() -> float:
    """CPU seconds this process and its finished children used so far: a counted run's cost
    on a machine whose cores are all busy (qemu, and the counter reading its log)."""
    used = os.times()
    return used.user + used.system + used.children_user + used.children_system


def measure_case(
    model: str, dtype: str, variant: Variant, workdir: Path
) -> tuple[dict[str, tuple[float, float]], float]:
    """Per stage, (load phase, executions) in wall seconds of one case's counted run; and the
    CPU seconds of the ``count`` stage."""
    from pytest_sme2.devices.base import EVIDENCE_WARMUP, evidence_request
    from pytest_sme2.devices.provision import provision_qemu, qemu_command
    from pytest_sme2.devices.qemu import (
        DEFAULT_SME_VECTOR_LENGTH,
        QemuSme2Device,
    )
    from pytest_sme2.export.exporter import export_model
    from pytest_sme2.export.model_spec import get_model
    from pytest_sme2.runner.build import build_runner
    from pytest_sme2.runner.invoke import TIMINGS_NAME, Executions, Launch, RunnerCall, run_runner

    toolchain = provision_qemu(log=lambda _: None)
    binary = build_runner("aarch64", executorch_dir=toolchain.executorch_dir)
    artifact = export_model(get_model(model).for_emulation(), dtype)
    plan = Executions(runs=1, warmup=EVIDENCE_WARMUP, traced=True)
    sme2 = str(variant) == "sme2-on"

    def runner(log: Path | None, where: Path) -> Callable[[], object]:
        prefix = qemu_command(
            toolchain, sme2=sme2, exec_log=log, sme_vector_length=DEFAULT_SME_VECTOR_LENGTH
        )
        return lambda: run_runner(
            binary, RunnerCall(artifact.pte, artifact.inputs, plan, where), Launch(prefix=prefix)
        )

    result: dict[str, tuple[float, float]] = {}
    count_cpu = 0.0
    for stage in STAGES:
        where = workdir / stage
        where.mkdir(parents=True)
        if stage == "plain":
            seconds = timed(runner(None, where))
        elif stage == "null":
            seconds = timed(runner(Path(os.devnull), where))
        elif stage == "cat":
            fifo = where / "log.fifo"
            os.mkfifo(fifo)
            with open(os.devnull, "wb") as sink:
                drain = subprocess.Popen(["cat", str(fifo)], stdout=sink)
                seconds = timed(runner(fifo, where))
                drain.wait()
        else:  # count, then stored: the same store, so the second reads the first back
            device = QemuSme2Device(count_store=workdir / "store")
            cpu = cpu_seconds()
            request = evidence_request(artifact.pte, artifact.inputs, where, variant=variant)
            seconds = timed(lambda: device.counted_run(request))  # noqa: B023
            if stage == "count":
                count_cpu = cpu_seconds() - cpu
        # a stored run executes nothing: its timings are the counted run's, copied
        stored = stage == "stored"
        result[stage] = (seconds, 0.0) if stored else split(seconds, where / TIMINGS_NAME)
    return result, count_cpu


def main() -> None:
    from pytest_sme2.errors import ExportError
    from pytest_sme2.records.device import Variant

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", help="models to run (default: every example)")
    parser.add_argument("--dtypes", nargs="*", default=DEFAULT_DTYPES)
    parser.add_argument("--corpus", action="store_true", help="the corpus members too")
    parser.add_argument(
        "--suite", action="store_true", help="then the emulated suite: recounted, and read back"
    )
    args = parser.parse_args()
    head = ["case", "variant"]
    head += [f"{stage} load+exec s" for stage in STAGES]
    head += ["count CPU s", "count/plain", "count exec/plain exec", "stored/plain"]
    rows = [head]
    with tempfile.TemporaryDirectory(prefix="evidence-cost-") as tmp:
        for model, dtype in cases(args.models, args.dtypes, args.corpus):
            for variant in (Variant.ON, Variant.OFF):
                try:
                    workdir = Path(tmp) / f"{model}-{dtype}-{variant}"
                    stages, count_cpu = measure_case(model, dtype, variant, workdir)
                except ExportError:
                    print(f"{model}[{dtype}]: does not export", flush=True)
                    break
                total = {stage: sum(parts) for stage, parts in stages.items()}
                row = [f"{model}[{dtype}]", str(variant)]
                row += [f"{load:.1f}+{executions:.1f}" for load, executions in stages.values()]
                row += [
                    f"{count_cpu:.1f}",
                    f"{total['count'] / total['plain']:.1f}x",
                    f"{stages['count'][1] / stages['plain'][1]:.1f}x",
                    f"{total['stored'] / total['plain']:.2f}x",
                ]
                rows.append(row)
                print(" | ".join(row), flush=True)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    print()
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    if args.suite:
        suite = [
            sys.executable,
            "-m",
            "pytest",
            "tests/test_suite.py",
            "-q",
            "-p",
            "no:cacheprovider",
        ]
        suite += ["--sme2-device=qemu-sme2", "-n", "2"]
        for what, extra in (
            ("every variant counted", ["--sme2-recount"]),
            ("counts read back", []),
        ):
            start = time.perf_counter()
            done = subprocess.run([*suite, *extra], cwd=REPO, capture_output=True, text=True)
            seconds = time.perf_counter() - start
            last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
            print(
                f"emulated suite, 2 workers, {what}: {seconds / 60:.0f} min {seconds % 60:.0f} s"
                f" ({last})",
                flush=True,
            )


if __name__ == "__main__":
    main()
