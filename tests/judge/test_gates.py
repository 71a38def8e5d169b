"""Each gate passing, failing with its reviewer sentence, and skipping with the device's reason."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.errors import ConfigError
from pytest_sme2.judge.baseline import Baseline, Tolerances, from_measurement
from pytest_sme2.judge.baseline_file import Stored
from pytest_sme2.judge.baseline_update import merge
from pytest_sme2.judge.decision import CONFIRMATIONS, Remeasure, failure_report, judge_confirmed
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gates import Judge, judge
from pytest_sme2.judge.lifecycle import decide
from pytest_sme2.judge.policy import Policy
from pytest_sme2.judge.wording import RECORD_IT
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status
from tests.measurements import (
    HOST,
    LHS_QUANT_PACK,
    NEON_QB4W_MATMUL,
    OFF_OPS,
    PF32_MOPA,
    SME2_DEVICE,
    SME2_QP8_MATMUL,
    counted_measurement,
    kernel_measurement,
    measurement,
)

TOL = Tolerances()
POLICY = Policy(TOL)


def by_gate(verdicts):
    return {v.gate: v for v in verdicts}


def confirmed(m: Measurement, base: Baseline | None, remeasure: Remeasure | None):
    """``m`` judged against ``base`` by the default gates, a time-only failure re-measured."""
    return judge_confirmed(m, Judge(POLICY, base, Expectations()), remeasure)


def only_time_gates_failed(verdicts) -> bool:
    return Judge(POLICY, None, Expectations()).only_time_failed(verdicts)


def test_unchanged_measurement_passes_every_gate_against_its_own_baseline():
    m = measurement(SME2_DEVICE)
    verdicts = judge(
        m, from_measurement(m, TOL), Expectations(speedup_floor=2.0, require_sme2_kernels=True), TOL
    )
    assert {v.status for v in verdicts} == {Status.PASS}
    assert failure_report(verdicts, strict=True) is None


def test_speedup_below_floor_fails_with_a_reviewer_sentence():
    m = measurement(SME2_DEVICE)
    verdicts = by_gate(judge(m, None, Expectations(speedup_floor=3.0), TOL))
    v = verdicts["speedup-floor"]
    assert v.status is Status.FAIL
    assert v.message.startswith("SME2 speedup 2.50× (95% CI ")
    assert v.message.endswith("is below the floor 3× for toy[fp32] on phone")


def test_speedup_floor_inside_the_interval_does_not_fail():
    noisy_on = (3.0, 5.0, 3.2, 4.8, 3.1, 4.9)  # CI straddles 2.5
    m = measurement(SME2_DEVICE, on_latencies=noisy_on)
    v = by_gate(judge(m, None, Expectations(speedup_floor=2.5), TOL))["speedup-floor"]
    assert v.status is Status.PASS


def test_speedup_regression_against_baseline():
    base = from_measurement(measurement(SME2_DEVICE), TOL)
    slower_on = (6.0, 6.05, 5.95, 6.0, 6.02, 5.98)
    m = measurement(SME2_DEVICE, on_latencies=slower_on)
    v = by_gate(judge(m, base, Expectations(), TOL))["speedup-baseline"]
    assert v.status is Status.FAIL
    assert "fell below the baseline 2.5×" in v.message


def test_host_without_sme2_skips_speedup_and_kernels_with_reason():
    m = measurement(HOST)
    verdicts = by_gate(
        judge(m, None, Expectations(speedup_floor=1.5, require_sme2_kernels=True), TOL)
    )
    assert verdicts["speedup"].status is Status.SKIP
    assert verdicts["speedup"].message == "host CPU has no SME2"
    assert verdicts["sme2-kernels"].status is Status.SKIP
    assert failure_report(tuple(verdicts.values()), strict=False) is None
    assert "gate skipped under --sme2-strict: host CPU has no SME2" in failure_report(
        tuple(verdicts.values()), strict=True
    )


def test_missing_packed_operators_fail_the_kernel_gate():
    m = measurement(SME2_DEVICE, on_ops=OFF_OPS)
    v = by_gate(judge(m, None, Expectations(require_sme2_kernels=True), TOL))["sme2-kernels"]
    assert v.status is Status.FAIL
    assert v.message == "no packed PF32 operator ran with SME2 on for toy[fp32] on phone"


def test_kernels_without_the_dtypes_packed_operators_fail_the_kernel_gate():
    """Executed SME2 kernels do not excuse an int8 model whose GEMMs fell back to NEON."""
    from tests.measurements import EMULATOR, OFF_EVIDENCE, ON_EVIDENCE

    m = measurement(EMULATOR, on_evidence=ON_EVIDENCE, off_evidence=OFF_EVIDENCE, dtype="int8")
    v = by_gate(judge(m, None, Expectations(require_sme2_kernels=True), TOL))["sme2-kernels"]
    assert v.status is Status.FAIL
    assert v.message.startswith("no packed PQS8 operator ran with SME2 on for toy[int8]")
    assert set(v.details) == {"Convolution (NHWC, PF32) IGEMM", "Fully Connected (NC, PF32) GEMM"}


def test_structure_change_fails_with_a_compact_diff():
    base = from_measurement(measurement(HOST), TOL)
    changed = (*OFF_OPS, ("Transpose (ND, X32)", 1.0))
    m = measurement(HOST, off_ops=changed)
    v = by_gate(judge(m, base, Expectations(), TOL))["structure[sme2-off]"]
    assert v.status is Status.FAIL
    assert v.details == ("Transpose (ND, X32) ×1 → ×2/run",)


def test_share_move_beyond_tolerance_fails_and_names_the_category():
    base = from_measurement(measurement(HOST), TOL)
    m = measurement(
        HOST,
        off_ops=(
            ("Convolution (NHWC, F32) IGEMM", 1.0),
            ("Fully Connected (NC, F32) GEMM", 3.0),
            ("Transpose (ND, X32)", 4.0),
        ),
    )
    v = by_gate(judge(m, base, Expectations(), TOL))["shares[sme2-off]"]
    assert v.status is Status.FAIL
    assert any(d.startswith("Data Movement share 11.1% → 44.4%") for d in v.details)


def test_share_limits_from_the_marker():
    m = measurement(HOST)
    v = by_gate(judge(m, None, Expectations(max_share={"Convolution": 0.3}), TOL))["share-limits"]
    assert v.status is Status.FAIL
    assert v.message.startswith("Convolution share 44.4% is above the limit 30.0%")


def test_latency_is_judged_on_the_fastest_run_so_a_busy_neighbour_does_not_fail_it():
    base = from_measurement(measurement(HOST), TOL)  # fastest 9.9 ms, median 10 ms
    slow = measurement(HOST, off_latencies=(12.0, 12.1, 11.9, 12.05, 11.95, 12.0))
    failed = by_gate(judge(slow, base, Expectations(), TOL))["latency[sme2-off]"]
    assert failed.status is Status.FAIL
    assert failed.message == (
        "E2E latency of toy[fp32] on host (sme2-off) rose 20.2% in raw time (no reference timed) "
        "(fastest of 6 runs 11.9 ms vs baseline 9.9 ms; median 12 ms vs 10 ms), beyond the 3% "
        "tolerance"
    )
    disturbed = measurement(HOST, off_latencies=(10.0, 13.5, 9.92, 14.8, 12.9, 10.2))
    v = by_gate(judge(disturbed, base, Expectations(), TOL))["latency[sme2-off]"]
    assert v.status is Status.PASS
    assert v.message.startswith("E2E latency 1.002× the baseline in raw time (no reference timed)")


@pytest.mark.parametrize(("factor", "status"), [(1.05, Status.FAIL), (1.02, Status.PASS)])
def test_a_few_percent_slower_fails_beyond_the_tolerance_only(factor, status):
    base = from_measurement(measurement(HOST), TOL)
    lat = tuple(factor * x for x in (10.0, 10.1, 9.9, 10.05, 9.95, 10.0))
    v = by_gate(judge(measurement(HOST, off_latencies=lat), base, Expectations(), TOL))
    assert v["latency[sme2-off]"].status is status


def test_another_machine_class_has_its_time_gates_not_judged_but_its_structure_judged():
    base = from_measurement(measurement(HOST), TOL)
    other = replace(HOST, machine_class={**HOST.machine_class, "isa": "avx512f"})
    slow = measurement(HOST, off_latencies=(30.0, 30.1, 29.9, 30.0), off_ops=OFF_OPS[:2])
    verdicts = by_gate(judge(replace(slow, device=other), base, Expectations(), TOL))
    v = verdicts["time-record"]
    assert v.status is Status.SKIP
    assert v.message == (
        f"time gates not judged for toy[fp32] on host: the baseline has no time record for this "
        f"machine class ({other.class_id}: cores: 2, cpu: Test CPU, executorch: 1.5.1, "
        "isa: avx512f); record it with --sme2-update-baselines"
    )
    assert not any(g.startswith(("latency", "shares")) for g in verdicts)
    assert verdicts["structure[sme2-off]"].status is Status.FAIL  # portable: judged everywhere
    strict = failure_report((v,), strict=True)
    assert strict is not None and other.class_id in strict


def test_a_kernel_patch_release_is_a_note_not_another_machine():
    base = from_measurement(measurement(HOST), TOL)
    patched = replace(HOST, fingerprint={**HOST.fingerprint, "os": "Linux 6.1.9"})
    slow = measurement(HOST, off_latencies=(12.0, 12.1, 11.9, 12.05, 11.95, 12.0))
    v = by_gate(judge(replace(slow, device=patched), base, Expectations(), TOL))
    assert v["latency[sme2-off]"].status is Status.FAIL
    assert v["latency[sme2-off]"].details == ("since recorded: os: 'Linux 6.1.1' → 'Linux 6.1.9'",)


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"speedup_flor": 1.2}, "speedup_flor=1.2: unknown keyword; did you mean 'speedup_floor'?"),
        ({"xyz": 1}, "xyz=1: unknown keyword; it takes speedup_floor, max_share, "),
        (
            {"max_share": {"Convolution": "high"}},
            "max_share={'Convolution': 'high'}: 'high' is not of type 'number' "
            "(at max_share.Convolution)",
        ),
        ({"max_share": {"Convolutions": 0.5}}, "max_share={'Convolutions': 0.5}: 'Convolutions' "),
        ({"min_share": {"GEMM": 40}}, "min_share={'GEMM': 40}: 40 is greater than the maximum"),
        ({"min_share": "GEMM"}, "min_share='GEMM': 'GEMM' is not of type 'object'"),
        ({"speedup_floor": 0}, "speedup_floor=0: 0 is less than or equal to the minimum of 0"),
        ({"speedup_floor": float("nan")}, "speedup_floor=nan: nan is not of type 'number', 'null'"),
        (
            {"max_share": {"GEMM": float("inf")}},
            "max_share={'GEMM': inf}: inf is not of type 'number' (at max_share.GEMM)",
        ),
        ({"speedup_floor": "2"}, "speedup_floor='2': '2' is not of type 'number', 'null'"),
        ({"require_sme2_kernels": "yes"}, "require_sme2_kernels='yes': 'yes' is not of type"),
        ({"op_counts": {"Add (ND)": -1}}, "op_counts={'Add (ND)': -1}: -1 is less than the min"),
    ],
)
def test_marker_mistakes_name_the_keyword_and_the_value(kwargs, said):
    with pytest.raises(ConfigError) as failure:
        Expectations.from_marker(kwargs)
    assert str(failure.value).startswith(said)


def test_a_well_formed_marker_gives_its_expectations():
    kwargs = {"speedup_floor": 1.5, "max_share": {"GEMM": 0.5}, "require_sme2_kernels": True}
    assert Expectations.from_marker(kwargs) == Expectations(**kwargs)
    assert Expectations.from_marker({}) == Expectations()


def test_executed_sme2_kernels_prove_dynamic_int8_where_names_cannot():
    from tests.measurements import EMULATOR, OFF_EVIDENCE, ON_EVIDENCE

    m = measurement(
        EMULATOR,
        on_ops=OFF_OPS,
        on_evidence=ON_EVIDENCE,
        off_evidence=OFF_EVIDENCE,
        dtype="int8-dynamic",
    )
    v = by_gate(judge(m, None, Expectations(require_sme2_kernels=True), TOL))["sme2-kernels"]
    assert v.status is Status.PASS
    assert "kai_kernel_matmul_clamp_f32_qai8dxp1vlx4" in v.message


QB4W_FC = "Fully Connected (NC, QP8, F32, QB4W) GEMM"


def test_8da4w_layers_on_neon_fail_require_sme2_kernels_though_an_fp32_layer_ran_sme2():
    """Before, any SME2 kernel in the inference passed the gate: the fp32 layer's did."""
    neon = {NEON_QB4W_MATMUL: 3_000_000, LHS_QUANT_PACK: 1_000_000}
    m = kernel_measurement(
        "8da4w",
        on=(
            OperatorKernels(f"{QB4W_FC} #1", 4_000_000, neon),
            OperatorKernels("Fully Connected (NC, PF32) GEMM #2", 1_000_000, {PF32_MOPA: 10**6}),
        ),
        off=(OperatorKernels(f"{QB4W_FC} #1", 4_000_000, neon),),
    )
    assert m.variants[Variant.ON].evidence.sme2_kernels == (PF32_MOPA,)
    verdict = by_gate(judge(m, None, Expectations(require_sme2_kernels=True), TOL))["sme2-kernels"]
    assert verdict.status is Status.FAIL
    assert verdict.message == (
        f"8da4w layers with QB4W weights ({QB4W_FC}; 66.7% of the inference's instructions) ran "
        f"{NEON_QB4W_MATMUL} with SME2 on: no SME2 kernel, so SME2 cannot speed them up here "
        "(toy[8da4w] on emulator)"
    )
    assert "sme2-kernels" not in by_gate(judge(m, None, Expectations(), TOL))


def test_int8_dynamic_convolutions_on_neon_beside_sme2_fully_connected_layers_pass():
    """Not a false red: mobilenet_v3_small and vit_tiny int8-dynamic run so on qemu-sme2."""
    m = kernel_measurement(
        "int8-dynamic",
        on=(
            OperatorKernels("Convolution (NHWC, QD8, F32, QC8W) IGEMM #1", 10**6, {"[x]": 10**6}),
            OperatorKernels(
                "Fully Connected (NC, QP8, F32, QC8W) GEMM #2", 10**6, {SME2_QP8_MATMUL: 10**6}
            ),
        ),
    )
    verdict = by_gate(judge(m, None, Expectations(require_sme2_kernels=True), TOL))["sme2-kernels"]
    assert verdict.status is Status.PASS and SME2_QP8_MATMUL in verdict.message


def test_dynamic_int8_without_kernel_evidence_is_skipped_not_passed():
    m = measurement(SME2_DEVICE, on_ops=OFF_OPS, dtype="int8-dynamic")
    v = by_gate(judge(m, None, Expectations(require_sme2_kernels=True), TOL))["sme2-kernels"]
    assert v.status is Status.SKIP
    assert v.message.startswith("operator names cannot prove SME2 for int8-dynamic")


def test_only_sme1_kernels_fail_and_sme_in_the_off_variant_fails():
    from pytest_sme2.records.evidence import Sme2Evidence
    from tests.measurements import EMULATOR, OFF_EVIDENCE, ON_EVIDENCE

    sme1 = Sme2Evidence(instructions=90_000, sme_kernels=("kai_run_x_sme_mopa",), source="log")
    m = measurement(EMULATOR, on_evidence=sme1, off_evidence=OFF_EVIDENCE)
    v = by_gate(judge(m, None, Expectations(require_sme2_kernels=True), TOL))["sme2-kernels"]
    assert v.status is Status.FAIL
    assert "only SME1 kernels ran: kai_run_x_sme_mopa" in v.message
    leaky = measurement(EMULATOR, on_evidence=ON_EVIDENCE, off_evidence=ON_EVIDENCE)
    v = by_gate(judge(leaky, None, Expectations(require_sme2_kernels=True), TOL))["sme2-kernels"]
    assert v.status is Status.FAIL and "the off variant is not SME-free" in v.message


def test_instruction_ratio_floor_and_baseline_on_an_emulator():
    from tests.measurements import EMULATOR, OFF_EVIDENCE, ON_EVIDENCE

    m = measurement(EMULATOR, on_evidence=ON_EVIDENCE, off_evidence=OFF_EVIDENCE)
    assert m.instruction_ratio == pytest.approx(215 / 86)
    verdicts = by_gate(judge(m, None, Expectations(instruction_ratio_floor=3.0), TOL))
    floor = verdicts["instruction-ratio-floor"]
    assert floor.status is Status.FAIL
    assert floor.message == (
        "SME2 instruction ratio 2.50× (instructions off ÷ on) is below the floor 3× "
        "for toy[fp32] on emulator"
    )
    base = from_measurement(m, TOL)
    assert base.figures["instruction_ratio"] == 2.5
    assert base.machines == {}  # emulated time gives no time record to store
    worse = measurement(
        EMULATOR, on_evidence=replace(ON_EVIDENCE, instructions=150_000), off_evidence=OFF_EVIDENCE
    )
    v = by_gate(judge(worse, base, Expectations(), TOL))["instruction-ratio-baseline"]
    assert v.status is Status.FAIL and "fell below the baseline 2.5×" in v.message
    assert by_gate(judge(m, base, Expectations(), TOL))["latency"].status is Status.SKIP


def test_outputs_that_differ_on_vs_off_fail_parity_with_the_numbers():
    from pytest_sme2.analysis.numerics import Numerics

    bad = Numerics(max_abs=0.5, max_rel=0.5, tolerance_abs=1e-5, tolerance_rel=1e-4, ok=False)
    v = by_gate(judge(replace(measurement(SME2_DEVICE), parity=bad), None, Expectations(), TOL))
    assert v["parity"].status is Status.FAIL
    assert v["parity"].message == (
        "SME2-on outputs of toy[fp32] on phone differ from SME2-off: max abs err 5.0e-01, "
        "max rel err 5.0e-01 (tolerance abs 1e-05 + rel 0.0001 of the output range)"
    )


def test_shares_are_not_judged_where_time_means_nothing():
    from tests.measurements import EMULATOR, OFF_EVIDENCE, ON_EVIDENCE

    m = measurement(EMULATOR, on_evidence=ON_EVIDENCE, off_evidence=OFF_EVIDENCE)
    base = from_measurement(m, TOL)
    moved = measurement(
        EMULATOR,
        on_evidence=ON_EVIDENCE,
        off_evidence=OFF_EVIDENCE,
        off_ops=(
            ("Convolution (NHWC, F32) IGEMM", 1.0),
            ("Fully Connected (NC, F32) GEMM", 3.0),
            ("Transpose (ND, X32)", 4.0),
        ),
    )
    verdicts = by_gate(judge(moved, base, Expectations(max_share={"GEMM": 0.01}), TOL))
    assert verdicts["shares"].status is Status.SKIP
    assert verdicts["shares"].message == (
        "category shares not judged: emulated time is not a performance signal"
    )
    assert verdicts["share-limits"].status is Status.SKIP


def test_only_failures_of_time_based_gates_are_worth_a_fresh_measurement():
    from pytest_sme2.records.verdict import Verdict

    def v(gate, status=Status.FAIL):
        return Verdict(gate, status, "")

    assert only_time_gates_failed(
        (v("latency[sme2-off]"), v("shares[sme2-on]"), v("parity", Status.PASS))
    )
    assert only_time_gates_failed((v("speedup-floor"),))
    assert not only_time_gates_failed((v("latency[sme2-off]"), v("structure[sme2-off]")))
    assert not only_time_gates_failed((v("sme2-kernels"),))
    assert not only_time_gates_failed((v("latency[sme2-off]", Status.PASS),))


def test_a_time_gate_failure_is_decided_by_fresh_measurements_spread_in_time():
    from pytest_sme2.measure.case import fastest_init

    base = from_measurement(measurement(HOST), TOL)
    slow = measurement(HOST, off_latencies=(12.0, 12.1, 11.9, 12.05, 11.95, 12.0))
    calls = []

    def remeasure(*fresh):
        """Each call takes the next of ``fresh``, as a pause and a settled machine would."""
        queue = list(fresh)

        def take():
            calls.append(queue.pop(0))
            return calls[-1], f"after a pause, machine settled ({len(calls)})"

        return take

    # a burst that outlasts one fresh measurement: the second, taken later, clears the failure
    passed = confirmed(slow, base, remeasure(slow, measurement(HOST), slow))
    # the fresh measurement, its method init the fastest process of all three so far
    assert len(calls) == 2 and passed.measurement == fastest_init(calls[-1], slow, calls[0])
    assert passed.remeasured_after.startswith(
        "E2E latency of toy[fp32] on host (sme2-off) rose 20.2%"
    )
    said = by_gate(passed.verdicts)["confirmed"]
    assert said.status is Status.PASS
    assert said.message.startswith(
        f"passed in fresh measurement 2 of up to {CONFIRMATIONS} (after a pause, machine "
        "settled (2)); the first had failed: E2E latency"
    )
    assert failure_report(passed.verdicts, strict=False) is None

    # a regression fails every one of them
    calls.clear()
    persisted = confirmed(slow, base, remeasure(*[slow] * 3))
    assert len(calls) == CONFIRMATIONS == 3
    assert by_gate(persisted.verdicts)["latency[sme2-off]"].status is Status.FAIL
    assert failure_report(persisted.verdicts, strict=False).endswith(
        "the failure persisted in 3 fresh measurements spread in time (after a pause, machine "
        "settled (1); after a pause, machine settled (2); after a pause, machine settled (3))"
    )


def test_structure_failures_and_just_written_baselines_are_not_re_measured():
    base = from_measurement(measurement(HOST), TOL)
    changed = measurement(HOST, off_ops=(*OFF_OPS, ("Transpose (ND, X32)", 1.0)))

    def never():
        raise AssertionError("a changed graph is not a disturbance of the machine")

    judged = confirmed(changed, base, never)
    assert judged.remeasured_after is None and judged.measurement is changed
    assert by_gate(judged.verdicts)["structure[sme2-off]"].status is Status.FAIL
    slow = measurement(HOST, off_latencies=(12.0, 12.1, 11.9, 12.05, 11.95, 12.0))
    assert confirmed(slow, base, None).remeasured_after is None


def test_structure_is_portable_across_cpus_that_spell_dynamic_int8_differently():
    qd8 = (("Fully Connected (NC, QD8, F32, QC8W) GEMM", 2.0), ("Convert (NC, F32, QD8)", 0.5))
    qdu8 = tuple((name.replace("QD8", "QDU8"), ms) for name, ms in qd8)
    base = from_measurement(measurement(HOST, off_ops=qdu8, dtype="int8-dynamic"), TOL)
    assert set(base.variants["sme2-off"].operators) == {name for name, _ in qd8}
    m = measurement(HOST, off_ops=qd8, dtype="int8-dynamic")
    assert by_gate(judge(m, base, Expectations(), TOL))["structure[sme2-off]"].status is Status.PASS


def test_instructions_per_inference_are_judged_per_variant_at_one_percent():
    from tests.measurements import EMULATOR, OFF_EVIDENCE, ON_EVIDENCE

    m = measurement(EMULATOR, on_evidence=ON_EVIDENCE, off_evidence=OFF_EVIDENCE)
    base = from_measurement(m, TOL)
    unchanged = by_gate(judge(m, base, Expectations(), TOL))
    assert unchanged["instructions[sme2-on]"].status is Status.PASS
    assert unchanged["instructions[sme2-on]"].message == (
        "instructions (sme2-on) 86,000 → 86,000 per inference (+0.00%)"
    )
    more = measurement(
        EMULATOR,
        on_evidence=replace(ON_EVIDENCE, instructions=87_806),  # +2.1 %, same ratio or not
        off_evidence=replace(OFF_EVIDENCE, instructions=219_515),
    )
    verdicts = by_gate(judge(more, base, Expectations(), TOL))
    assert verdicts["instructions[sme2-on]"].status is Status.FAIL
    assert verdicts["instructions[sme2-on]"].message == (
        "instructions of toy[fp32] on emulator (sme2-on) rose 86,000 → 87,806 per inference "
        "(+2.10%), beyond the 1% tolerance"
    )
    assert verdicts["instruction-ratio-baseline"].status is Status.PASS  # uniform: ratio blind
    fewer = measurement(
        EMULATOR, on_evidence=replace(ON_EVIDENCE, instructions=80_000), off_evidence=OFF_EVIDENCE
    )
    news = by_gate(judge(fewer, base, Expectations(), TOL))["instructions[sme2-on]"]
    assert news.status is Status.PASS and news.message.startswith("fewer instructions (sme2-on)")
    assert not only_time_gates_failed(tuple(verdicts.values()))


def test_counted_instructions_name_the_operators_that_grew_and_judge_instruction_shares():
    from tests.measurements import ON_OPS, counted_measurement

    base = from_measurement(counted_measurement(), TOL)
    stored = base.variants["sme2-on"]
    assert stored.operator_instructions == {
        "Convolution (NHWC, PF32) IGEMM": 1_000_000,
        "Fully Connected (NC, PF32) GEMM": 1_000_000,
        "Transpose (ND, X32)": 1_000_000,
    }
    assert stored.instruction_shares["Data Movement"] == 0.25  # of 4 M: 3 ops + 1 M outside
    unchanged = judge(counted_measurement(), base, Expectations(), TOL)
    assert not [v for v in unchanged if v.status is Status.FAIL]
    assert by_gate(unchanged)["instruction-shares[sme2-on]"].message == (
        "category instruction shares within ±5 points"
    )

    grown = ((ON_OPS[0][0], 1.06), *ON_OPS[1:])  # the convolution does 6 % more work
    verdicts = by_gate(judge(counted_measurement(on_ops=grown), base, Expectations(), TOL))
    failed = verdicts["instructions[sme2-on]"]
    assert failed.status is Status.FAIL
    assert failed.message == (
        "instructions of toy[fp32] on emulator (sme2-on) rose 4,000,000 → 4,060,000 per "
        "inference (+1.50%), beyond the 1% tolerance; grew: Convolution (NHWC, PF32) IGEMM"
    )
    assert failed.details == ("Convolution (NHWC, PF32) IGEMM: 1,000,000 → 1,060,000 (+6.0%)",)
    assert verdicts["instruction-shares[sme2-on]"].status is Status.PASS  # +0.9 points only

    layout = ((ON_OPS[0][0], 0.5), ON_OPS[1], (ON_OPS[2][0], 1.5))  # same total, moved work
    verdicts = by_gate(judge(counted_measurement(on_ops=layout), base, Expectations(), TOL))
    assert verdicts["instructions[sme2-on]"].status is Status.PASS
    moved = verdicts["instruction-shares[sme2-on]"]
    assert moved.status is Status.FAIL
    assert moved.message == (
        "category instruction shares of toy[fp32] on emulator (sme2-on) moved beyond ±5 points"
    )
    assert "Data Movement instruction share 25.0% → 37.5% (+12.5 points)" in moved.details
    assert not only_time_gates_failed((moved,))  # deterministic: no re-measure


def test_share_limits_judge_instruction_shares_where_the_profile_counts_instructions():
    from tests.measurements import counted_measurement

    limits = Expectations(max_share={"Data Movement": 0.2})
    (verdict,) = [
        v for v in judge(counted_measurement(), None, limits, TOL) if v.gate == "share-limits"
    ]
    assert verdict.status is Status.FAIL
    assert verdict.message.startswith("Data Movement instruction share 25.0% is above the limit")


def _edge(quantity: str, m: Measurement, factor: float) -> Baseline:
    """``m``'s own baseline with one stored quantity set so that ``m`` lies ``factor``
    tolerances away from it (positive: ``m`` above the stored value)."""
    b = from_measurement(m, TOL)
    on, off = b.variants["sme2-on"], b.variants["sme2-off"]
    if quantity == "instructions":
        stored = round(on.instructions / (1 + factor * TOL.instruction_percent / 100))
        return replace(b, variants={**b.variants, "sme2-on": replace(on, instructions=stored)})
    if quantity == "instruction ratio":
        ratio = b.figures["instruction_ratio"] / (1 + factor * TOL.instruction_percent / 100)
        return replace(b, figures={**b.figures, "instruction_ratio": ratio})
    if quantity == "instruction shares":
        shares = {**off.instruction_shares}
        shares["Convolution"] -= factor * TOL.share_points / 100
        off = replace(off, instruction_shares=shares)
        return replace(b, variants={**b.variants, "sme2-off": off})
    ((class_id, record),) = b.machines.items()
    times = record.variants["sme2-off"]
    if quantity == "latency":
        fastest = times.latency.min_ms / (1 + factor * TOL.latency_percent / 100)
        times = replace(times, latency=replace(times.latency, min_ms=fastest))
        record = replace(record, variants={**record.variants, "sme2-off": times})
    elif quantity == "shares":
        shares = {**times.shares}
        shares["Convolution"] -= factor * TOL.share_points / 100
        times = replace(times, shares=shares)
        record = replace(record, variants={**record.variants, "sme2-off": times})
    else:  # speedup: the interval's end nearest the stored value lies ``factor`` tolerances off
        s = record.speedup
        near = s.low if factor > 0 else s.high
        stored_speedup = near / (1 + factor * TOL.speedup_percent / 100)
        record = replace(record, speedup=replace(s, value=stored_speedup))
    return replace(b, machines={class_id: record})


#: quantity → the gate judging it, what the update's change line says, when the gate fails
#: ("above": the measurement above the stored value is worse), and the measurement judged
MOVED_RULES = {
    "latency": ("latency[sme2-off]", "sme2-off fastest run", "above", SME2_DEVICE),
    "shares": ("shares[sme2-off]", "sme2-off Convolution share", "either", SME2_DEVICE),
    "speedup": ("speedup-baseline", "speedup", "below", SME2_DEVICE),
    "instructions": ("instructions[sme2-on]", "sme2-on instructions/inference", "above", None),
    "instruction ratio": ("instruction-ratio-baseline", "instruction ratio", "below", None),
    "instruction shares": (
        "instruction-shares[sme2-off]",
        "sme2-off instruction shares moved",
        "either",
        None,
    ),
}


@pytest.mark.parametrize("factor", [-1.02, -0.98, 0.98, 1.02])
@pytest.mark.parametrize("quantity", list(MOVED_RULES))
def test_gates_and_the_baseline_update_agree_on_moved_at_the_edges_of_tolerance(quantity, factor):
    """Just inside a tolerance nothing moved: the gate passes quietly and an update keeps the
    stored value. Just beyond it, the update records the new value, and the gate fails (a move
    for the worse) or says to record it (for the better)."""
    gate, change, fails, device = MOVED_RULES[quantity]
    m = measurement(device) if device is not None else counted_measurement()
    stored = _edge(quantity, m, factor)
    verdict = by_gate(judge(m, stored, Expectations(), TOL))[gate]
    _, changes = merge(stored, from_measurement(m, TOL), TOL)
    moved = abs(factor) > 1
    assert any(line.startswith(change) or f"] {change}" in line for line in changes) is moved
    assert (verdict.status is Status.FAIL or RECORD_IT in verdict.message) is moved, verdict
    worse = fails == "either" or (fails == "above") is (factor > 0)
    assert (verdict.status is Status.FAIL) is (moved and worse), verdict


def test_decide_writes_a_missing_baseline_fails_once_and_carries_out_nothing_itself(tmp_path):
    m = measurement(SME2_DEVICE)
    path = tmp_path / "toy-fp32.json"
    first = decide(m, Stored(None), path, Expectations(), POLICY, remeasure=None)
    assert first.baseline == from_measurement(m, TOL) and first.changes == ("new baseline",)
    assert first.failure.startswith(f"no baseline for toy[fp32] on phone: wrote {path}")
    assert not path.exists()  # writing it is the plugin's to do
    update = Policy(TOL, update=True)
    again = decide(m, Stored(first.baseline), path, Expectations(), update, remeasure=None)
    assert again.baseline is None and again.changes == () and again.failure is None
    assert again.verdicts == judge(m, first.baseline, Expectations(), TOL)


def test_decide_confirms_a_time_failure_on_a_fresh_measurement(tmp_path):
    stored = from_measurement(measurement(SME2_DEVICE), TOL)
    slow = measurement(SME2_DEVICE, off_latencies=(12.0, 12.1, 11.9, 12.0, 12.0, 12.0))
    fresh = measurement(SME2_DEVICE)
    decision = decide(
        slow,
        Stored(stored),
        tmp_path / "b.json",
        Expectations(),
        POLICY,
        remeasure=lambda: (fresh, "in a fresh measurement"),
    )
    assert decision.measurement == fresh and decision.failure is None
    assert decision.remeasured_after and "latency" in decision.remeasured_after
    assert decision.baseline is None


MOPA = "kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa"
PACK = "kai_run_lhs_imatmul_pack_x32p2vlx1_x32p_sme"
NEON = "xnn_f32_igemm_minmax_ukernel_6x8__aarch64_neonfma_ld128"


def _with_conv_kernels(conv: str, *functions: str) -> Measurement:
    """An emulator's measurement whose SME2-on convolution ran ``functions`` (as qemu-sme2
    counts them per operator event)."""
    from tests.measurements import ON_EVIDENCE

    m = counted_measurement()
    on = m.variants[Variant.ON]
    conv_kernels = OperatorKernels(conv + " #1", 10 * len(functions), dict.fromkeys(functions, 10))
    evidence = replace(
        on.evidence or ON_EVIDENCE,
        operator_kernels=(conv_kernels, OperatorKernels("Transpose (ND, X32) #1", 5, {"[lib]": 5})),
    )
    return replace(m, variants={**m.variants, Variant.ON: replace(on, evidence=evidence)})


PF32_CONV = "Convolution (NHWC, PF32) IGEMM"


def test_a_changed_sme2_kernel_selection_is_reported_by_name():
    stored = from_measurement(_with_conv_kernels(PF32_CONV, PACK, MOPA), TOL)
    assert stored.variants["sme2-on"].operator_sme2_kernels == {PF32_CONV: (MOPA,)}
    unchanged = by_gate(
        judge(_with_conv_kernels(PF32_CONV, PACK, MOPA), stored, Expectations(), TOL)
    )
    assert unchanged["kernel-selection"].status is Status.PASS
    other = MOPA.replace("biasf32_sme2_mopa", "b_2vlx2vl_sme2_mopa")
    changed = _with_conv_kernels(PF32_CONV, PACK, other)
    verdict = by_gate(judge(changed, stored, Expectations(require_sme2_kernels=True), TOL))[
        "kernel-selection"
    ]
    assert verdict.status is Status.PASS and RECORD_IT in verdict.message
    assert verdict.details == (f"{PF32_CONV}: SME2 kernel {MOPA} → {other}",)


def test_an_sme2_kernel_gone_after_a_library_update_fails_require_sme2_kernels():
    stored = from_measurement(_with_conv_kernels(PF32_CONV, PACK, MOPA), TOL)
    # the update runs the convolution on NEON: the operator is renamed F32, no SME2 kernel in it
    neon = _with_conv_kernels("Convolution (NHWC, F32) IGEMM", NEON)
    required = by_gate(judge(neon, stored, Expectations(require_sme2_kernels=True), TOL))
    verdict = required["kernel-selection"]
    assert verdict.status is Status.FAIL
    assert PF32_CONV in verdict.message and "require_sme2_kernels" in verdict.message
    assert verdict.details == (f"{PF32_CONV}: SME2 kernel {MOPA} no longer runs, none does",)
    # without the marker keyword the change is reported, not failed
    reported = by_gate(judge(neon, stored, Expectations(), TOL))["kernel-selection"]
    assert reported.status is Status.PASS and reported.details == verdict.details
    # and a baseline update records it, saying what changed
    _, changes = merge(stored, from_measurement(neon, TOL), TOL)
    assert f"sme2-on {verdict.details[0]}" in changes


def test_a_baseline_without_kernels_per_operator_judges_no_kernel_selection():
    old = from_measurement(counted_measurement(), TOL)
    assert old.variants["sme2-on"].operator_sme2_kernels == {}
    verdicts = by_gate(
        judge(
            _with_conv_kernels(PF32_CONV, MOPA), old, Expectations(require_sme2_kernels=True), TOL
        )
    )
    assert "kernel-selection" not in verdicts


def test_an_operator_kind_the_user_removed_is_reported_not_failed():
    """Not a false red: the stored kind is gone from the model, not fallen back to NEON."""
    removed = "Batch Matrix Multiply (NC, PF32) GEMM"
    stored = from_measurement(_with_conv_kernels(removed, MOPA), TOL)
    now = _with_conv_kernels(PF32_CONV, MOPA)
    assert all(op.name != removed for op in now.variants[Variant.ON].profile.operators)
    verdict = by_gate(judge(now, stored, Expectations(require_sme2_kernels=True), TOL))[
        "kernel-selection"
    ]
    assert verdict.status is Status.PASS
    assert f"{removed}: no longer in the model (it ran {MOPA})" in verdict.details


def test_a_run_that_saw_the_opposite_of_its_label_fails_naming_what_it_saw():
    """An "off" whose shim hid SME2 but not SME, an "on" that saw no SME2: each fails in one line
    naming what the runner saw; a runner that reported nothing is "not judged"."""
    from tests.measurements import SEEN

    m = measurement(SME2_DEVICE)
    on, off = m.variants[Variant.ON], m.variants[Variant.OFF]
    lied = replace(
        m,
        variants={
            Variant.ON: replace(on, seen=replace(SEEN[Variant.ON], sme2=False, svl_bytes=None)),
            Variant.OFF: replace(off, seen=replace(SEEN[Variant.OFF], sme=True)),
        },
    )
    verdicts = by_gate(judge(lied, None, Expectations(), TOL))
    assert verdicts["label[sme2-on]"].status is Status.FAIL
    assert verdicts["label[sme2-on]"].message == (
        "sme2-on run of toy[fp32] on phone saw no SME2: it is not the run its label says (the "
        "runner saw SME, not SME2; XNNPACK with SME2 kernels, by getauxval(AT_HWCAP2))"
    )
    assert verdicts["label[sme2-off]"].status is Status.FAIL
    assert "sme2-off run of toy[fp32] on phone saw SME:" in verdicts["label[sme2-off]"].message
    unknown = replace(m, variants={**m.variants, Variant.OFF: replace(off, seen=None)})
    skipped = by_gate(judge(unknown, None, Expectations(), TOL))["label[sme2-off]"]
    assert skipped.status is Status.SKIP and "did not report what it saw" in skipped.message
    assert by_gate(judge(m, None, Expectations(), TOL))["label[sme2-on]"].status is Status.PASS
