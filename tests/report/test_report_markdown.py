"""report.md per test and per session: sections present, numbers taken from the measurement,
one-variant devices say so, recommendations follow the data."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.analysis.profile import profile
from pytest_sme2.analysis.stats import LatencyStats
from pytest_sme2.analysis.trace import Event, Run, Trace
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.outcome import CaseOutcome
from pytest_sme2.records.verdict import Status, Verdict
from pytest_sme2.report import advice, content, evidence
from pytest_sme2.report.html import extra_html
from pytest_sme2.report.markdown import case_report, session_markdown
from pytest_sme2.report.sections import View, case_sections
from pytest_sme2.report.session_report import build_session_report
from tests.measurements import HOST, SME2_DEVICE, counted_measurement, measurement

MS = 1_000_000
SECTIONS = (
    "## Metadata",
    "## Latency",
    "## Category breakdown",
    "## Bottlenecks",
    "## Delegated vs non-delegated",
    "## SME2 kernel evidence",
    "## Gate verdicts",
    "## Recommendations",
)


def test_two_variant_report_has_every_section_with_the_measured_numbers():
    m = measurement(SME2_DEVICE)
    verdicts = (Verdict("speedup-floor", Status.FAIL, "SME2 speedup is below the floor", ("d1",)),)
    text = case_report(m, verdicts, links=[("ops", "a_ops_stats.csv")])
    for section in (*SECTIONS, "## Acceleration per category", "## Artifacts"):
        assert section in text
    assert "Only" not in text.split("## Metadata")[0]  # no one-variant note
    for variant, vm in m.variants.items():
        stats = LatencyStats.of(vm.latencies_ms)
        row = f"| {variant} | {stats.count} | {stats.median_ms:.3f} | {stats.mean_ms:.3f} |"
        assert row in text
    assert m.comparison.speedup.describe() in text
    off, on = m.comparison.off, m.comparison.on
    conv = (
        f"| Convolution | {off.categories_ms['Convolution']:.3f} | "
        f"{100 * off.shares['Convolution']:.1f}% | {on.categories_ms['Convolution']:.3f} | "
        f"{100 * on.shares['Convolution']:.1f}% | "
        f"{m.comparison.category_speedups['Convolution']:.2f}× |"
    )
    assert conv in text
    assert "FAIL (1)" in text and "SME2 speedup is below the floor" in text and "d1" in text
    assert "[ops](a_ops_stats.csv)" in text
    for name in on.packed_operators:
        assert name in text.split("## SME2 kernel evidence")[1].split("##")[0]


@pytest.mark.parametrize("device", [HOST, SME2_DEVICE])
def test_report_md_and_the_html_extra_draw_the_same_built_sections(device):
    """Both renderers draw :func:`case_sections`, each its own view: a section built there is
    in both, with no second place to add it."""
    m = measurement(device)
    links = [("ops", "a_ops_stats.csv")]
    full = case_sections(m, (), View.FULL, links=links)
    brief = case_sections(m, (), View.BRIEF, links=links)
    text = case_report(m, (), links=links)
    headings = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert headings == [section.title for section in full]
    block = extra_html(m, (), {}, links)
    assert [title.split("</h4>")[0] for title in block.split("<h4>")[1:]] == [
        section.title for section in brief
    ]
    assert "Metadata" in headings and "Metadata" not in [section.title for section in brief]


def test_bottlenecks_are_the_operators_above_five_percent_of_e2e():
    m = measurement(
        SME2_DEVICE,
        on_ops=(
            ("Convolution (NHWC, PF32) IGEMM", 2.0),
            ("Fully Connected (NC, PF32) GEMM", 1.0),
            ("Add (ND, F32)", 0.1),  # ~2 % of E2E: not a bottleneck
        ),
    )
    section = case_report(m, ()).split("## Bottlenecks")[1].split("\n## ")[0]
    on = m.variants[Variant.ON].profile
    for op in on.operators:
        assert (f"| {op.name} |" in section) == (op.share > content.BOTTLENECK_SHARE)
    # The SME2-off counterpart of a packed operator is matched despite its renamed dtype.
    conv_off = m.variants[Variant.OFF].profile.operators[0]
    assert conv_off.name == "Convolution (NHWC, F32) IGEMM"
    conv_on = next(op for op in on.operators if op.name.startswith("Convolution"))
    expected = f"{conv_off.per_run_ms:.3f} | {conv_off.per_run_ms / conv_on.per_run_ms:.2f}× |"
    assert expected in section


def test_one_variant_device_says_so_instead_of_empty_comparisons():
    m = measurement(HOST)
    text = case_report(m, ())
    assert f"Only sme2-off was measured ({HOST.limits['speedup']})" in text
    assert "## Acceleration per category" not in text
    assert (
        "sme2-on ms/run" not in text
        and "speedup" not in text.split("## Category")[1].split("##")[0]
    )
    stats = LatencyStats.of(m.variants[Variant.OFF].latencies_ms)
    assert f"| sme2-off | {stats.count} | {stats.median_ms:.3f} |" in text
    assert "No gate was judged" in text


def _with_layer_norm() -> Measurement:
    """Host measurement with a non-delegated LayerNorm taking 3 of 10 ms, two delegate calls."""

    def ev(name, start, end, parent, depth, delegated=False):
        return Event(
            name,
            int(start * MS),
            int(end * MS),
            parent,
            depth,
            delegated,
            "0" if delegated else None,
            -1,
        )

    runs = []
    for index in range(3):
        events = (
            ev("Method::execute", 0, 10, -1, 0),
            ev("DELEGATE_CALL", 0.2, 3.2, 0, 1),
            ev("Convolution (NHWC, F32) IGEMM #1", 0.2, 3.2, 1, 2, True),
            ev("OPERATOR_CALL", 3.5, 6.7, 0, 1),
            ev("native_call_native_layer_norm.out", 3.6, 6.6, 3, 2),
            ev("DELEGATE_CALL", 7, 9.5, 0, 1),
            ev("Fully Connected (NC, F32) GEMM #1", 7, 9.5, 5, 2, True),
        )
        runs.append(Run(index, events[0].end_ns, events))
    trace = Trace(path=None, runs=tuple(runs), setup_events=())
    base = measurement(HOST).variants[Variant.OFF]
    vm = replace(base, profile=profile(trace))
    return Measurement("ln", "fp32", 1, HOST, {Variant.OFF: vm}, interleaved=False)


def test_recommendations_follow_the_data():
    churn = measurement(
        SME2_DEVICE,
        on_ops=(("Convolution (NHWC, PF32) IGEMM", 1.0), *[("Transpose (ND, X32)", 0.5)] * 6),
    )
    said = " ".join(advice.recommendations(churn))
    assert "Layout churn" in said and "6 transposes per run" in said

    ln = _with_layer_norm()
    prof = ln.variants[Variant.OFF].profile
    said = " ".join(advice.recommendations(ln))
    assert f"{100 * prof.non_delegated_ms / prof.latency.mean_ms:.1f}% of E2E runs outside" in said
    assert "native_call_native_layer_norm.out" in said
    assert "split into 2 delegate calls per run" in said

    slow = measurement(SME2_DEVICE, on_latencies=(9.5, 9.6, 9.4, 9.5, 9.55, 9.45))
    speedup = slow.comparison.speedup.value
    said = " ".join(advice.recommendations(slow))
    assert f"SME2 speedup is only {speedup:.2f}×" in said and "Amdahl" in said

    balanced = measurement(
        HOST,
        off_ops=(
            ("Convolution (NHWC, F32) IGEMM", 2.5),
            ("Fully Connected (NC, F32) GEMM", 2.0),
            ("Transpose (ND, X32)", 1.0),
            ("Add (ND, F32)", 1.5),
        ),
    )
    assert advice.recommendations(balanced) == [
        "Nothing stands out: no category or operator crosses the thresholds above."
    ]


def _outcome(nodeid: str, m: Measurement, verdicts=(), case_report: Path | None = None):
    return CaseOutcome(
        nodeid,
        m.device.name,
        m.model,
        m.dtype,
        m.threads,
        m,
        tuple(verdicts),
        case_report=case_report,
    )


def test_session_report_has_one_row_per_test_and_each_report(tmp_path: Path):
    outcomes = [
        _outcome("t.py::test[a]", measurement(SME2_DEVICE), (), tmp_path / "a" / "report.md"),
        _outcome(
            "t.py::test[b]",
            measurement(HOST),
            (Verdict("speedup", Status.SKIP, "host CPU has no SME2"),),
        ),
    ]
    text = session_markdown(build_session_report(outcomes, here=tmp_path), base=tmp_path)
    assert text.startswith("# SME2 session report")
    assert "2 test(s), 0 with failed gates." in text
    for outcome in outcomes:
        assert outcome.measurement is not None
        row = content.summary_row(outcome.measurement, outcome.verdicts)
        assert f"| {outcome.nodeid} | {' | '.join(row.values())} |" in text
        assert f"## SME2 report: {outcome.nodeid}" in text  # demoted one level
    assert "### Metadata" in text and "\n## Metadata" not in text
    assert "[a/report.md](a/report.md)" in text
    assert "- host CPU has no SME2" in text


@pytest.mark.parametrize("device", [HOST, SME2_DEVICE], ids=lambda d: d.name)
def test_tables_render_as_valid_markdown(device):
    m = measurement(device)
    for table in (content.latency_table(m), content.category_table(m), content.delegation_table(m)):
        lines = table.markdown().splitlines()
        widths = {line.count("|") for line in lines}
        assert len(widths) == 1 and len(lines) == len(table.rows) + 2


def test_verdict_word_says_when_a_pass_needed_a_fresh_measurement():
    ok = Verdict("shares[sme2-off]", Status.PASS, "within ±5 points")
    skipped = Verdict("speedup", Status.SKIP, "host CPU has no SME2")
    confirmed = Verdict("confirmed", Status.PASS, "passed in a fresh measurement")
    persisted = Verdict("confirmed", Status.FAIL, "the failure persisted")
    failed = Verdict("shares[sme2-off]", Status.FAIL, "moved")
    assert content.verdict_word([]) == "not judged"
    assert content.verdict_word([ok, skipped]) == "pass, 1 skipped"
    assert content.verdict_word([ok, skipped, confirmed]) == "pass, re-measured, 1 skipped"
    assert content.verdict_word([failed, persisted]) == "FAIL (2)"


MOPA = "kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa"
PACK = "kai_run_lhs_imatmul_pack_x32p2vlx1_x32p_sme"
XNNPACK_CODE = "[libexecutorch_backend_xnnpack.so]"


def _with_operator_kernels(m: Measurement, variant: Variant, *ops: OperatorKernels) -> Measurement:
    vm = m.variants[variant]
    assert vm.evidence is not None
    evidence = replace(vm.evidence, operator_kernels=ops)
    return replace(m, variants={**m.variants, variant: replace(vm, evidence=evidence)})


def test_the_kernel_view_shows_each_top_operators_kernels_off_beside_on() -> None:
    m = counted_measurement()
    m = _with_operator_kernels(
        m,
        Variant.ON,
        OperatorKernels(
            "Convolution (NHWC, PF32) IGEMM #1", 100, {PACK: 60, MOPA: 30, XNNPACK_CODE: 10}
        ),
    )
    m = _with_operator_kernels(
        m,
        Variant.OFF,
        OperatorKernels(
            "Convolution (NHWC, F32) IGEMM #1", 400, {XNNPACK_CODE: 396, "xnn_invoke_runtime": 4}
        ),
    )
    table = evidence.kernel_table(m)
    assert table is not None
    assert table.headers == (
        "operator",
        "kernel",
        "role",
        "sme2-off share of operator",
        "sme2-on share of operator",
    )
    summary, family, *kernels = table.rows
    assert summary == (
        "Convolution (NHWC, PF32) IGEMM",
        "packing · compute · other · no symbol",
        "",
        "0.0% · 0.0% · 1.0% · 99.0%",
        "60.0% · 30.0% · 0.0% · 10.0%",
    )
    # the family of each variant's operators: its largest compute kernel's, none named off
    assert family == ("", "kernel family", "", "unnamed ×1", "SME2 MOPA ×1")
    assert kernels == [
        ("", XNNPACK_CODE, "no symbol", "99.0%", "10.0%"),
        ("", PACK, "packing", "—", "60.0%"),
        ("", MOPA, "compute", "—", "30.0%"),
        ("", "xnn_invoke_runtime", "other", "1.0%", "—"),
    ]
    report = case_report(m, ())
    assert f"## {evidence.KERNEL_VIEW_TITLE}" in report and MOPA in report
    assert "SME2 MOPA ×1" in report
    # no kernels per operator (any device but qemu-sme2): no kernel view
    assert evidence.kernel_table(counted_measurement()) is None
    assert evidence.KERNEL_VIEW_TITLE not in case_report(counted_measurement(), ())
