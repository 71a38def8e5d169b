"""Work per operator from the program itself: a real export's ETRecord gives each delegate call's
GEMM and convolution nodes with their shapes, matched to the real trace's XNNPACK events of that
call — every kind of node the module knows (linear, bmm, mm, addmm, a 3×3, a pointwise, a
depthwise and a transposed convolution) with its multiply-adds worked out by hand — and a call
whose nodes and events do not pair up is "work unknown", never guessed."""

from __future__ import annotations

import zipfile
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
import torch
from torch import nn

from pytest_sme2.analysis.trace import read_etdump
from pytest_sme2.analysis.work import (
    CONV,
    MATMUL,
    NodeWork,
    OperatorWork,
    ProgramWork,
    known_macs,
    operator_work,
    read_program_work,
    unknown,
)
from pytest_sme2.errors import TraceError
from pytest_sme2.export.exporter import Artifact, export_model
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.runner.build import build_runner
from pytest_sme2.runner.invoke import Executions, RunnerCall, run_runner


class Every(nn.Module):
    """One of each GEMM-like node XNNPACK takes, on a 1×8×10×10 image."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1)  # out 1×16×10×10
        self.pointwise = nn.Conv2d(16, 24, 1)  # XNNPACK: a fully connected operator
        self.depthwise = nn.Conv2d(24, 24, 3, stride=2, padding=1, groups=24)  # out 5×5
        self.up = nn.ConvTranspose2d(24, 4, 2, stride=2)  # out 1×4×10×10
        self.linear = nn.Linear(10, 12)
        self.weight = nn.Parameter(torch.randn(10, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.up(self.depthwise(self.pointwise(self.conv(x))))  # 1×4×10×10
        z = self.linear(y)  # 1×4×10×12: M = 40, K = 10, N = 12
        scores = torch.bmm(z.reshape(4, 10, 12), z.reshape(4, 10, 12).transpose(1, 2))
        return torch.mm(scores.reshape(40, 10), self.weight) + 1.0


def _every(seed: int) -> Every:
    torch.manual_seed(seed)
    return Every().eval()


def _image(seed: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, 8, 10, 10, generator=torch.Generator().manual_seed(seed)),)


#: each node's multiply-adds, worked out by hand (a convolution: every output element times one
#: filter's taps; a transposed one: every input element times Cout/groups · taps)
EXPECTED = {
    "conv 3×3 M=100 N=16 K=72": 100 * 16 * 8 * 9,
    "conv 1×1 M=100 N=24 K=16": 100 * 24 * 16,
    "conv 3×3/2 g24 24× M=25 N=1 K=9": 25 * 24 * 9,
    "conv_transpose 2×2/2 M=25 N=16 K=24": 25 * 24 * 4 * 4,
    "linear M=40 N=12 K=10": 40 * 12 * 10,
    "bmm 4× M=10 N=10 K=12": 4 * 10 * 10 * 12,
    "mm M=40 N=6 K=10": 40 * 6 * 10,
}


@pytest.fixture(scope="module")
def every() -> Artifact:
    spec = ModelSpec("work_every", partial(_every, 0), _image, "every GEMM-like node", ("fp32",))
    return export_model(spec, "fp32")


@pytest.fixture(scope="module")
def traced(every: Artifact, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The program's ETDump from one traced inference on the host runner."""
    call = RunnerCall(
        every.pte,
        every.inputs,
        Executions(runs=1, warmup=0, traced=True),
        tmp_path_factory.mktemp("traced"),
    )
    result = run_runner(build_runner("host"), call)
    assert result.etdump is not None
    return result.etdump


def test_every_gemm_like_node_has_its_multiply_adds(every: Artifact) -> None:
    assert every.etrecord is not None
    program = read_program_work(every.etrecord)
    nodes = [node for nodes in program.calls.values() for node in nodes]
    assert {node.shape: node.macs for node in nodes} == EXPECTED
    pointwise = next(node for node in nodes if node.shape.startswith("conv 1×1"))
    assert pointwise.runs_as(MATMUL) and pointwise.runs_as(CONV)
    assert program.macs == sum(EXPECTED.values())


def test_each_event_of_a_real_run_gets_its_nodes_work(every: Artifact, traced: Path) -> None:
    assert every.etrecord is not None
    program = read_program_work(every.etrecord)
    run = read_etdump(traced).runs[0]
    work = operator_work(run, program)
    assert not unknown(work) and known_macs(work) == sum(EXPECTED.values())
    by_shape = {op.shape: op for op in work}
    assert set(by_shape) == set(EXPECTED)
    # XNNPACK runs the 1×1 convolution as a fully connected operator, the transposed one as a
    # deconvolution; the event names are the trace's own
    assert by_shape["conv 1×1 M=100 N=24 K=16"].name.startswith("Fully Connected (NC, F32)")
    assert by_shape["conv_transpose 2×2/2 M=25 N=16 K=24"].name.startswith("Deconvolution")
    assert by_shape["linear M=40 N=12 K=10"].m == 40
    # positions count the run's leaf events, in order
    assert [op.position for op in work] == sorted(op.position for op in work)


def test_a_call_whose_nodes_and_events_do_not_pair_up_is_work_unknown(
    every: Artifact, traced: Path
) -> None:
    assert every.etrecord is not None
    program = read_program_work(every.etrecord)
    call, nodes = max(program.calls.items(), key=lambda item: len(item[1]))
    fewer = ProgramWork({**program.calls, call: nodes[1:]})
    work = operator_work(read_etdump(traced).runs[0], fewer)
    missing = unknown(work)
    assert missing and all(op.call == call and op.shape == "" for op in missing)
    assert len(missing) == len(nodes)
    # a node of another kind in its place is no match either
    swapped = (
        NodeWork("bmm", MATMUL, 1, 1, 1, 1)
        if nodes[0].kind == CONV
        else replace(nodes[0], kind=CONV, pointwise=False)
    )
    other = ProgramWork({**program.calls, call: (swapped, *nodes[1:])})
    assert len(unknown(operator_work(read_etdump(traced).runs[0], other))) == len(nodes)


def test_operator_work_survives_json() -> None:
    op = OperatorWork("Fully Connected (NC, PF32) GEMM #1", 7, 15, 2048, "linear M=1 N=8 K=256", 1)
    assert OperatorWork.from_json(op.to_json()) == op


def test_an_etrecord_without_an_edge_program_says_so(tmp_path: Path) -> None:
    path = tmp_path / "old.etrecord"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("delegate_map", "{}")
        archive.writestr("debug_handle_map", "{}")
    with pytest.raises(
        TraceError, match="without edge_dialect_exported_program/forward: no shapes"
    ):
        read_program_work(path)
    (tmp_path / "not.zip").write_text("x")
    with pytest.raises(TraceError, match="not a zip archive"):
        read_program_work(tmp_path / "not.zip")
