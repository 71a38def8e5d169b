"""A counted qemu-sme2 run of a program with ExecuTorch's LLM custom kernels, counted twice: from
the exec log narrowed to leave torch's libraries out (what the device does) and from the whole
log. Prints each count (method init, then every execution) and its wall time; the counts must be
equal, the narrowed one much faster.

    python benchmarks/narrowed_count.py PROGRAM.pte [--variant sme2-off] [--position 8]

PROGRAM.pte: an ``export_llm`` program with the KV cache, the custom SDPA and a dynamic sequence
length, e.g. the one ``tests/e2e/test_custom_ops.py`` exports into
``<cache>/tests/custom-llama-*/custom_llama.pte``. It is run as one decode step: a token at
``--position``. Both counts use the narrowed run's fixed guest layout (qemu's ``-R``), so they
differ only by the log's narrowing.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from pytest_sme2.devices.base import EVIDENCE_WARMUP, RunRequest
from pytest_sme2.devices.exec_filter import fixed_layout
from pytest_sme2.devices.log_fifo import read_while
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.devices.qemu_count import count_executions
from pytest_sme2.devices.qemu_log import EXECUTE_SYMBOL, INIT_SYMBOL, count_calls
from pytest_sme2.records.device import Variant
from pytest_sme2.runner.invoke import Executions
from pytest_sme2.runner.tensors import write_tensors


def _whole(
    device: QemuSme2Device,
    program: Path,
    inputs: Path,
    variant: Variant,
    plan: Executions,
    workdir: Path,
) -> list[int]:
    """The count from qemu's whole exec log (the device's counting, without the narrowing)."""
    guest = device.guest
    libraries = sorted((guest.toolchain.executorch_dir / "lib").glob("*.so"))
    fifo = workdir.resolve() / "whole.fifo"
    os.mkfifo(fifo)
    prefix = fixed_layout(guest.prefix(variant, exec_log=fifo))
    request = RunRequest(program, inputs, plan, workdir, variant=variant)
    calls, _ = read_while(
        fifo,
        lambda: count_calls(fifo, libraries, EXECUTE_SYMBOL, INIT_SYMBOL),
        lambda: guest.run(request, prefix),
    )
    return [call.total for call in calls]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("program", type=Path)
    parser.add_argument("--variant", default=str(Variant.ON), choices=[str(v) for v in Variant])
    parser.add_argument("--position", type=int, default=8)
    args = parser.parse_args()
    variant = Variant(args.variant)
    device = QemuSme2Device()
    plan = Executions(runs=1, warmup=EVIDENCE_WARMUP, traced=True)
    with tempfile.TemporaryDirectory() as scratch:
        inputs = Path(scratch) / "inputs.tensors"
        write_tensors(inputs, [np.array([[7]], np.int64), np.array([args.position], np.int64)])
        start = time.monotonic()
        narrowing = RunRequest(
            args.program, inputs, plan, Path(scratch) / "narrowed", variant=variant
        )
        counted = count_executions(device.guest, narrowing)
        narrowed = [
            c.total for c in ([counted.init] if counted.init else []) + [*counted.executions]
        ]
        print(f"narrowed {variant}: {narrowed} in {time.monotonic() - start:.0f} s", flush=True)
        start = time.monotonic()
        workdir = Path(scratch) / "whole"
        workdir.mkdir()
        whole = _whole(device, args.program, inputs, variant, plan, workdir)
        print(f"whole    {variant}: {whole} in {time.monotonic() - start:.0f} s")
        print("equal" if whole == narrowed else "DIFFERENT")


if __name__ == "__main__":
    main()
