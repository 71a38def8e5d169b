"""Every execution in a runner process is the same inference: the N-th equals the first.

A program may write over its own inputs while it runs (vit_tiny and squeezesam_like did: their
outputs moved by 2.6× their spread after three executions on inputs set once) and a decode step
mutates its KV cache; warm-up, timed, traced and counted executions must all compute on the inputs
they were given, from the state the method had after loading. Single thread, so bit-identical.
"""

from __future__ import annotations

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
#: state, to have done so twice before the last one. Each is an emulated squeezesam_like
#: inference with SME2 on in the qemu test (~28 s on a 2.3 GHz Xeon VM): not one more.
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


def test_emulated_nth_execution_equals_the_first(
    qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    """The aarch64 runner under qemu, SME2 on, on the example that moved most."""
    spec = next(spec for spec in registered_models() if spec.name == "squeezesam_like")
    artifact = _export(spec.for_emulation(), "fp32")
    outputs = []
    for runs in (1, REPEATED):
        result = qemu_device.run(
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
    _assert_same(outputs[0], outputs[1], "squeezesam_like[fp32] on qemu-sme2, SME2 on")


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
