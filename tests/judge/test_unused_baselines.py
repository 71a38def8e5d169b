"""Baselines no case of the suite uses any more: listed at the end of a session over the whole
suite, removed under ``--sme2-update-baselines`` (``judge.unused_baselines``, ``Sme2Session``),
and left alone by a session that runs a subset of the cases, which cannot know."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pytest_sme2.cache import cache_root
from pytest_sme2.judge.unused_baselines import UnusedBaselines, settle_unused, unused_baselines
from tests.session.test_plugin import CONFTEST, run

pytest_plugins = ["pytester"]

#: the real export cache, resolved before pytester points HOME elsewhere: inner sessions reuse it
CACHE = cache_root()

#: a test of every case that measures nothing: the sessions after the first only collect cases
CASES_ONLY = """
def test_case(sme2_case, sme2_baseline_path):
    assert sme2_baseline_path.exists()
"""

LISTED = "unused baselines (no collected case uses them;*"


def test_only_this_sessions_thread_counts_and_unused_files_are_found(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    for name in ("a-fp32.json", "a-fp32-t2.json", "b-fp32.json", "b-fp32.json.invalid-1"):
        (host / name).write_text("{}")
    used = {host / "a-fp32.json"}
    assert unused_baselines([host, tmp_path / "none"], used, (1,)) == (host / "b-fp32.json",)
    assert unused_baselines([host], used, (1, 2)) == (host / "a-fp32-t2.json", host / "b-fp32.json")


def test_unused_baselines_are_removed_only_by_an_update_that_named_no_test_file(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    unused, used = host / "gone-fp32.json", host / "kept-fp32.json"

    def settle(**how: bool) -> UnusedBaselines:
        for path in (unused, used):
            path.write_text("{}")
        return settle_unused([host], {used}, (1,), **how)

    assert settle(update=False, named=False) == UnusedBaselines((unused,), removed=False)
    assert unused.exists()
    assert settle(update=True, named=True) == UnusedBaselines((unused,), False, withheld=True)
    assert unused.exists()
    assert settle(update=True, named=False) == UnusedBaselines((unused,), removed=True)
    assert not unused.exists() and used.exists()


def test_what_two_workers_found_is_one_finding():
    one = UnusedBaselines((Path("/b/host/x.json"),), removed=True)
    other = UnusedBaselines((Path("/b/host/y.json"), Path("/b/host/x.json")), removed=True)
    assert one.merged(UnusedBaselines.from_json(other.to_json())) == UnusedBaselines(
        (Path("/b/host/x.json"), Path("/b/host/y.json")), removed=True
    )
    assert one.lines(Path("/b")) == [
        "unused baselines removed (no case of the suite uses them any more):",
        "    host/x.json",
    ]


def test_a_removed_models_baseline_is_listed_then_removed_by_a_whole_suite_update(
    pytester, monkeypatch
):
    """Sessions over the suite's cases (a test that measures nothing): listed by a session over
    the whole suite, kept by one over a subset and by one that named its test file, removed by an
    update over the whole suite — on two xdist workers, each of which finds it."""
    monkeypatch.setenv("SME2_CACHE_DIR", str(CACHE))
    # plug_b is no longer registered; its baseline and plug_a's are on disk
    pytester.makeconftest(CONFTEST.format(size=48).split('@register_model("plug_b"')[0])
    pytester.makepyfile(test_suite=CASES_ONLY)
    host = pytester.path / "baselines" / "host"
    host.mkdir(parents=True)
    gone, kept = host / "plug_b-fp32.json", host / "plug_a-fp32.json"
    two_threads = host / "plug_a-fp32-t2.json"  # another session's (--sme2-threads=2)
    for path in (gone, kept, two_threads):
        path.write_text("{}")  # the cases only ask for their path

    listed = run(pytester)
    listed.assert_outcomes(passed=1)
    listed.stdout.fnmatch_lines(["*pytest-sme2 unused baselines*", LISTED, "    */plug_b-*"])
    assert "plug_a-fp32" not in listed.stdout.str()
    assert gone.exists()

    subset = run(pytester, "--sme2-models=plug_a", "--sme2-update-baselines")
    subset.assert_outcomes(passed=1)
    assert "unused baselines" not in subset.stdout.str() and gone.exists()

    # naming the test file: a module that registers models may be left out, so nothing goes
    named = run(pytester, "test_suite.py", "--sme2-update-baselines")
    named.assert_outcomes(passed=1)
    named.stdout.fnmatch_lines(
        ["unused baselines, not removed *without file arguments removes them):", "    */plug_b-*"]
    )
    assert gone.exists()

    removed = run(pytester, "--sme2-update-baselines", "-n", "2")
    removed.assert_outcomes(passed=1)
    removed.stdout.fnmatch_lines(
        ["*pytest-sme2 unused baselines*", "unused baselines removed *", "    */plug_b-fp32.json"]
    )
    assert not gone.exists() and kept.exists() and two_threads.exists()


@pytest.mark.skipif(
    (sys.platform, os.uname().machine) != ("linux", "x86_64"), reason="auto's x86-64 Linux fleet"
)
def test_auto_leaves_the_emulated_devices_other_dtypes_alone(pytester):
    """``auto`` runs qemu-sme2 for each model's headline dtype only, a subset as under
    ``--sme2-dtypes``: an update over the whole suite neither lists nor removes the others."""
    pytester.makeconftest(
        CONFTEST.format(size=48).replace('dtypes=("fp32",)', 'dtypes=("fp32", "int8")')
    )
    pytester.makepyfile(test_suite=CASES_ONLY)
    for device in ("host", "qemu-sme2"):
        folder = pytester.path / "baselines" / device
        folder.mkdir(parents=True)
        for name in ("plug_a", "plug_b"):
            for dtype in ("fp32", "int8"):
                (folder / f"{name}-{dtype}.json").write_text("{}")
    result = run(pytester, "--sme2-device=auto", "--sme2-update-baselines")
    result.assert_outcomes(passed=6)  # host: 2 models × 2 dtypes; qemu-sme2: 2 models × fp32
    assert "unused baselines" not in result.stdout.str()
    assert (pytester.path / "baselines" / "qemu-sme2" / "plug_b-int8.json").exists()
