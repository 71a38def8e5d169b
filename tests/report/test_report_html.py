"""pytest-html content and charts, from hand-made measurements."""

from __future__ import annotations

import base64
import html
import re
import struct

import pytest

from pytest_sme2.analysis.stats import LatencyStats
from pytest_sme2.records.device import Variant
from pytest_sme2.records.outcome import CaseOutcome
from pytest_sme2.records.verdict import Status, Verdict
from pytest_sme2.report import content
from pytest_sme2.report.charts import DPI, data_uri, render_charts
from pytest_sme2.report.html import COLUMNS, extra_html, row_cells
from pytest_sme2.report.session_report import summary_cells
from tests.measurements import HOST, SME2_DEVICE, measurement

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(png: bytes) -> tuple[int, int]:
    assert png.startswith(PNG_SIGNATURE)
    width, height = struct.unpack(">II", png[16:24])  # IHDR comes first
    return width, height


@pytest.mark.parametrize("device", [HOST, SME2_DEVICE], ids=lambda d: d.name)
def test_charts_are_pngs_of_their_figure_size(device):
    charts = render_charts(measurement(device))
    assert set(charts) == {"categories", "latency"}
    for png in charts.values():
        width, height = png_size(png)
        assert width >= 4 * DPI and height >= 4 * DPI


def test_extra_html_embeds_every_chart_and_the_tables():
    m = measurement(SME2_DEVICE)
    charts = render_charts(m)
    verdicts = (Verdict("latency[sme2-on]", Status.PASS, "E2E latency <ratio>", ()),)
    page = extra_html(m, verdicts, charts, [("report.md", "a/report.md?x=1&y=2")])
    sources = re.findall(r'<img class="sme2-chart" data-chart="(\w+)"[^>]* src="([^"]+)"', page)
    assert [name for name, _ in sources] == list(charts)
    for name, src in sources:
        assert src == data_uri(charts[name])
        assert base64.b64decode(src.split(",", 1)[1]) == charts[name]
    # latency, categories, top operators, delegation, verdicts; no non-delegated operator here,
    # so a sentence instead of that table
    assert page.count('<table class="sme2-table">') == 5
    assert "None: every operator is delegated." in page
    assert "E2E latency &lt;ratio&gt;" in page  # escaped
    assert 'href="a/report.md?x=1&amp;y=2"' in page
    assert content.speedup_text(m) in page
    for op in m.variants[Variant.ON].profile.top_operators(10):
        assert f"<td>{op.name}</td>" in page


def test_one_variant_extra_shows_the_note():
    m = measurement(HOST)
    page = extra_html(m, (), render_charts(m))
    assert "Only sme2-off was measured" in page
    assert "No gate was judged." in page


def test_result_table_cells_are_the_summary_rows():
    m = measurement(SME2_DEVICE)
    outcome = CaseOutcome("t.py::test[a]", "phone", m.model, m.dtype, m.threads, m)
    cells = row_cells(summary_cells(outcome))
    columns = [column for _, column, _ in COLUMNS]
    assert [re.match(r'<td class="col-([\w-]+)">', cell)[1] for cell in cells] == columns
    shown = dict(zip(columns, cells, strict=True))
    for variant, key in ((Variant.OFF, "sme2-e2e-off"), (Variant.ON, "sme2-e2e-on")):
        median = LatencyStats.of(m.variants[variant].latencies_ms).median_ms
        assert shown[key] == f'<td class="col-{key}">{median:.3f}</td>'
    assert html.escape(content.speedup_text(m)) in shown["sme2-speedup"]
    host = measurement(HOST)
    host_cells = row_cells(summary_cells(CaseOutcome("t", "host", "toy", "fp32", 1, host)))
    assert host_cells[-2:] == [
        '<td class="col-sme2-e2e-on">—</td>',
        '<td class="col-sme2-speedup">—</td>',
    ]
    # a case never measured shows the case itself
    unmeasured = row_cells(summary_cells(CaseOutcome("t", "qemu-sme2", "toy", "int8", 1)))
    assert unmeasured[:4] == [
        '<td class="col-sme2-device">qemu-sme2</td>',
        '<td class="col-sme2-model">toy</td>',
        '<td class="col-sme2-dtype">int8</td>',
        '<td class="col-sme2-e2e-off"></td>',
    ]


def test_emulated_devices_show_the_instruction_ratio_instead_of_a_speedup():
    from pytest_sme2.report.content import speedup_text
    from tests.measurements import EMULATOR, OFF_EVIDENCE, ON_EVIDENCE

    m = measurement(EMULATOR, on_evidence=ON_EVIDENCE, off_evidence=OFF_EVIDENCE)
    assert speedup_text(m) == "instruction ratio 2.50× (off ÷ on)"
    assert speedup_text(measurement(EMULATOR)).startswith("n/a (emulated time")


def test_an_unmeasured_case_s_log_opens_on_its_reason():
    from pytest_sme2.report.html import unmeasured_log

    reason = "export of x[int8] failed at lower: RuntimeError: <no kernel>"
    captured = "---- Captured log setup ----\nINFO user:model.py:3 built"
    xfailed = unmeasured_log("xfailed", reason, reason, [reason + "\n", captured])
    assert xfailed == [
        '<div class="sme2-reason">xfailed: export of x[int8] failed at lower: '
        "RuntimeError: &lt;no kernel&gt;</div>\n",
        captured,
    ]
    traceback = "def fixture():\n>       raise OSError('disk')\nE       OSError: disk"
    errored = unmeasured_log("error", "OSError: disk", traceback, ["escaped traceback", captured])
    assert errored[0].startswith('<div class="sme2-reason">error: OSError: disk</div><details>')
    assert "<summary>traceback</summary>def fixture():" in errored[0]
    assert "&gt;       raise OSError(&#x27;disk&#x27;)" in errored[0]
    assert errored[1:] == [captured]
    assert unmeasured_log("failed", "why", "", []) == ['<div class="sme2-reason">failed: why</div>']
