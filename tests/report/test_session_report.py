"""The session report: one model (:mod:`pytest_sme2.report.session_report`) rendered three ways —
report.md, the pytest-html page (its summary and its result table's cells) and the terminal — and
every fact the session found is in each of them."""

from __future__ import annotations

import html
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sme2.judge.time_gates import NO_TIME_RECORD
from pytest_sme2.judge.unused_baselines import UnusedBaselines
from pytest_sme2.progress import Finished
from pytest_sme2.records.outcome import CaseOutcome
from pytest_sme2.records.verdict import Status, Verdict
from pytest_sme2.report.content import FLEET_NOTE, summary_row
from pytest_sme2.report.html import row_cells, summary_html
from pytest_sme2.report.markdown import session_markdown
from pytest_sme2.report.session_report import SessionReport, build_session_report
from pytest_sme2.report.terminal import summary, summary_lines
from tests.measurements import EMULATOR, HOST, OFF_EVIDENCE, ON_EVIDENCE, measurement

QEMU = replace(EMULATOR, name="qemu-sme2")
RATIO = "instruction ratio 2.50× (off ÷ on)"
XFAIL = "export of toy[int8] failed at lower: RuntimeError: no kernel for <int8>"
SKIPPED = Verdict("speedup", Status.SKIP, "host CPU has no SME2")
UNTIMED = Verdict(NO_TIME_RECORD, Status.SKIP, "no time record for this machine class")
LOSS = "Fully Connected (NC, PF32) GEMM costs 60,000 instructions per run with SME2 on vs 30,000"
LOSSES = Verdict("sme2-losses", Status.FAIL, "1 operator(s) of toy[fp32] cost more", (LOSS,))


def _outcome(nodeid: str, device: str, **fields) -> CaseOutcome:
    return CaseOutcome(nodeid, device, "toy", "fp32", 1, **fields)


@pytest.fixture
def report(tmp_path: Path) -> SessionReport:
    """A fleet session: the host's case judged without a time record and with a skipped gate,
    its baseline written; qemu-sme2's counted (an instruction ratio, no time), failed on an SME2
    loss; a case whose export failed; and a baseline no case uses."""
    baselines = tmp_path / "baselines"
    outcomes = [
        _outcome(
            "t.py::test[host-toy-fp32]",
            "host",
            measurement=measurement(HOST),
            verdicts=(UNTIMED, SKIPPED),
            baseline=baselines / "host" / "toy-fp32.json",
            baseline_changes=("new baseline", "sme2-off GEMM share 60% → 50%"),
        ),
        _outcome(
            "t.py::test[qemu-sme2-toy-fp32]",
            "qemu-sme2",
            measurement=measurement(QEMU, on_evidence=ON_EVIDENCE, off_evidence=OFF_EVIDENCE),
            verdicts=(LOSSES,),
        ),
        replace(
            _outcome("t.py::test[qemu-sme2-toy-int8]", "qemu-sme2", unmeasured=("xfailed", XFAIL)),
            dtype="int8",
        ),
    ]
    unused = UnusedBaselines((baselines / "host" / "gone-fp32.json",), removed=False)
    exports = (Finished("export toy[fp32]", 3.5, (("lower", 2.0), ("serialize", 1.5))),)
    return build_session_report(outcomes, here=tmp_path, unused=unused, exports=exports)


def renderings(report: SessionReport) -> dict[str, str]:
    """The report as each reader gets it, as text: report.md, the pytest-html page's summary and
    the result table's extra cells (unescaped), the terminal's lines."""
    cells = "".join("".join(row_cells(row.cells)) for row in report.rows)
    return {
        "report.md": session_markdown(report),
        "pytest-html": html.unescape("".join(summary_html(report)) + cells),
        "terminal": "\n".join(say.text for say in summary(report)),
    }


def test_every_fact_of_the_session_is_in_every_rendering(report: SessionReport) -> None:
    (untimed,) = report.untimed
    assert untimed.startswith("no time record for this machine class in 1 of 2 cases: ")
    facts = {
        "the qemu-sme2 row's speedup": RATIO,
        "the untimed sentence": untimed,
        "the skipped gate": "host CPU has no SME2",
        "the SME2 loss, by case": f"toy[fp32] on qemu-sme2: {LOSS}",
        "the baseline written": "baselines/host/toy-fp32.json",
        "its change": "sme2-off GEMM share 60% → 50%",
        "the unused baseline": "baselines/host/gone-fp32.json",
        "the case not measured": "t.py::test[qemu-sme2-toy-int8]",
        "why": XFAIL,
    }
    for reader, text in renderings(report).items():
        missing = [fact for fact, said in facts.items() if said not in text]
        assert not missing, f"{reader} lacks {missing}"
    # the devices side by side: in the terminal each device is a row of the table already
    rendered = renderings(report)
    assert FLEET_NOTE in rendered["report.md"] and FLEET_NOTE in rendered["pytest-html"]


def test_the_html_speedup_cell_is_the_summary_rows(report: SessionReport) -> None:
    """The cell computed its own time-only figure ("—" on qemu-sme2) beside the ratio above it."""
    qemu = next(row for row in report.rows if row.outcome.device == "qemu-sme2")
    assert qemu.outcome.measurement is not None
    assert qemu.cells == summary_row(qemu.outcome.measurement, qemu.outcome.verdicts)
    assert f'<td class="col-sme2-speedup">{html.escape(RATIO)}</td>' in row_cells(qemu.cells)


def test_the_terminal_says_it_in_sections(report: SessionReport) -> None:
    headings = [say.text for say in summary(report, written=Path("out/report.md")) if say.heading]
    assert headings == [
        "pytest-sme2 slowest exports and builds",
        "pytest-sme2",
        "pytest-sme2 SME2 losses",
        "pytest-sme2 not measured",
        "pytest-sme2 baselines written",
        "pytest-sme2 unused baselines",
    ]
    lines = summary_lines(report)
    assert lines[0].split()[:3] == ["model", "dtype", "device"]
    assert "pass, 2 skipped" in lines[1] and "FAIL (1)" in lines[2]
    assert lines[3:] == ["skipped gate: host CPU has no SME2", *report.untimed]
    said = [say.text for say in summary(report)]
    losses = said.index("pytest-sme2 SME2 losses")
    assert said[losses + 1] == f"toy[fp32] on qemu-sme2: {LOSS}"
    changes = said.index("pytest-sme2 baselines written")
    assert said[changes + 1 : changes + 4] == [
        "baselines/host/toy-fp32.json:",
        "    new baseline",
        "    sme2-off GEMM share 60% → 50%",
    ]
    unused = [say for say in summary(report) if "gone-fp32" in say.text]
    assert [say.colour for say in unused] == ["yellow"]  # listed, not removed


def test_an_empty_session_says_nothing(tmp_path: Path) -> None:
    empty = build_session_report([], here=tmp_path)
    assert summary(empty) == [] and summary_html(empty) == []
    assert summary_lines(empty) == []
