"""End to end: an inner pytest measures a tiny real model with ``--html --self-contained-html``,
then headless Chromium opens the report and says whether every chart rendered and the tables
are there. This is what a reviewer sees when CI fails. Two sessions: a fleet (the host and
qemu-sme2), and an xdist session from an empty cache with an expected failure, which also shows
what its workers share (each export and the runner's build made once) and find (a removed model's
baseline, removed)."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from filelock import FileLock

from pytest_sme2.cache import cache_root
from pytest_sme2.report.evidence import KERNEL_VIEW_TITLE
from tests.inner import REPO

pytest_plugins = ["pytester"]

#: Resolved at import, before pytester points HOME at a temporary directory: the inner run
#: reuses the real export and runner caches.
CACHE = cache_root()

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)

INNER_CONFTEST = '''
import torch
from torch import nn

from pytest_sme2 import register_model


class Tiny(nn.Module):
    """conv → permute (a transpose) → linear: three categories in a few microseconds."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 32 * 32, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).permute(0, 2, 3, 1).reshape(1, -1))


def tiny_inputs(seed):
    return (torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(seed)),)


@register_model("report_tiny", inputs=tiny_inputs, dtypes=("fp32",))
def report_tiny():
    """A tiny model for the report's end-to-end test."""
    torch.manual_seed(0)
    return Tiny().eval()
'''

#: An inner session that measures little: the report is the subject, not the numbers.
FEW_RUNS = (
    "-p",
    "no:cacheprovider",
    "--sme2-runs=4",
    "--sme2-rounds=2",
    "--sme2-traced-runs=2",
    "--sme2-warmup=1",
)

INNER_TEST = """
def test_model(sme2_measurement, sme2_judge):
    sme2_judge(sme2_measurement)
"""

# Runs in the page after pytest-html has built it: waits until every chart image has loaded,
# then writes "name,naturalWidth,naturalHeight,renderedWidth,renderedHeight;..." into the DOM.
PROBE = """<script>
window.addEventListener('load', () => {
  const poll = () => {
    const images = [...document.querySelectorAll('img.sme2-chart')];
    if (!images.length || images.some(image => !image.complete)) { setTimeout(poll, 50); return; }
    const pre = document.createElement('pre');
    pre.id = 'sme2-probe';
    pre.textContent = images.map(image => {
      const box = image.getBoundingClientRect();
      return [image.dataset.chart, image.naturalWidth, image.naturalHeight,
              Math.round(box.width), Math.round(box.height)].join(',');
    }).join(';');
    document.body.appendChild(pre);
  };
  poll();
});
</script>"""


def dump_dom(browser: str, page: Path, profile: Path) -> str:
    """The DOM after the page's scripts ran. ``?collapsed=`` opens every result row."""
    proc = subprocess.run(
        [
            browser,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--virtual-time-budget=15000",
            "--dump-dom",
            page.as_uri() + "?collapsed=",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def rendered_charts(dom: str) -> set[str]:
    """The charts the probe found decoded and laid out, each with a non-zero size."""
    match = re.search(r'<pre id="sme2-probe">([^<]*)</pre>', dom)
    assert match, "the probe never ran: no chart image found or the page did not load"
    charts = {}
    for entry in match.group(1).split(";"):
        name, *sizes = entry.split(",")
        charts[name] = tuple(int(v) for v in sizes)
    for name, (natural_w, natural_h, shown_w, shown_h) in charts.items():
        assert min(natural_w, natural_h, shown_w, shown_h) > 0, name
    return set(charts)


def report_session(
    pytester: pytest.Pytester, tmp_path: Path, conftest: str, *args: str
) -> tuple[pytest.RunResult, Path]:
    """An inner session of INNER_TEST with ``conftest``, recording baselines, writing its
    artifacts under ``tmp_path`` and report.html: its result and the artifacts' directory."""
    pytester.makeconftest(conftest)
    pytester.makepyfile(test_tiny=INNER_TEST)
    artifacts = tmp_path / "artifacts"
    result = pytester.runpytest_subprocess(
        *FEW_RUNS,
        f"--sme2-baseline-dir={tmp_path / 'baselines'}",
        "--sme2-update-baselines",
        f"--sme2-artifacts={artifacts}",
        "--html=report.html",
        "--self-contained-html",
        *args,
        timeout=900,
    )
    return result, artifacts


def chromium() -> str:
    """A headless browser, installed on first need (Debian's chromium, through the repository's
    script; one worker installs while the other waits): only this test opens one, so neither the
    main job nor the test set-up installs a browser. A machine where it cannot be installed fails
    here, naming the script."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(CACHE / "chromium-install.lock"):
        if not _on_path():
            subprocess.run(["bash", str(REPO / "scripts" / "install_chromium.sh")], check=True)
    browser = _on_path()
    assert browser, "chromium is missing after scripts/install_chromium.sh"
    return browser


def _on_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _extra(dom: str, title: str) -> str:
    """The pytest-html extra of the case whose heading starts with ``title``: its
    ``sme2-report`` block, and the one after it where that is its trend."""
    blocks = []
    at = dom.rindex('<div class="sme2-report">', 0, dom.index(f"<h3>{title}"))
    while True:
        depth, end = 0, at
        for tag in re.finditer(r"<(/?)div\b[^>]*>", dom[at:]):
            depth += -1 if tag[1] else 1
            if depth == 0:
                end = at + tag.end()
                break
        blocks.append(dom[at:end])
        if not dom.startswith('<div class="sme2-report"><h4>Over the last', end):
            return "".join(blocks)
        at = end


def test_a_fleets_html_report_renders_in_headless_chromium(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The host and qemu-sme2 in one session, as a reviewer opens its report.html: every chart
    decoded and laid out, the tables, the devices side by side, each row's cells — qemu-sme2's
    speedup the instruction ratio, as in the table above — and each case's extra: the host's
    latency, one variant said once; qemu-sme2's instructions (no latency table or chart of
    emulated time), the kernels of its top operators SME2-off beside on (kernels.csv written);
    the host case's last records from --sme2-history, linked to the history page."""
    browser = chromium()
    monkeypatch.setenv("SME2_CACHE_DIR", str(CACHE))
    result, artifacts = report_session(
        pytester,
        tmp_path,
        INNER_CONFTEST,
        "--sme2-device=host,qemu-sme2",
        "--sme2-models=report_tiny",
        "--sme2-dtypes=fp32",
        "--sme2-history=history",
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            f"pytest-sme2 session report: {artifacts / 'report.md'}",
            f"pytest-sme2 history page: {Path('history') / 'index.html'}",
        ]
    )

    # The files the report links to exist, and the session report lists the tests.
    host = artifacts / "host" / "report_tiny-fp32"
    manifest = json.loads((host / "manifest.json").read_text())
    assert manifest["sme2"]["config"]["runs"] == 4
    assert manifest["sme2"]["config"]["traced_runs"] == 2
    assert (host / "host_sme2_off" / "report_tiny_xnnpack_fp32_host_sme2_off_t1.etdump").is_file()
    nodeid = "test_tiny.py::test_model[host-report_tiny-fp32]"
    assert (host / "sme2_report.md").read_text().startswith(f"# SME2 report: {nodeid}\n")
    session = (artifacts / "report.md").read_text()
    assert f"## SME2 report: {nodeid}" in session and "## Across devices" in session
    qemu = artifacts / "qemu-sme2" / "report_tiny-fp32"
    report_md = (qemu / "sme2_report.md").read_text()
    for text in (KERNEL_VIEW_TITLE, "packing · compute · other", "_sme2_mopa"):
        assert text in report_md, text
    (on_csv,) = qemu.glob("*_sme2_on/kernels.csv")
    (off_csv,) = qemu.glob("*_sme2_off/kernels.csv")
    with on_csv.open() as on_rows, off_csv.open() as off_rows:
        on, off = list(csv.DictReader(on_rows)), list(csv.DictReader(off_rows))
    assert any(row["has_sme2"] == "1" for row in on)
    # the wheel's NEON microkernels have no symbols: SME2-off names no SME2 kernel, if any
    assert not any(row["has_sme2"] == "1" for row in off)

    # Headless Chromium: every chart decoded and laid out with a non-zero size, tables present.
    html = (pytester.path / "report.html").read_text()
    probe_page = tmp_path / "probe.html"
    probe_page.write_text(html.replace("</body>", PROBE + "</body>"))
    dom = dump_dom(browser, probe_page, tmp_path / "chromium-profile")
    # the roofline of each case's operators: the work of each known from the program's ETRecord
    assert rendered_charts(dom) == {"categories", "latency", "roofline"}
    assert dom.count('class="sme2-table"') >= 5
    for header in ("Device", "Model", "Dtype", "E2E off (ms)", "E2E on (ms)", "Speedup"):
        assert re.search(rf'<th class="col-sme2-[\w-]+">{re.escape(header)}</th>', dom), header
    assert '<td class="col-sme2-model">report_tiny</td>' in dom
    assert "SME2 across devices" in dom
    ratio = re.search(r"instruction ratio \d+\.\d\d× \(off ÷ on\)", session)
    assert ratio, session
    assert f'<td class="col-sme2-speedup">{ratio[0]}</td>' in dom
    host_extra = _extra(dom, "report_tiny[fp32] on host")
    assert "Only sme2-off was measured" in host_extra  # x86 host: one variant, said once
    assert "<h4>Latency" in host_extra
    assert 'history/index.html#report-tiny-fp32-host">trend page</a>' in host_extra
    qemu_extra = _extra(dom, "report_tiny[fp32] on qemu-sme2")
    for text in (
        "Instructions per inference (qemu exec log, one steady-state inference)",
        "instructions/inference",
        "SME instructions",
        "Categories (mean M instr per traced run)",
        "sme2-off M instr/run",
        "sme2-on share",
        "instructions off ÷ on",
        KERNEL_VIEW_TITLE,
        "sme2-on share of operator",
        "Work and efficiency",
        "MACs/SME instr on",
        "SME2 coverage",
    ):
        assert text in qemu_extra, text
    assert 'data-chart="roofline"' in qemu_extra
    assert "<h4>Latency" not in qemu_extra and "median ms" not in qemu_extra
    assert 'data-chart="latency"' not in qemu_extra


#: The tiny model, and a model whose factory fails: its export is an expected failure.
BROKEN_CONFTEST = (
    INNER_CONFTEST
    + '''

@register_model("report_broken", inputs=tiny_inputs, dtypes=("fp32",))
def report_broken():
    """Fails to build: an expected failure whose reason is one line."""
    raise ValueError("this factory is broken on purpose")
'''
)


def test_an_xdist_session_from_an_empty_cache_shares_its_work_and_says_what_it_did(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """From an empty cache, two workers that each run every case (``--dist each``), with DEBUG
    log capture, over the whole suite under --sme2-update-baselines: each model is exported once
    and the runner built once, both workers measuring on them; the workers' progress lines reach
    the session's output, and the summary lists the exports' stages; the controller, which
    collected nothing, writes the history page of what its workers judged; both workers find a
    removed model's baseline, and the controller says it was removed (another thread count's
    file stays); the report shows the xfailed case's one-line reason — not the fixture's source,
    nor a library's logs."""
    browser = chromium()
    monkeypatch.setenv("SME2_CACHE_DIR", str(tmp_path / "cache"))
    pytester.makeconftest(BROKEN_CONFTEST)
    pytester.makepyfile(test_tiny=INNER_TEST)
    host = pytester.path / "baselines" / "host"
    host.mkdir(parents=True)
    gone, two_threads = host / "report_gone-fp32.json", host / "report_tiny-fp32-t2.json"
    for path in (gone, two_threads):
        path.write_text("{}")
    result = pytester.runpytest_subprocess(
        *FEW_RUNS,
        "-n",
        "2",
        "--dist",
        "each",
        "--log-level=DEBUG",
        "--sme2-update-baselines",
        "--sme2-history=history",
        "--html=report.html",
        "--self-contained-html",
        timeout=900,
    )
    result.assert_outcomes(passed=2, xfailed=2)
    reason = (
        "export of report_broken[fp32] failed at build model: "
        "ValueError: this factory is broken on purpose"
    )
    out = result.stdout.str()

    # Exports and builds: the slowest steps, by kind and subject ("export report_tiny[fp32]",
    # "build host runner"); each export and build (seconds) ranks above a worker's check of the
    # numerics of an export the other made (0.1 s), so one made twice would show here.
    done = out.split("pytest-sme2 slowest exports and builds", 1)[1].splitlines()
    (total,) = [line for line in done if " in all, " in line]
    # [0]: the header. A factory that raises has no key to record its failure under (a one-off
    # key, ``export.key.keyed_by_its_build``): each worker calls it again, in no time.
    listed = done[1 : done.index(total)]
    ran = [tuple(line.split(" ")[:2]) for line in listed if " (failed): " not in line]
    assert len(ran) == len(set(ran)), ran  # nothing ran twice
    assert {("build", "host"), ("export", "report_tiny[fp32]")} <= set(ran), out[-3000:]
    assert host.joinpath("report_tiny-fp32.json").is_file()  # both workers measured, recorded

    # Progress: a worker's timestamped lines, from the start of each export to its stages.
    stamp = "[0-9][0-9]:[0-9][0-9]:[0-9][0-9]"
    result.stderr.fnmatch_lines(
        [
            f"[[]gw?[]] pytest-sme2 {stamp} export report_tiny[[]fp32[]] started",
            f"[[]gw?[]] pytest-sme2 {stamp} export report_tiny[[]fp32[]] * s: build model *, "
            "torch.export *, lower *, to_executorch *, serialize *, etrecord *, numerics *",
        ]
    )
    result.stderr.fnmatch_lines(
        [f"[[]gw?[]] pytest-sme2 {stamp} export report_broken[[]fp32[]] * s (failed): build*"]
    )
    result.stdout.fnmatch_lines(
        [
            "*pytest-sme2 slowest exports and builds*",
            "export *[[]fp32[]] * s: build model *",
            "* in all, * s (summed over processes)",
        ]
    )
    # the controller, which collected nothing, writes the history page of what its workers judged
    result.stdout.fnmatch_lines([f"pytest-sme2 history page: {Path('history') / 'index.html'}"])
    assert (pytester.path / "history" / "index.html").is_file()
    result.stdout.fnmatch_lines(
        [
            "*pytest-sme2 unused baselines*",
            "unused baselines removed *",
            "    */report_gone-fp32.json",
        ]
    )
    assert not gone.exists() and two_threads.exists()

    # report.md (beside the artifacts of a worker's basetemp): the unmeasured case, its reason.
    (written,) = re.findall(r"^pytest-sme2 session report: (.*)$", out, flags=re.M)
    session = (pytester.path / written).read_text()
    assert "## Not measured" in session
    case = r"test_tiny.py::test_model\[report_broken-fp32\]\S*"
    row = rf"\| {case} \| xfailed \| {re.escape(reason)} \|"
    assert re.search(row, session), session[session.index("## Not measured") :]

    # The HTML report, as a browser shows it with every row open.
    html = (pytester.path / "report.html").read_text()
    dom = dump_dom(browser, pytester.path / "report.html", tmp_path / "chromium-profile")
    logs = re.findall(r'<div class="log">(.*?)</div>\s*</div>', dom, flags=re.S)
    assert any(f'<div class="sme2-reason">xfailed: {reason}</div>' in log for log in logs), logs
    for page in (html, dom):
        for fixture_source in ("def ", "@pytest.fixture", "sme2_case = Case("):
            assert fixture_source not in page, fixture_source
        for library_log in ("torch.__trace", "backend_api.py", "filelock:"):
            assert library_log not in page, library_log
    assert '<td class="col-sme2-model">report_broken</td>' in dom
