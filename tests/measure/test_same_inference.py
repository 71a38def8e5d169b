"""Every execution in a runner process is the same inference: the N-th equals the first.

A program may write over its own inputs while it runs (vit_tiny and squeezesam_like did: their
outputs moved by 2.6× their spread after three executions on inputs set once) and a decode step
mutates its KV cache; warm-up, timed, traced and counted executions must all compute on the inputs
they were given, from the state the method had after loading. Single thread, so bit-identical.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_sme2.devices.base import RunRequest
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.errors import ExportError
from pytest_sme2.export.exporter import Artifact, export_model
from pytest_sme2.export.model_spec import ModelSpec, registered_models
from pytest_sme2.records.device import Variant
from pytest_sme2.runner import Executions, RunnerCall, build_runner, run_runner
from pytest_sme2.runner.tensors import read_tensors
from tests.known_failures import example_cases, expect_known

#: Executions of the repeated run: enough for a program that overwrites its inputs, or steps its
#: state, to have done so twice before the last one.
REPEATED = 3

CASES = example_cases()


def _export(spec: ModelSpec, dtype: str) -> Artifact:
    try:
        return export_model(spec, dtype)
    except ExportError as err:  # a known one is its case's strict xfail; any other fails
        raise expect_known(err) from None


def _assert_same(first: list[np.ndarray], last: list[np.ndarray], what: str) -> None:
    assert len(first) == len(last)
    for index, (one, many) in enumerate(zip(first, last, strict=True)):
        moved = np.max(np.abs(one.astype(np.float64) - many.astype(np.float64)), initial=0.0)
        assert np.array_equal(one, many, equal_nan=True), (
            f"{what}: output {index} of execution {REPEATED} differs from execution 1 by up to "
            f"{moved:g} (output spread {np.std(one.astype(np.float64)):g})"
        )


def _outputs_host(artifact: Artifact, runs: int, workdir: Path) -> list[np.ndarray]:
    result = run_runner(
        build_runner(),
        RunnerCall(artifact.pte, artifact.inputs, Executions(runs=runs, warmup=0), workdir),
    )
    assert result.outputs is not None
    return read_tensors(result.outputs)


@pytest.mark.parametrize(("spec", "dtype"), CASES)
def test_nth_execution_equals_the_first(spec: ModelSpec, dtype: str, tmp_path: Path) -> None:
    model = spec.name
    artifact = _export(spec, dtype)
    first = _outputs_host(artifact, 1, tmp_path / "once")
    last = _outputs_host(artifact, REPEATED, tmp_path / "repeated")
    _assert_same(first, last, f"{model}[{dtype}] on host")


def test_traced_and_warmed_up_executions_equal_the_first(tmp_path: Path) -> None:
    """The ETDump's runs and the runs after a warm-up are of the same inference too."""
    spec = next(spec for spec in registered_models() if spec.name == "vit_tiny")
    artifact = _export(spec, "fp32")
    first = _outputs_host(artifact, 1, tmp_path / "once")
    traced = run_runner(
        build_runner(),
        RunnerCall(
            artifact.pte,
            artifact.inputs,
            Executions(runs=2, warmup=2, traced=True),
            tmp_path / "traced",
        ),
    )
    assert traced.outputs is not None
    _assert_same(first, read_tensors(traced.outputs), "vit_tiny[fp32] traced after a warm-up")


def _written_over_inputs(pte: Path) -> list[str]:
    """The tensors ``pte``'s memory plan puts in its inputs' memory and an instruction writes
    (a kernel's or delegate call's argument; a view shares its base's memory and is not one):
    each is written after the input's last read, so a second execution on inputs set once
    computes on them instead."""
    import torch
    from executorch.exir._serialize._program import deserialize_pte_binary
    from executorch.exir.tensor import scalar_type_enum

    found = deserialize_pte_binary(pte.read_bytes())
    plan = getattr(found, "program", found).execution_plan[0]
    sizes = {
        int(scalar_type_enum(dtype)): torch.empty(0, dtype=dtype).element_size()
        for dtype in (
            torch.float32,
            torch.float16,
            torch.int8,
            torch.uint8,
            torch.int32,
            torch.int64,
        )
    }

    def planned(index: int) -> tuple[int, int, int] | None:
        tensor = plan.values[index].val
        where = getattr(tensor, "allocation_info", None)
        if where is None:
            return None
        start = (where.memory_offset_high << 32) + where.memory_offset_low
        return (
            where.memory_id,
            start,
            start + sizes[int(tensor.scalar_type)] * math.prod(tensor.sizes),
        )

    def outputs(call: Any) -> list[int]:
        if hasattr(call, "delegate_index"):  # a delegate call's arguments: inputs, then outputs
            return list(call.args)
        if hasattr(call, "op_index") and "view" not in plan.operators[call.op_index].name:
            return [call.args[-1]]  # an out variant's last argument is its out tensor
        return []

    written = {
        index
        for instruction in plan.chains[0].instructions
        for index in outputs(instruction.instr_args)
        if index not in plan.inputs
    }
    return [
        f"value {other} over input {index}"
        for index in plan.inputs
        if (into := planned(index)) is not None
        for other in sorted(written)
        if (over := planned(other)) is not None
        and over[0] == into[0]
        and over[1] < into[2]
        and into[1] < over[2]
    ]


def test_emulated_nth_execution_equals_the_first(
    narrow_qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    """The aarch64 runner under qemu, SME2 on (KleidiAI's SME2 convolution and GEMM kernels, at
    128-bit vectors), on toy_cnn, whose memory plan writes ``mean``'s output into its input's
    memory: the premise is asserted on the program, so the test cannot pass on a program that
    leaves its inputs alone. (It ran squeezesam_like at 512 bits for the same evidence, four
    emulated SME2-on inferences, ~2 min on a 2.3 GHz Xeon VM; every example program writes over
    its input.)"""
    spec = next(spec for spec in registered_models() if spec.name == "toy_cnn")
    artifact = _export(spec.for_emulation(), "fp32")
    assert _written_over_inputs(artifact.pte), "toy_cnn[fp32] no longer writes over its input"
    outputs = []
    for runs in (1, REPEATED):
        result = narrow_qemu_device.run(
            RunRequest(
                artifact.pte,
                artifact.inputs,
                Executions(runs=runs, warmup=0),
                tmp_path / str(runs),
                variant=Variant.ON,
            )
        )
        assert result.outputs is not None
        outputs.append(read_tensors(result.outputs))
    _assert_same(outputs[0], outputs[1], "toy_cnn[fp32] on qemu-sme2, SME2 on")


def _running_sum() -> Any:
    """A stateful program: a buffer it adds its input to in place, as a KV cache is written."""
    import torch

    class RunningSum(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("total", torch.full((1, 16), 0.5))
            self.linear = torch.nn.Linear(16, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.total.add_(x)
            return self.linear(self.total)

    torch.manual_seed(0)
    return RunningSum().eval()


def _running_sum_inputs(seed: int) -> tuple[Any, ...]:
    import torch

    return (torch.randn(1, 16, generator=torch.Generator().manual_seed(seed)),)


# Not registered: the suite must not parametrize over a test's private model.
RUNNING_SUM = ModelSpec(
    name="running_sum",
    factory=_running_sum,
    inputs=_running_sum_inputs,
    description=_running_sum.__doc__ or "",
    dtypes=("fp32", "int8", "int8-dynamic"),
)


@pytest.mark.parametrize("dtype", RUNNING_SUM.dtypes)
def test_mutable_buffers_start_from_their_initial_state(dtype: str, tmp_path: Path) -> None:
    """Each execution sees the buffer as the program stores it, not as the last one left it:
    every execution is the first step, and it is the eager model's first step (the export
    checks the program against it; calibration runs must not have stepped it either)."""
    artifact = export_model(RUNNING_SUM, dtype)
    assert artifact.program_error is not None and artifact.program_error.ok
    first = _outputs_host(artifact, 1, tmp_path / "once")
    again = _outputs_host(artifact, REPEATED, tmp_path / "repeated")
    _assert_same(first, again, f"running_sum[{dtype}]")
