"""``require_sme2_kernels`` where the device saw kernels run but none of them SME: the evidence has
a source (XNNPACK's kernel log on a Mac or a phone, qemu's exec log) and names no SME2 kernel, no
SME1 kernel and no kernels per operator — what a mac or android run of a runner whose kernels all
fell back to NEON gives. That is a failure on every device kind and for every dtype: packed
operator names alone must not pass it (they cannot tell SME1 from SME2, and a dynamic int8 or
8da4w case has none), and no proof at all must not become a skip."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_sme2.analysis.kernel_names import ExecutedKernel
from pytest_sme2.devices.kernel_log import kernel_evidence
from pytest_sme2.judge.baseline import Tolerances
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gates import judge
from pytest_sme2.records.device import DeviceInfo, Variant
from pytest_sme2.records.verdict import Status
from tests.measurements import EMULATOR, measurement

#: The shape of each device kind that shows executed kernels, and where its evidence comes from.
SME2_MAC = DeviceInfo(
    name="mac",
    fingerprint={"chip": "Apple M4", "executorch": "1.5.1"},
    machine_class={"chip": "Apple M4", "executorch": "1.5.1"},
    has_sme2=True,
    variants=(Variant.ON, Variant.OFF),
    time_meaningful=True,
)
SME2_PHONE = DeviceInfo(
    name="android:serial=R5CX1234",
    fingerprint={"model": "SM-S938B", "soc": "SM8750", "executorch": "1.5.1"},
    machine_class={"model": "SM-S938B", "soc": "SM8750", "cpu_mask": "all"},
    has_sme2=True,
    variants=(Variant.ON, Variant.OFF),
    time_meaningful=True,
)
QEMU_SME2 = replace(EMULATOR, name="qemu-sme2")
DEVICES = {
    "mac": (SME2_MAC, "XNNPACK kernel log", None),
    "android": (SME2_PHONE, "XNNPACK kernel log (logcat)", None),
    "qemu-sme2": (QEMU_SME2, "qemu exec log", 86_000),
}

#: Each dtype's SME2-on operators: named packed for the dtype (fp32, fp16, static int8), which
#: alone would look like SME, or named alike on NEON (dynamic int8, 8da4w)
DTYPES = {
    "fp32": (("Convolution (NHWC, PF32) IGEMM", 1.0), ("Fully Connected (NC, PF32) GEMM", 1.0)),
    "fp16": (("Convolution (NHWC, PF16) IGEMM", 1.0), ("Fully Connected (NC, PF16) GEMM", 1.0)),
    "int8": (("Convolution (NHWC, PQS8, QC8W) IGEMM", 1.0),),
    "int8-dynamic": (("Fully Connected (NC, QP8, F32, QC8W) GEMM", 1.0),),
    "8da4w": (("Fully Connected (NC, QP8, F32, QB4W) GEMM", 1.0),),
}
OFF_OPS = (("Fully Connected (NC, F32) GEMM", 3.0),)
NEON_GEMM = "xnn_f32_gemm_minmax_ukernel_6x8__aarch64_neonfma_ld128"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kind", list(DEVICES))
def test_kernels_seen_and_none_of_them_sme_fail_require_sme2_kernels(kind: str, dtype: str) -> None:
    device, source, instructions = DEVICES[kind]
    ran = (ExecutedKernel(NEON_GEMM, 2, kind="gemm"),)
    neon_only = kernel_evidence([NEON_GEMM], source=source, instructions=instructions, executed=ran)
    assert neon_only.source and neon_only.kernels
    assert not (neon_only.sme2_kernels or neon_only.sme_kernels or neon_only.operator_kernels)
    m = measurement(
        device,
        on_ops=DTYPES[dtype],
        off_ops=OFF_OPS,
        on_evidence=neon_only,
        off_evidence=neon_only,
        dtype=dtype,
    )
    verdicts = judge(m, None, Expectations(require_sme2_kernels=True), Tolerances())
    (gate,) = [v for v in verdicts if v.gate == "sme2-kernels"]
    assert gate.status is Status.FAIL
    assert gate.message == (
        f"no SME2 kernel executed with SME2 on for toy[{dtype}] on {device.name} ({source})"
    )
