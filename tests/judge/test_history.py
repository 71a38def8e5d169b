"""History over commits, for real: a user's project in a throwaway git repository, its case
measured on qemu-sme2 (exact instruction counts), judged and recorded as one session per commit
would (a case context and a history log, no pytest session around them), the model made ~6 %
bigger at commit 4 and made small again at commit 6. ``sme2 history`` must name commit 4, and
only commit 4, as the step; the revert must show as one. Two devices' records, copied together
with bad files beside them, make one page, each bad file named in one line. Where the commit
comes from is the session's: its configuration, as pytest parses it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.case_context import CaseJudge, CaseMeasure
from pytest_sme2.cli import main
from pytest_sme2.devices.host import HostDevice
from pytest_sme2.devices.kinds import BUILT_IN_KINDS
from pytest_sme2.devices.spec import parse_device_specs
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.export.reference import REFERENCE
from pytest_sme2.judge.history import (
    PAGE_NAME,
    SCHEMA_VERSION,
    GitState,
    HistoryLog,
    HistoryRecord,
    HistoryWarning,
    commit_ranks,
    git_state,
    package_version,
    read_history,
)
from pytest_sme2.measure.case import MeasurePlan
from pytest_sme2.measure.fleet import Fleet
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.report.case_trend import CaseTrends
from pytest_sme2.report.history_page import history_html, points_table
from pytest_sme2.report.trends import Trends, build_series, find_steps, quantities
from pytest_sme2.session import Sme2Session
from pytest_sme2.session_end import write_history_page
from pytest_sme2.settings import Case
from tests.measurements import measure_toy_cnn, scaled
from tests.session.contexts import case_context, settings, twin

pytest_plugins = ["pytester"]


def _net(width: int = 32) -> Any:
    """A user's plain-torch model: two convolutions, then the mean of each channel (its input is
    ``width`` pixels wide)."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
            self.conv2 = nn.Conv2d(16, 16, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.conv2(torch.relu(self.conv1(x)))).mean(dim=(2, 3))

    torch.manual_seed(0)
    return Net().eval()


def _inputs(seed: int, width: int = 32) -> tuple[Any, ...]:
    import torch

    return (torch.randn(1, 3, 32, width, generator=torch.Generator().manual_seed(seed)),)


def trend_net(width: int) -> ModelSpec:
    """The user's model at one commit: its input ``width`` pixels wide."""
    return ModelSpec("trend_net", _net, _inputs, "two convs", ("fp32",), params=(("width", width),))


def _git(repo: Path, *args: str, number: int = 1) -> str:
    """``git args`` in ``repo``; a commit made as commit ``number``, an hour after the one before
    (a shallow clone places commits by their time)."""
    when = f"2026-11-01T{number:02d}:00:00Z"
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    done = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True, env=env
    )
    return done.stdout.strip()


def _project(path: Path) -> Path:
    """A user's project in a git repository of its own, at commit 1."""
    path.mkdir()
    (path / "NOTES").write_text("commit 1\n")
    (path / ".gitignore").write_text("baselines/\nartifacts/\n")
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.email", "dev@example.com")
    _git(path, "config", "user.name", "dev")
    _git(path, "add", "-A")
    _git(path, "commit", "-qm", "commit 1")
    return path


def _commit(project: Path, number: int) -> str:
    with (project / "NOTES").open("a") as notes:
        notes.write(f"commit {number}\n")
    _git(project, "commit", "-qam", f"commit {number}", number=number)
    return _git(project, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def reference() -> tuple[Path, Path]:
    artifact = export_model(REFERENCE, "fp32")
    return artifact.pte, artifact.inputs


class Judged:
    """A device's cases judged and recorded as a session would record them (``--sme2-history``,
    ``--sme2-update-baselines``), one history file per session: its log."""

    def __init__(self, request: pytest.FixtureRequest, root: Path, device: str) -> None:
        (self.spec,) = parse_device_specs(device, BUILT_IN_KINDS)
        self.device = Fleet(lambda _: None).device(self.spec)
        self.node = twin(request)
        self.root = root
        self.measured: dict[int, Measurement] = {}

    def measure(self, width: int, reference: tuple[Path, Path]) -> Measurement:
        """The model at ``width`` measured on the device (exact counts: once per width)."""
        if width not in self.measured:
            context = self.context(width, reference, None)
            self.measured[width] = CaseMeasure(context)(f"w{width}")
        return self.measured[width]

    def context(self, width: int, reference: tuple[Path, Path], log: HistoryLog | None) -> Any:
        case = Case(trend_net(width), "fp32", 1, False, self.spec, False)
        chosen = settings(self.root / "baselines", sme2_update_baselines=True)
        made = case_context(self.node, case, chosen, self.device, reference, self.root / "run")
        return replace(made, history=log)

    def session(self, log: HistoryLog, width: int, reference: tuple[Path, Path]) -> None:
        """One session at the project's commit: the case judged, its record appended."""
        m = self.measure(width, reference)
        context = self.context(width, reference, log)
        CaseJudge(context, context.check(CaseMeasure(context))).check(m)
        log.close()


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
    request: pytest.FixtureRequest,
    tmp_path: Path,
    reference: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One qemu-sme2 session per commit (exact instruction counts), the model's input made
    6.25 % wider at commit 4 and narrow again at commit 6."""
    project = _project(tmp_path / "project")
    history = tmp_path / "history"
    qemu = Judged(request, tmp_path, "qemu-sme2")
    commits = [_git(project, "rev-parse", "HEAD")]
    for number, width in enumerate((32, 32, 32, 34, 34, 32), start=1):
        if number > 1:
            commits.append(_commit(project, number))
        git, warning = git_state(project)
        assert warning is None
        qemu.session(HistoryLog(history, git, f"session{number}"), width, reference)
        if number == 5:
            first_five = tmp_path / "first-five"
            shutil.copytree(history, first_five)
    short = [c[:7] for c in commits]

    # one file per session, one line per judged case, never rewritten
    files = sorted(history.glob("*.jsonl"))
    assert len(files) == 6
    records = sorted((json.loads(f.read_text()) for f in files), key=lambda r: r["time"])
    assert [r["commit"] for r in records] == commits
    for record in records:
        assert record["schema_version"] == SCHEMA_VERSION
        assert (record["branch"], record["dirty"], record["device"]) == ("main", False, "qemu-sme2")
        assert record["class_id"] and record["machine_class"]["sme_vector_length"] == "64"
    # the first session wrote the baseline; the others judged against it
    for record in records[1:]:
        assert {v["gate"] for v in record["verdicts"]} >= {"instructions[sme2-on]", "parity"}
    # the session's end writes the page into the history directory, which the reader leaves alone
    assert write_history_page(history, project) == (history / PAGE_NAME, ())
    assert read_history(history).problems == ()
    # the pytest-html extra shows the case's last five commits and links to its trend
    trends = CaseTrends(history, project)
    anchor = trends.add(read_history(history).records[-1])
    extra = trends.extra_html(anchor, "history/index.html")
    assert 'href="history/index.html#trend-net-fp32-qemu-sme2"' in extra
    for commit in short[1:]:
        assert commit in extra
    assert short[0] not in extra

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
    request: pytest.FixtureRequest,
    pytester: pytest.Pytester,
    tmp_path: Path,
    reference: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two CI runners (two vector lengths), no git at all; their files copied into one directory
    beside a truncated file, a foreign one and a record of a newer schema."""
    project = pytester.path  # where pytest is invoked: no repository
    runners = {}
    for device in ("qemu-sme2:vl=32", "qemu-sme2:vl=64"):
        runners[device] = tmp_path / device.replace(":", "@")
        session = Sme2Session(pytester.parseconfig(f"--sme2-history={runners[device]}"))
        # no repository: the records carry no commit, and one warning line says why
        with pytest.warns(HistoryWarning) as warned:
            log = session.history_log()
            assert session.history_log() is log  # opened once
        assert [str(w.message) for w in warned] == [
            f"history records carry no commit: not a git repository: {project}"
        ]
        assert log is not None
        Judged(request, tmp_path / device, device).session(log, 32, reference)
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
    project = _project(tmp_path / "project")
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
    project = _project(tmp_path / "project")
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
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's project run as ``pytest --sme2-baseline-dir ../b --sme2-history ../hist``: once
    ``../b`` exists pytest's rootdir moves above the repository, yet the session's records name
    its commit. Then a CI job: a detached checkout, history inside the repository (untracked, so
    the tree is clean), branch from GitHub's variables."""
    project = _project(pytester.path / "project")
    (pytester.path / "b").mkdir()
    head = _git(project, "rev-parse", "HEAD")
    monkeypatch.chdir(project)
    config = pytester.parseconfig("--sme2-baseline-dir", "../b", "--sme2-history", "../hist")
    assert config.rootpath == pytester.path  # the rootdir did move out of the repository
    log = Sme2Session(config).history_log()
    assert log is not None and log.directory == Path("../hist")
    assert (log.git.commit, log.git.branch, log.git.dirty, log.git.no_commit) == (
        head,
        "main",
        False,
        None,
    )
    _git(project, "checkout", "-q", "--detach")
    monkeypatch.setenv("GITHUB_REF_NAME", "main")
    monkeypatch.setenv("GITHUB_HEAD_REF", "")
    log = Sme2Session(pytester.parseconfig("--sme2-history=hist")).history_log()
    assert log is not None
    assert (log.git.commit, log.git.branch, log.git.dirty, log.git.no_commit) == (
        head,
        "main",
        False,
        None,
    )


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
