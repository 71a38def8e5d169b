"""Build Measurements from hand-made traces, for judging and baseline tests that need exact numbers.

The traces follow the real nesting (Method::execute ⊃ DELEGATE_CALL ⊃ XNNPACK ops); end-to-end
tests elsewhere run the real runner.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.analysis.kernel_names import Isa, kernel_isa
from pytest_sme2.analysis.ops import parse_op_name
from pytest_sme2.analysis.profile import INSTRUCTIONS, profile
from pytest_sme2.analysis.trace import Event, Run, Trace
from pytest_sme2.devices.base import Device
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.model_spec import get_model
from pytest_sme2.measure.case import measure
from pytest_sme2.measure.deadline import Deadline
from pytest_sme2.measure.plan import CaseProgram, MeasurePlan
from pytest_sme2.records.device import DeviceInfo, Variant
from pytest_sme2.records.evidence import CpuSeen, Sme2Evidence
from pytest_sme2.records.measurement import Measurement, VariantMeasurement

MS = 1_000_000


def make_trace(ops: Sequence[tuple[str, float]], runs: int = 3) -> Trace:
    """``runs`` identical runs of a delegate call holding ``ops`` (name, ms) back to back + 1 ms."""
    built = []
    for index in range(runs):
        t = 0.5
        events = [None, None]
        for number, (name, ms) in enumerate(ops, start=1):
            events.append(
                Event(f"{name} #{number}", int(t * MS), int((t + ms) * MS), 1, 2, True, "0", -1)
            )
            t += ms
        events[1] = Event("DELEGATE_CALL", int(0.5 * MS), int(t * MS), 0, 1, False, None, 0)
        events[0] = Event("Method::execute", 0, int((t + 0.5) * MS), -1, 0, False, None, -1)
        built.append(Run(index=index, e2e_ns=events[0].end_ns, events=tuple(events)))
    return Trace(path=None, runs=tuple(built), setup_events=())


HOST_CLASS = {"cpu": "Test CPU", "cores": "2", "isa": "avx2 fma", "executorch": "1.5.1"}
HOST = DeviceInfo(
    name="host",
    fingerprint={**HOST_CLASS, "os": "Linux 6.1.1", "python": "3.11.7"},
    machine_class=HOST_CLASS,
    has_sme2=False,
    variants=(Variant.OFF,),
    time_meaningful=True,
    limits={"speedup": "host CPU has no SME2", "sme2": "host CPU has no SME2"},
)

SME2_DEVICE = DeviceInfo(
    name="phone",
    fingerprint={"cpu": "SME2 CPU", "cores": "8", "executorch": "1.5.1", "android": "16"},
    machine_class={"cpu": "SME2 CPU", "cores": "8", "executorch": "1.5.1"},
    has_sme2=True,
    variants=(Variant.ON, Variant.OFF),
    time_meaningful=True,
)

EMULATOR = DeviceInfo(
    name="emulator",
    fingerprint={"qemu": "11.1.3", "executorch": "1.5.1"},
    machine_class={"qemu": "11.1.3", "executorch": "1.5.1"},
    has_sme2=True,
    variants=(Variant.ON, Variant.OFF),
    time_meaningful=False,
    limits={
        "speedup": "emulated time is not a performance signal",
        "latency": "emulated time is not a performance signal",
    },
)

SME2_KERNEL = "kai_kernel_matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa"
ON_EVIDENCE = Sme2Evidence(
    instructions=86_000, sme_instructions=13_000, sme2_kernels=(SME2_KERNEL,), source="exec log"
)
OFF_EVIDENCE = Sme2Evidence(instructions=215_000, sme_instructions=0, source="exec log")

OFF_OPS = (
    ("Convolution (NHWC, F32) IGEMM", 4.0),
    ("Fully Connected (NC, F32) GEMM", 3.0),
    ("Transpose (ND, X32)", 1.0),
)
ON_OPS = (
    ("Convolution (NHWC, PF32) IGEMM", 1.0),
    ("Fully Connected (NC, PF32) GEMM", 1.0),
    ("Transpose (ND, X32)", 1.0),
)


#: What a runner reports it saw, as its label says: SME2 with SME2 on, nothing with it off.
SEEN = {
    Variant.ON: CpuSeen("getauxval(AT_HWCAP2)", True, True, 64, True),
    Variant.OFF: CpuSeen("getauxval(AT_HWCAP2)", False, False, None, True),
}


def variant(
    v: Variant, ops, latencies: Sequence[float], evidence: Sme2Evidence | None = None
) -> VariantMeasurement:
    """A variant with timing-only latencies and the profile of ``ops``, whose runner saw what
    its label says; its ETDump was never written (the reports then leave out the per-event
    files), its trace is kept in memory as a measurement keeps the one it parsed (the gates that
    compare traced runs read it)."""
    trace = make_trace(ops)
    return VariantMeasurement(
        variant=v,
        latencies_ms=tuple(latencies),
        timing_warmup=0,
        profile=profile(trace),
        etdump=Path("x.etdump").absolute(),
        evidence=evidence,
        seen=SEEN[v],
        trace=trace,
    )


def measurement(
    device: DeviceInfo = HOST,
    *,
    off_latencies: Sequence[float] = (10.0, 10.1, 9.9, 10.05, 9.95, 10.0),
    on_latencies: Sequence[float] = (4.0, 4.05, 3.95, 4.0, 4.02, 3.98),
    off_ops=OFF_OPS,
    on_ops=ON_OPS,
    on_evidence: Sme2Evidence | None = None,
    off_evidence: Sme2Evidence | None = None,
    dtype: str = "fp32",
    reference_ms: Sequence[float] = (),
) -> Measurement:
    variants = {Variant.OFF: variant(Variant.OFF, off_ops, off_latencies, off_evidence)}
    if Variant.ON in device.variants:
        on = variant(Variant.ON, on_ops, on_latencies, on_evidence)
        variants = {Variant.ON: on, **variants}
    return Measurement(
        model="toy",
        dtype=dtype,
        threads=1,
        device=device,
        variants=variants,
        interleaved=len(variants) == 2,
        reference_ms=tuple(reference_ms),
    )


def counted_variant(v: Variant, ops, evidence: Sme2Evidence) -> VariantMeasurement:
    """A variant as qemu-sme2 measures it: its profile is one inference timed in instructions
    (1 "ms" of ``ops`` = a million instructions), and the evidence counts that inference."""
    counted = make_trace(ops, runs=1)
    evidence = replace(evidence, instructions=counted.runs[0].e2e_ns)
    return replace(variant(v, ops, (1.0,), evidence), profile=profile(counted, unit=INSTRUCTIONS))


def counted_measurement(*, on_ops=ON_OPS, off_ops=OFF_OPS) -> Measurement:
    """An emulator's measurement whose profiles count instructions, as qemu-sme2's do."""
    return Measurement(
        model="toy",
        dtype="fp32",
        threads=1,
        device=EMULATOR,
        variants={
            Variant.ON: counted_variant(Variant.ON, on_ops, ON_EVIDENCE),
            Variant.OFF: counted_variant(Variant.OFF, off_ops, OFF_EVIDENCE),
        },
        interleaved=True,
    )


def measure_toy_cnn(
    device: Device,
    plan: MeasurePlan,
    workdir: Path,
    *,
    deadline: Deadline | None = None,
    expected_outputs: Path | None = None,
) -> Measurement:
    """toy_cnn fp32 really measured on ``device`` (its outputs checked against
    ``expected_outputs`` where given)."""
    import models  # noqa: F401  (registers toy_cnn)

    artifact = export_model(get_model("toy_cnn"), "fp32")
    program = CaseProgram("toy_cnn", "fp32", artifact.pte, artifact.inputs, artifact.etrecord)
    if expected_outputs is not None:
        program = replace(program, expected_outputs=expected_outputs)
    return measure(device, program, plan, workdir, deadline=deadline)


#: kernels ExecuTorch 1.5.1 ran on qemu-sme2 (a two-layer MLP, batch 8, SME2 on): int8-dynamic
#: fully connected layers run this SME2 matmul after quantizing and packing their input; 8da4w
#: ones run the NEON i8mm matmul with SME2 on as off
SME2_QP8_MATMUL = "kai_kernel_matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa"
NEON_QB4W_MATMUL = "kai_kernel_matmul_clamp_f32_qai8dxp4x8_qsi4c32p4x8_16x4x32_opt32_neon_i8mm"
LHS_QUANT_PACK = "kai_run_lhs_quant_pack_qai8dxp_f32"
PF32_MOPA = "kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa"


def kernel_measurement(
    dtype: str, on: Sequence[OperatorKernels], off: Sequence[OperatorKernels] = ()
) -> Measurement:
    """An emulator's measurement whose SME2-on and -off inferences ran the operator events
    ``on`` and ``off`` (default: none) with their functions, as qemu-sme2 counts them: each
    profile is those events timed in instructions (a million instructions = 1 "ms") plus a
    million of framework, the evidence their kernels."""

    def counted(v: Variant, events: Sequence[OperatorKernels]) -> VariantMeasurement:
        functions = [name for op in events for name in op.functions]
        evidence = Sme2Evidence(
            sme2_kernels=tuple(sorted({n for n in functions if kernel_isa(n) is Isa.SME2})),
            source="exec log",
            operator_kernels=tuple(events),
        )
        ops = [(parse_op_name(op.name).key, op.instructions / MS) for op in events]
        return counted_variant(v, ops, evidence)

    return Measurement(
        model="toy",
        dtype=dtype,
        threads=1,
        device=EMULATOR,
        variants={
            Variant.ON: counted(Variant.ON, on),
            Variant.OFF: counted(Variant.OFF, off),
        },
        interleaved=True,
    )


def scaled(m: Measurement, *, init: float = 1.0, rss: float = 1.0) -> Measurement:
    """``m`` with every variant's method init time and peak resident memory scaled."""
    variants = {}
    for variant, vm in m.variants.items():
        load = vm.load
        assert load is not None and load.method_init_ms and load.peak_rss_bytes
        variants[variant] = replace(
            vm,
            load=replace(
                load,
                method_init_ms=load.method_init_ms * init,
                peak_rss_bytes=round(load.peak_rss_bytes * rss),
            ),
        )
    return replace(m, variants=variants)
