"""History over commits, for real: a user's project in a throwaway git repository, one qemu-sme2
session per commit (exact instruction counts), the model made ~6 % bigger at commit 4 and made
small again at commit 6. ``sme2 history`` must name commit 4, and only commit 4, as the step; the
revert must show as one. Two devices' records, copied together with bad files beside them, make
one page, each bad file named in one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pytest_sme2.cache import cache_root
from pytest_sme2.cli import main
from pytest_sme2.devices.host import HostDevice
from pytest_sme2.judge.history import (
    PAGE_NAME,
    SCHEMA_VERSION,
    GitState,
    HistoryLog,
    HistoryRecord,
    commit_ranks,
    git_state,
    package_version,
    read_history,
)
from pytest_sme2.measure.case import MeasurePlan
from pytest_sme2.report.history_page import history_html, points_table
from pytest_sme2.report.trends import Trends, build_series, find_steps, quantities
from tests.measurements import measure_toy_cnn, scaled

#: Resolved at import: the inner sessions reuse the real export cache and the provisioned qemu.
CACHE = cache_root()

#: A user's conftest: a small plain-torch model whose input is WIDTH pixels wide.
CONFTEST = """
import torch
from torch import nn

from pytest_sme2 import register_model

WIDTH = 32


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv2(torch.relu(self.conv1(x)))).mean(dim=(2, 3))


def inputs(seed):
    return (torch.randn(1, 3, 32, WIDTH, generator=torch.Generator().manual_seed(seed)),)


@register_model("trend_net", inputs=inputs, dtypes=("fp32",))
def trend_net():
    torch.manual_seed(0)
    return Net().eval()
"""

TEST = """
def test_model(sme2_measurement, sme2_judge):
    sme2_judge(sme2_measurement)
"""


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _project(path: Path, *, git: bool) -> Path:
    path.mkdir()
    (path / "conftest.py").write_text(CONFTEST)
    (path / "test_model.py").write_text(TEST)
    (path / "NOTES").write_text("commit 1\n")
    if git:
        (path / ".gitignore").write_text("baselines/\nartifacts/\n")
        _git(path, "init", "-q", "-b", "main")
        _git(path, "config", "user.email", "dev@example.com")
        _git(path, "config", "user.name", "dev")
        _git(path, "add", "-A")
        _git(path, "commit", "-qm", "commit 1")
    return path


def _commit(project: Path, number: int, width: int | None = None) -> str:
    """Commit ``number``: the model's input ``width`` wide, else only a note changed."""
    if width is not None:
        conftest = project / "conftest.py"
        text = conftest.read_text()
        start = text.index("WIDTH = ")
        end = text.index("\n", start)
        conftest.write_text(text[:start] + f"WIDTH = {width}" + text[end:])
    with (project / "NOTES").open("a") as notes:
        notes.write(f"commit {number}\n")
    _git(project, "commit", "-qam", f"commit {number}")
    return _git(project, "rev-parse", "HEAD")


def _session(project: Path, history: Path, device: str = "qemu-sme2", *more: str) -> str:
    """One cheap qemu-sme2 session of the project, recording its history."""
    return _pytest(project, f"--sme2-device={device}", f"--sme2-history={history}", *more)


def _pytest(project: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """One cheap session of the project's test, invoked in ``project`` with ``args``."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "test_model.py",
            "--sme2-runs=2",
            "--sme2-rounds=1",
            "--sme2-traced-runs=2",
            "--sme2-update-baselines",
            "--sme2-artifacts=artifacts",
            *args,
        ],
        cwd=project,
        env={**os.environ, "SME2_CACHE_DIR": str(CACHE), **(env or {})},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return done.stdout


def _history(
    directory: Path, repo: Path, out: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[str, list[str]]:
    """``sme2 history``: (the markdown summary, the lines it said about what it left out)."""
    markdown = out.with_suffix(".md")
    args = ["history", str(directory), "--repo", str(repo), "--html", str(out)]
    assert main([*args, "--markdown", str(markdown)]) == 0
    captured = capsys.readouterr()
    assert markdown.read_text() == captured.out
    said = [line for line in captured.err.splitlines() if not line.startswith("sme2: wrote")]
    return captured.out, said


def _steps(summary: str) -> list[str]:
    part = summary.split("### Steps\n\n", 1)[1].split("\n\n", 1)[0]
    return [line.removeprefix("- ") for line in part.splitlines()]


def test_six_commits_name_commit_four_as_the_step_and_commit_six_as_its_revert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _project(tmp_path / "project", git=True)
    history = tmp_path / "history"
    commits = [_git(project, "rev-parse", "HEAD")]
    _session(project, history)
    for number in (2, 3, 4, 5):
        # commit 4: 34 pixels wide instead of 32, 6.25 % more pixels to convolve
        commits.append(_commit(project, number, width=34 if number == 4 else None))
        _session(project, history)
    first_five = tmp_path / "first-five"
    shutil.copytree(history, first_five)
    commits.append(_commit(project, 6, width=32))
    inner = _session(project, history, "qemu-sme2", "--html=report.html", "--self-contained-html")
    short = [c[:7] for c in commits]

    # one file per session, one line per judged case, never rewritten
    files = sorted(history.glob("*.jsonl"))
    assert len(files) == 6
    records = [json.loads(f.read_text()) for f in files]
    assert [r["commit"] for r in records] == commits
    for record in records:
        assert record["schema_version"] == SCHEMA_VERSION
        assert (record["branch"], record["dirty"], record["device"]) == ("main", False, "qemu-sme2")
        assert record["class_id"] and record["machine_class"]["sme_vector_length"] == "64"
    # the first session wrote the baseline; the others judged against it
    for record in records[1:]:
        assert {v["gate"] for v in record["verdicts"]} >= {"instructions[sme2-on]", "parity"}
    # the session wrote the page into the history directory, which the reader leaves alone
    assert f"pytest-sme2 history page: {history / PAGE_NAME}" in inner
    assert read_history(history).problems == ()
    # the pytest-html report shows the case's last five commits and links to its trend
    report = (project / "report.html").read_text()
    assert "history/index.html#trend-net-fp32-qemu-sme2" in report
    for commit in short[1:]:
        assert commit in report
    assert short[0] not in report

    summary, said = _history(first_five, project, tmp_path / "five.html", capsys)
    with capsys.disabled():
        print(summary)  # the step list, in the test's output
    assert said == []
    steps = _steps(summary)
    assert steps, summary
    # every step is at commit 4, none reverted yet; the instructions moved by about 6 % (and the
    # planned memory with them: the model's activations grew)
    assert all(re.search(rf" at {short[3]}\b", s) for s in steps), steps
    on = next(s for s in steps if "instructions (sme2-on)" in s)
    percent = float(on.split("instructions (sme2-on) ")[1].split(" %")[0])
    assert 3 < percent < 9, on
    assert "(Convolution grew" in on and "reverted" not in summary
    page = (tmp_path / "five.html").read_text()
    assert page.count("<section id=") == 1 and "data:image/png;base64," in page

    summary, said = _history(history, project, tmp_path / "six.html", capsys)
    with capsys.disabled():
        print(summary)
    assert said == []
    steps = _steps(summary)
    assert all(re.search(rf" at {short[3]}\b", s) for s in steps), steps
    assert all(s.endswith(f"reverted at {short[5]}") for s in steps), steps

    # a shallow clone knows only the last commit: one line says so, and the page is still made,
    # its commits placed by their commit time
    shallow = tmp_path / "shallow"
    _git(tmp_path, "clone", "-q", "--depth", "1", project.as_uri(), str(shallow))
    summary, said = _history(history, shallow, tmp_path / "shallow.html", capsys)
    assert said == [
        "sme2: 5 commit(s) not in the repository at "
        f"{shallow} (a shallow clone?): {', '.join(short[:5])}; placed by their commit time"
    ]
    assert any(f"at {short[3]}" in s and f"reverted at {short[5]}" in s for s in _steps(summary))


def test_two_devices_land_in_one_page_and_bad_files_are_named_one_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two CI runners (two vector lengths), no git at all; their files copied into one directory
    beside a truncated file, a foreign one and a record of a newer schema."""
    project = _project(tmp_path / "project", git=False)
    runners = {}
    for device in ("qemu-sme2:vl=32", "qemu-sme2:vl=64"):
        runners[device] = tmp_path / device.replace(":", "@")
        inner = _session(project, runners[device], device)
        # no repository: the records carry no commit, and one warning line says why
        assert inner.count("history records carry no commit: not a git repository") == 1, inner
    merged = tmp_path / "merged"
    for device, directory in runners.items():
        shutil.copytree(directory, merged / device.replace(":", "@"))  # download-artifact layout
    good = json.loads(next(runners["qemu-sme2:vl=64"].glob("*.jsonl")).read_text())
    assert good["commit"] is None and good["device"] == "qemu-sme2:vl=64"
    assert good["no_commit"] == f"not a git repository: {project}"
    line = json.dumps(good)
    (merged / "truncated.jsonl").write_text(line + "\n" + line[: len(line) // 2])
    (merged / "foreign.jsonl").write_text(json.dumps({"benchmarks": []}) + "\n")
    (merged / "notes.txt").write_text("not a record\n")
    (merged / "newer.jsonl").write_text(json.dumps({**good, "schema_version": 99}) + "\n")

    summary, said = _history(merged, tmp_path, tmp_path / "page.html", capsys)
    assert sorted(said) == sorted(
        [
            f"sme2: {merged / 'foreign.jsonl'}: line 1: not a pytest-sme2 history record; "
            "the rest is used",
            f"sme2: {merged / 'newer.jsonl'}: line 1: schema 99 is newer than this pytest-sme2 "
            f"({package_version()}) reads ({SCHEMA_VERSION}): upgrade pytest-sme2; "
            "the rest is used",
            f"sme2: {merged / 'notes.txt'}: not a history file (*.jsonl); skipped",
            f"sme2: {merged / 'truncated.jsonl'}: line 2 is truncated; the rest is used",
        ]
    ), said
    page = (tmp_path / "page.html").read_text()
    assert 'id="trend-net-fp32-qemu-sme2-vl-32"' in page
    assert 'id="trend-net-fp32-qemu-sme2-vl-64"' in page
    # the truncated file's whole first line is read: the vl=64 record once more
    assert "3 record(s), 2 case(s) × device(s)." in summary
    rows = [line for line in summary.splitlines() if line.startswith("| trend_net fp32 |")]
    assert [row.split(" | ")[1] for row in rows] == ["qemu-sme2:vl=32", "qemu-sme2:vl=64"]
    # a record without a commit says why, on the page and in the summary
    assert all(f"(no commit: not a git repository: {project})" in row for row in rows), rows
    assert f"(no commit: not a git repository: {project})" in page
    assert "No quantity moved beyond its noise." in summary


def test_a_detached_ci_checkout_takes_its_branch_from_github(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path / "project", git=True)
    head = _git(project, "rev-parse", "HEAD")
    _git(project, "checkout", "-q", "--detach")
    (project / "NOTES").write_text("changed, not committed\n")
    monkeypatch.delenv("GITHUB_HEAD_REF", raising=False)
    monkeypatch.setenv("GITHUB_REF_NAME", "main")
    state, warning = git_state(project)
    assert warning is None
    assert (state.commit, state.branch, state.dirty) == (head, "main", True)
    assert state.commit_time is not None


def test_without_git_the_records_carry_no_commit_and_one_line_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on it
    state, warning = git_state(tmp_path)
    assert state == GitState(no_commit="git missing (no git on PATH)")
    assert warning == "history records carry no commit: git missing (no git on PATH)"


def test_the_commit_comes_from_where_pytest_was_invoked_then_the_rootdir(tmp_path: Path) -> None:
    """The first root inside a repository with a commit wins; without one, the first root's
    reason is the record's."""
    project = _project(tmp_path / "project", git=True)
    head = _git(project, "rev-parse", "HEAD")
    outside = tmp_path / "outside"
    outside.mkdir()
    assert git_state(outside, project)[0].commit == head
    assert git_state(project, outside)[0].commit == head
    state, warning = git_state(outside)
    assert state.no_commit == f"not a git repository: {outside}"
    assert warning == f"history records carry no commit: not a git repository: {outside}"
    empty = tmp_path / "empty"
    empty.mkdir()
    _git(empty, "init", "-q")
    assert git_state(empty)[0].no_commit == f"no commit yet in the repository of {empty}"


def test_option_paths_outside_the_project_and_a_detached_checkout_keep_their_commits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user's project run as ``pytest --sme2-baseline-dir ../b --sme2-history ../hist``: once
    ``../b`` exists pytest's rootdir moves above the repository, yet every record names its
    commit. Then a CI job: a detached checkout, history inside the repository (untracked, so the
    tree is clean), branch from GitHub's variables."""
    project = _project(tmp_path / "project", git=True)
    outside = ["--sme2-baseline-dir", "../b", "--sme2-history", "../hist"]
    commits = [_git(project, "rev-parse", "HEAD")]
    inner = _pytest(project, "--sme2-device=qemu-sme2", *outside)
    commits.append(_commit(project, 2))
    inner = _pytest(project, "--sme2-device=qemu-sme2", *outside)
    assert f"rootdir: {tmp_path}" in inner  # the rootdir did move out of the repository
    assert "carry no commit" not in inner, inner
    _git(project, "checkout", "-q", "--detach")
    ci = {"GITHUB_REF_NAME": "main", "GITHUB_HEAD_REF": ""}
    inner = _pytest(project, "--sme2-device=qemu-sme2", "--sme2-history=hist", env=ci)
    assert "carry no commit" not in inner, inner
    records = [
        json.loads(line)
        for directory in (tmp_path / "hist", project / "hist")
        for path in sorted(directory.glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert [(r["commit"], r["branch"], r["dirty"], r["no_commit"]) for r in records] == [
        (commits[0], "main", False, None),
        (commits[1], "main", False, None),
        (commits[1], "main", False, None),
    ]
    summary, _ = _history(tmp_path / "hist", project, tmp_path / "page.html", capsys)
    assert f"| {commits[1][:7]} |" in summary, summary


def test_load_and_memory_are_charted_and_a_slower_init_is_a_step(tmp_path: Path) -> None:
    """toy_cnn really measured on the host, recorded at four commits, the method init 25 %
    slower from the third (beyond its 15 % tolerance) and the peak resident memory unchanged:
    the init is a step at the third commit, the memory none; the page draws and tabulates
    both. A record written before load was measured, or while the runner's copy of the plan was
    kept apart (``state_copy_bytes``), still reads."""
    device = HostDevice.from_options(lambda _: None)
    device.prepare()
    plan = MeasurePlan(runs=4, rounds=2, warmup=1, traced_runs=2)
    measured = measure_toy_cnn(device, plan, tmp_path / "measured")
    log = HistoryLog(tmp_path / "history", GitState())
    start = datetime(2026, 11, 1, tzinfo=UTC)
    for number, init in enumerate((1.0, 1.0, 1.25, 1.25)):
        when = start + timedelta(hours=number)
        log.git = GitState(f"{number:07x}" * 5 + "0" * 5, "main", False, when.isoformat())
        log.record(scaled(measured, init=init), (), device="host", nodeid="t", artifacts=tmp_path)
    log.close()
    records = read_history(tmp_path / "history").records
    ranks, _ = commit_ranks(records, None)
    (series,) = build_series(records, ranks)
    keys = {q.key: q for q in quantities()}
    (step,) = find_steps(series, keys["init-ms sme2-off"])
    assert step.at == "0000002" and step.change == pytest.approx(0.25, rel=1e-3)
    assert "method init ms (sme2-off) +25.0 % at 0000002" in step.sentence()
    for key in ("peak-rss sme2-off", "planned sme2-off"):
        assert find_steps(series, keys[key]) == [] and None not in series.values(keys[key])
    table = points_table(series)
    for label in ("method init ms (sme2-off)", "planned memory MiB", "peak resident memory MiB"):
        assert label in table
    page = history_html(Trends(series=(series,), steps=(step,), problems=(), records=4))
    assert "method init ms (sme2-off) +25.0 %" in page and "data:image/png;base64," in page

    doc = records[0].to_json()
    (load,) = [variant["load"] for variant in doc["measurement"]["variants"]]
    then = {**doc, "measurement": json.loads(json.dumps(doc["measurement"]))}
    then["measurement"]["variants"][0]["load"] = {**load, "state_copy_bytes": load["planned_bytes"]}
    assert HistoryRecord.from_json(then).measurement == records[0].measurement
    del then["measurement"]["variants"][0]["load"]
    older = HistoryRecord.from_json(then)
    assert all(vm.load is None for vm in older.measurement.variants.values())
    assert keys["init-ms sme2-off"].value(older.measurement) is None

    # a schema-2 record's peak memory was the pytest session's (ru_maxrss crosses exec): dropped,
    # the rest of its load kept, so no trend joins it to the runner's own figure
    session_peak = {
        **doc,
        "schema_version": 2,
        "measurement": json.loads(json.dumps(doc["measurement"])),
    }
    session_peak["measurement"]["variants"][0]["load"]["peak_rss_bytes"] = 580 << 20
    (upgraded,) = HistoryRecord.from_json(session_peak).measurement.variants.values()
    assert upgraded.load is not None and upgraded.load.peak_rss_bytes is None
    assert upgraded.load.method_init_ms == load["method_init_ms"]
    assert keys["peak-rss sme2-off"].value(records[0].measurement) == load["peak_rss_bytes"] / 2**20
