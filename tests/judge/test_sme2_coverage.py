"""SME2 coverage on a real program of mixed quantization, on qemu-sme2: one linear layer 8da4w
(QB4W weights: NEON i8mm, no SME2 kernel in ExecuTorch 1.5.1), two int8-dynamic (QP8, QC8W: SME2
MOPA). The coverage is their work's share, the NEON layer named; a planted change that keeps the
operator kinds and counts (and SME2 kernels running) but moves one int8 layer's kernels to NEON
fails the coverage gate naming it, while the structure and SME2 kernel gates pass."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.export.program_files import ProgramSpec, register_program
from pytest_sme2.export.recipes import lower, to_executorch
from pytest_sme2.judge.baseline import from_measurement
from pytest_sme2.judge.baseline_file import load, save
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gates import judge
from pytest_sme2.judge.moves import Tolerances
from pytest_sme2.measure.plan import MeasurePlan
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status, Verdict
from pytest_sme2.report.efficiency_view import COVERAGE_TITLE
from pytest_sme2.report.markdown import section_markdown
from pytest_sme2.report.sections import View, case_sections
from tests.judge.host_case import measure_case
from tests.measurements import NEON_QB4W_MATMUL, SME2_QP8_MATMUL

ROWS = 16
#: the layers' work: 16 rows through 64 → 64 (8da4w), 64 → 64 and 64 → 32 (int8)
QB4W_MACS, INT8_MACS = ROWS * 64 * 64, ROWS * 64 * 64 + ROWS * 64 * 32
COVERAGE = 100 * INT8_MACS / (QB4W_MACS + INT8_MACS)  # 60 %
INT8_OF_ALL = QB4W_MACS + INT8_MACS  # every layer int8-dynamic


class Mixed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(64, 64)  # 8da4w
        self.second = torch.nn.Linear(64, 64)  # int8-dynamic
        self.third = torch.nn.Linear(64, 32)  # int8-dynamic

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.third(torch.relu(self.second(torch.relu(self.first(x)))))


def _inputs(seed: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(ROWS, 64, generator=torch.Generator().manual_seed(seed)),)


def _export(directory: Path, name: str, int4: tuple[str, ...]) -> ProgramSpec:
    """The program, its ``int4`` layers 8da4w and the others int8-dynamic, quantized as
    ExecuTorch's LLM exporter does (torchao ``quantize_``, one config per layer), lowered to
    XNNPACK with its ETRecord, and registered as ``name``."""
    from torchao.quantization import quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

    model = Mixed().eval()
    in_groups = Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4, weight_granularity=PerGroup(32)
    )
    per_channel = Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int8, weight_granularity=PerAxis(0)
    )
    layers = ("first", "second", "third")
    quantize_(model, in_groups, filter_fn=lambda module, fqn: fqn in int4)
    quantize_(model, per_channel, filter_fn=lambda module, fqn: fqn in layers and fqn not in int4)
    with torch.no_grad():
        exported = torch.export.export(model, _inputs(0))
    edge = lower(exported)
    program = to_executorch(edge)
    pte, etrecord = directory / f"{name}.pte", directory / f"{name}.etrecord"
    pte.write_bytes(program.buffer)
    program.get_etrecord().save(str(etrecord))
    return register_program(name, pte=pte, inputs=_inputs, etrecord=etrecord, dtype="mixed")


def _measured(
    qemu: QemuSme2Device, directory: Path, name: str, int4: tuple[str, ...]
) -> Measurement:
    plan = MeasurePlan(runs=1, rounds=1, warmup=1, traced_runs=1)
    spec = _export(directory, name, int4)
    return measure_case(qemu, spec, directory / "run", plan, dtype="mixed")


@pytest.fixture(scope="module")
def mixed(
    stored_qemu_device: QemuSme2Device, tmp_path_factory: pytest.TempPathFactory
) -> Measurement:
    """The first layer 8da4w, the others int8-dynamic."""
    return _measured(
        stored_qemu_device, tmp_path_factory.mktemp("mixed"), "coverage_mixed", ("first",)
    )


@pytest.fixture(scope="module")
def int8(
    stored_qemu_device: QemuSme2Device, tmp_path_factory: pytest.TempPathFactory
) -> Measurement:
    """Every layer int8-dynamic: one operator kind, every layer on SME2."""
    return _measured(stored_qemu_device, tmp_path_factory.mktemp("int8"), "coverage_int8", ())


def _coverage(verdicts: tuple[Verdict, ...]) -> list[Verdict]:
    return [v for v in verdicts if v.gate.startswith("sme2-coverage")]


def test_mixed_quantization_covers_the_int8_layers_and_names_the_qb4w_one(
    mixed: Measurement,
) -> None:
    (verdict,) = _coverage(judge(mixed, None, Expectations(min_sme2_coverage=50), Tolerances()))
    assert verdict.status is Status.PASS
    assert verdict.message == f"SME2 coverage {COVERAGE:.1f} % ≥ the floor 50 %"
    (failed,) = _coverage(judge(mixed, None, Expectations(min_sme2_coverage=90), Tolerances()))
    assert failed.status is Status.FAIL
    (outside,) = failed.details
    assert outside.startswith("Fully Connected (NC, QP8, F32, QB4W) GEMM #1 @")
    assert outside.endswith("(linear M=16 N=64 K=64): NEON i8mm")
    (section,) = [s for s in case_sections(mixed, (), View.FULL) if s.title == COVERAGE_TITLE]
    text = section_markdown(section)
    assert f"SME2-on ran {COVERAGE:.1f}% of its GEMM and convolution work" in text
    assert "| NEON i8mm |" in text and "QB4W" in text
    # a QP8 GEMM of 16 rows: SME2's matmul, but most of its instructions quantize and pack
    assert "2 of the 2 SME2 operator(s) spend most of their instructions packing operands" in text
    assert "(linear M=16 N=32 K=64): SME2 MOPA, " in text and "of its instructions packing" in text


def _moved_to_neon(m: Measurement, operator: str) -> Measurement:
    """``m`` with ``operator``'s SME2 matmul replaced by the NEON i8mm one (its instructions
    and every other function kept): the kinds, counts and the kernels' presence unchanged."""
    on = m.variants[Variant.ON]
    assert on.evidence is not None

    def moved(op: OperatorKernels) -> OperatorKernels:
        if op.name != operator:
            return op
        functions = {
            (NEON_QB4W_MATMUL if name == SME2_QP8_MATMUL else name): count
            for name, count in op.functions.items()
        }
        return replace(op, functions=functions)

    evidence = replace(
        on.evidence, operator_kernels=tuple(map(moved, on.evidence.operator_kernels))
    )
    return replace(m, variants={**m.variants, Variant.ON: replace(on, evidence=evidence)})


def test_an_int8_layer_leaving_sme2_fails_coverage_where_presence_passes(
    int8: Measurement, tmp_path: Path
) -> None:
    """The presence gate asks of each operator kind that an SME2 kernel ran in it: the kind keeps
    its other layers' SME2 kernels, so only the coverage sees the layer that left."""
    save(tmp_path / "baseline.json", from_measurement(int8, Tolerances()))
    baseline = load(tmp_path / "baseline.json")  # through the file and its schema
    assert baseline is not None
    stored = baseline.variants[str(Variant.ON)].sme2_coverage
    assert stored is not None and stored.percent == 100.0 and len(stored.sme2_operators) == 3
    asked = Expectations(require_sme2_kernels=True)
    same = {v.gate: v for v in judge(int8, baseline, asked, Tolerances())}
    assert same["sme2-kernels"].status is same["sme2-coverage[sme2-on]"].status is Status.PASS
    on = int8.variants[Variant.ON].evidence
    assert on is not None
    second = next(op.name for op in on.operator_kernels if op.name.endswith("GEMM #2"))
    assert SME2_QP8_MATMUL in next(o for o in on.operator_kernels if o.name == second).functions
    by_gate = {
        v.gate: v for v in judge(_moved_to_neon(int8, second), baseline, asked, Tolerances())
    }
    assert by_gate["sme2-kernels"].status is Status.PASS  # SME2 kernels still ran in the kind
    assert by_gate["structure[sme2-on]"].status is Status.PASS  # the same kinds and counts
    coverage = by_gate["sme2-coverage[sme2-on]"]
    assert coverage.status is Status.FAIL
    fall = 100 * ROWS * 64 * 64 / INT8_OF_ALL
    assert coverage.message.startswith(
        f"SME2 coverage of coverage_int8[mixed] on qemu-sme2 fell {fall:.1f} points, 100 % → "
    ), coverage.message
    (left,) = coverage.details
    kind = "Fully Connected (NC, QP8, F32, QC8W) GEMM"
    assert left == f"{kind} #2 @{_call(int8)} (linear M=16 N=64 K=64): now NEON i8mm"


def _call(m: Measurement) -> int:
    (call,) = {op.call for op in m.variants[Variant.ON].work}
    return call


def test_a_baseline_without_coverage_is_not_judged_and_an_update_records_it(
    mixed: Measurement,
) -> None:
    from pytest_sme2.judge.sme2_coverage import SME2_COVERAGE

    now = from_measurement(mixed, Tolerances())
    part = now.variants[str(Variant.ON)]
    older = replace(
        now, variants={**now.variants, str(Variant.ON): replace(part, sme2_coverage=None)}
    )
    (verdict,) = _coverage(judge(mixed, older, Expectations(), Tolerances()))
    assert verdict.status is Status.SKIP and "--sme2-update-baselines records it" in verdict.message
    merged, changes = SME2_COVERAGE.merge(older.variants["sme2-on"], part, Tolerances())
    assert merged["sme2_coverage"] == part.sme2_coverage
    assert changes == [f"SME2 coverage recorded ({round(COVERAGE, 1):g} %)"]
