"""What the reports say about the SME2 path of GEMM-like operators (judged by the kernels that
ran in them where qemu-sme2 counts them, by name elsewhere) and about the work outside the
delegate, which leads the delegation view when it dominates."""

from __future__ import annotations

import re
from dataclasses import replace

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.analysis.profile import profile
from pytest_sme2.analysis.trace import Event, Run, Trace
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.report import advice, content
from pytest_sme2.report.html import extra_html
from pytest_sme2.report.markdown import case_report
from tests.measurements import (
    HOST,
    LHS_QUANT_PACK,
    MS,
    NEON_QB4W_MATMUL,
    PF32_MOPA,
    SME2_QP8_MATMUL,
    kernel_measurement,
    measurement,
)

QP8_FC = "Fully Connected (NC, QP8, F32, QC8W) GEMM"
QB4W_FC = "Fully Connected (NC, QP8, F32, QB4W) GEMM"
F16_DOT = "kai_kernel_matmul_clamp_f16_f16_f16p2vlx2b_1x16vl_sme2_dot"


def _int8_dynamic() -> Measurement:
    """The issue's case: a QP8 fully connected layer (24.2 % of the inference) whose
    instructions are 74.9 % quantize-and-pack of its input and 25.1 % the SME2 matmul."""
    fc = OperatorKernels(
        f"{QP8_FC} #1", 2_420_000, {LHS_QUANT_PACK: 1_812_580, SME2_QP8_MATMUL: 607_420}
    )
    rest = OperatorKernels("Convolution (NHWC, PF32) IGEMM #2", 6_580_000, {PF32_MOPA: 6_580_000})
    return kernel_measurement("int8-dynamic", on=(fc, rest))


def test_an_sme2_kernel_in_an_operator_is_its_sme2_path_whatever_its_name() -> None:
    m = _int8_dynamic()
    said = advice.sme2_path_advice(m)
    assert not any("ran no SME2 kernel" in s or "did not take" in s for s in said)
    assert said == [
        f"{QP8_FC} (24.2% of E2E) runs SME2 kernels, but 74.9% of its instructions pack its "
        f"input ({LHS_QUANT_PACK}): SME2 made its matmul cheap, not the packing. Dynamic int8 "
        "quantizes every input at run time; static int8 quantizes ahead of time."
    ]
    # without kernels per operator only the name is left, and QP8 names no packing
    on = m.variants[Variant.ON]
    named = replace(m, variants={**m.variants, Variant.ON: replace(on, evidence=None)})
    (by_name,) = advice.sme2_path_advice(named)
    assert by_name.startswith(
        f"GEMM-like operators that did not take the SME2 packed path with SME2 on: {QP8_FC} (24.2%)"
    )


def test_8da4w_layers_on_neon_are_said_once_naming_the_kernel_that_ran() -> None:
    neon = {NEON_QB4W_MATMUL: 7_000_000, LHS_QUANT_PACK: 1_000_000}
    m = kernel_measurement("8da4w", on=(OperatorKernels(f"{QB4W_FC} #1", 8_000_000, neon),))
    sentence = (
        f"8da4w layers with QB4W weights ({QB4W_FC}; 88.9% of the inference's instructions) ran "
        f"{NEON_QB4W_MATMUL} with SME2 on: no SME2 kernel, so SME2 cannot speed them up here."
    )
    assert advice.sme2_path_advice(m) == [sentence]
    assert case_report(m, ()).count(f"{NEON_QB4W_MATMUL} with SME2 on") == 1


def test_an_operator_on_neon_beside_sme2_layers_of_its_weight_type_is_named_apart() -> None:
    """mobilenet_v3_small fp16 on qemu-sme2: 40 of 42 F16 fully connected layers ran NEON."""
    m = kernel_measurement(
        "fp16",
        on=(
            OperatorKernels("Fully Connected (NC, F16) GEMM #1", 4_000_000, {"[x]": 4_000_000}),
            OperatorKernels("Fully Connected (NC, PF16) GEMM #2", 10**6, {F16_DOT: 10**6}),
        ),
    )
    assert advice.sme2_path_advice(m) == [
        "GEMM-like operators that ran no SME2 kernel with SME2 on (exec log), though other "
        "layers of their weight type did: Fully Connected (NC, F16) GEMM (66.7%). XNNPACK chose "
        "another kernel for them (by shape or input type); the kernel view shows which."
    ]


def _whisper_like() -> Measurement:
    """A host measurement spending half its E2E in an attention mask's non-delegated ops."""

    def ev(name: str, start: float, end: float, parent: int, delegated: bool = False) -> Event:
        depth = 0 if parent < 0 else 2 if delegated or name.startswith("native") else 1
        debug_id = "0" if delegated else None
        return Event(name, int(start * MS), int(end * MS), parent, depth, delegated, debug_id, -1)

    events = (
        ev("Method::execute", 0, 10, -1),
        ev("DELEGATE_CALL", 0.1, 4.8, 0),
        ev("Fully Connected (NC, F32) GEMM #1", 0.1, 4.8, 1, True),
        ev("OPERATOR_CALL", 4.8, 7.8, 0),
        ev("native_call_where.self_out", 4.8, 7.8, 3),
        ev("OPERATOR_CALL", 7.8, 9.8, 0),
        ev("native_call_eq.Scalar_out", 7.8, 9.8, 5),
        ev("OPERATOR_CALL", 9.8, 9.9, 0),
        ev("native_call_mul.out", 9.8, 9.9, 7),
        ev("OPERATOR_CALL", 9.9, 10.0, 0),
        ev("native_call_add.out", 9.9, 10.0, 9),
    )
    trace = Trace(path=None, runs=(Run(0, events[0].end_ns, events),), setup_events=())
    base = measurement(HOST).variants[Variant.OFF]
    vm = replace(base, profile=profile(trace))
    return Measurement("whisper", "fp32", 1, HOST, {Variant.OFF: vm}, interleaved=False)


def test_dominant_non_delegated_operators_lead_the_delegation_view() -> None:
    m = _whisper_like()
    headline = content.non_delegated_headline(m)
    assert headline == (
        "52.0% of E2E (sme2-off) runs outside the delegate, in ExecuTorch's portable kernels, "
        "where SME2 cannot help: native_call_where.self_out 30.0%, native_call_eq.Scalar_out "
        "20.0%, native_call_add.out 1.0% and 1 more kind(s)."
    )
    section = case_report(m, ()).split("## Delegated vs non-delegated")[1]
    assert section.index(headline) < section.index("| variant |")
    page = extra_html(m, (), {})
    assert page.index("52.0% of E2E (sme2-off)") < page.index("delegate calls/run")
    # all delegated: nothing to lead with
    assert content.non_delegated_headline(measurement(HOST)) is None


#: A decode step as ExecuTorch lowers it without the custom SDPA: its Data Movement is the cache
#: write and GQA's K/V repeat, its Elementwise the mask (ms per run)
DECODER_OPS = (
    ("Fully Connected (NC, PF32) GEMM", 1.0),
    ("native_call_expand_copy.out", 1.2),
    ("native_call_index_put.out", 0.5),
    ("native_call_where.self_out", 0.9),
    ("native_call_eq.Scalar_out", 0.4),
    ("Transpose (ND, X32)", 0.05),
)


def mixed_trace(ops: tuple[tuple[str, float], ...], runs: int = 3) -> Trace:
    """``runs`` runs of one delegate call holding the XNNPACK ``ops``, then each
    ``native_call_*`` one under its own ``OPERATOR_CALL``, as ExecuTorch traces a program that
    XNNPACK took in part (ms per run)."""
    built = []
    for index in range(runs):
        t, events = 0.5, [Event("Method::execute", 0, 0, -1, 0, False, None, -1)]
        delegated = [(n, d) for n, d in ops if not n.startswith("native_call_")]
        events.append(Event("DELEGATE_CALL", int(t * MS), 0, 0, 1, False, None, 0))
        for number, (name, ms) in enumerate(delegated, start=1):
            events.append(
                Event(f"{name} #{number}", int(t * MS), int((t + ms) * MS), 1, 2, True, "0", -1)
            )
            t += ms
        events[1] = events[1]._replace(end_ns=int(t * MS))
        for name, ms in ops:
            if name.startswith("native_call_"):
                call = len(events)
                events.append(
                    Event("OPERATOR_CALL", int(t * MS), int((t + ms) * MS), 0, 1, False, None, 0)
                )
                events.append(Event(name, int(t * MS), int((t + ms) * MS), call, 2, False, None, 0))
                t += ms
        events[0] = events[0]._replace(end_ns=int((t + 0.5) * MS))
        built.append(Run(index=index, e2e_ns=events[0].end_ns, events=tuple(events)))
    return Trace(path=None, runs=tuple(built), setup_events=())


def _with_ops(m: Measurement, ops: tuple[tuple[str, float], ...]) -> Measurement:
    variants = {v: replace(vm, profile=profile(mixed_trace(ops))) for v, vm in m.variants.items()}
    return replace(m, variants=variants)


def test_a_decoders_data_movement_and_mask_are_told_as_what_they_are() -> None:
    m = replace(_with_ops(measurement(), DECODER_OPS), tokens=1)
    said = advice.recommendations(m)
    text = " ".join(said)
    assert "Layout churn" not in text and "channels-last" not in text
    assert "fuse activations" not in text
    (data_movement,) = [s for s in said if s.startswith("Data Movement is")]
    assert "native_call_expand_copy.out ×1 (" in data_movement
    assert "a repeat of the key/value heads" in data_movement
    assert (
        "native_call_index_put.out ×1 (" in data_movement and "the KV-cache write" in data_movement
    )
    assert "model.use_sdpa_with_kv_cache=True" in data_movement
    assert "--use_custom_sdpa --use_custom_kv_cache" in data_movement
    (elementwise,) = [s for s in said if s.startswith("Elementwise is")]
    assert "native_call_where.self_out" in elementwise and "attention mask" in elementwise


def test_a_vision_models_broadcast_copy_is_no_kv_repeat_and_its_transposes_are_layout() -> None:
    vision = (
        ("Convolution (NHWC, PF32) IGEMM", 1.0),
        ("native_call_expand_copy.out", 1.0),
        ("Transpose (ND, X32)", 0.1),
    )
    said = " ".join(advice.recommendations(_with_ops(measurement(), vision)))
    assert "a tensor copied out to a broadcast shape" in said
    assert "key/value" not in said and "custom SDPA" not in said
    layout = (("Convolution (NHWC, PF32) IGEMM", 1.0), ("Transpose (ND, X32)", 0.6))
    said = " ".join(advice.recommendations(_with_ops(measurement(), layout)))
    assert "Layout churn: Data Movement is" in said and "channels-last" in said


#: The same decode step exported with ExecuTorch's custom SDPA and KV cache (export_llm's
#: use_sdpa_with_kv_cache): attention and the cache write are llama:: kernels outside the
#: delegate, as tests/e2e/test_custom_ops.py measures them; a cast is left outside beside them
CUSTOM_KERNEL_OPS = (
    ("Fully Connected (NC, PF32) GEMM", 1.0),
    ("native_call_custom_sdpa.out", 0.9),
    ("native_call_update_cache.out", 0.6),
    ("native_call__to_dim_order_copy.out", 0.3),
)


def test_a_program_with_the_llm_kernels_is_not_told_to_export_with_them_or_delegate_them() -> None:
    said = advice.recommendations(replace(_with_ops(measurement(), CUSTOM_KERNEL_OPS), tokens=1))
    text = " ".join(said)
    assert "use_sdpa_with_kv_cache" not in text and "--use_custom_sdpa" not in text
    (outside,) = [s for s in said if "outside the delegate" in s]
    # the cast is told to become delegable; the LLM kernels are named as what they are
    delegable = outside.split("Make these operators delegable")[0]
    assert "native_call__to_dim_order_copy.out" in delegable
    assert "custom_sdpa" not in delegable and "update_cache" not in delegable
    assert re.search(
        r"native_call_custom_sdpa\.out \([\d.]+%\), native_call_update_cache\.out \([\d.]+%\) are "
        r"ExecuTorch's LLM kernels \(llama::.*outside the delegate by design",
        outside,
    ), outside
    # and only they outside: nothing to make delegable
    alone = (CUSTOM_KERNEL_OPS[0], CUSTOM_KERNEL_OPS[1], CUSTOM_KERNEL_OPS[2])
    said = " ".join(advice.recommendations(replace(_with_ops(measurement(), alone), tokens=1)))
    assert "delegable" not in said and "outside the delegate by design" in said
