"""Inner pytest sessions: what they run with, a tiny model to register under names of a test's
choosing, and a project whose sessions a fixture wider than one test runs (:class:`InnerProject`).

A fault is aimed at one case by its model's name: the program's path holds ``NAME_xnnpack`` (an
isolated run's ``model.pte`` links to it), so a wrapper (a user's qemu, a runner's disk) can single
it out while the other cases run for real.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from pytest_sme2.cache import cache_root
from pytest_sme2.runner.build import build_runner
from tests.forked_sessions import fork_pytest

#: The repository: inner sessions import its example models (``models/``).
REPO = Path(__file__).resolve().parents[1]

#: The user's cache (exports, runner builds, qemu), resolved before pytester points HOME at each
#: test's own directory — where an inner session would otherwise rebuild the runner and
#: re-export its models into an empty cache (~12 s each, ~99 inner sessions).
SHARED_CACHE = cache_root()


def with_host_runner(cache: Path) -> Path:
    """``cache``, a test's own, holding a copy of the shared cache's host runner (built there
    first if need be): its sessions export, check numerics and measure without building one —
    3 s of a compiler's CPU in each of the tests whose subject is exporting into a new cache, not
    the build (tests/runner/ and tests/export/test_prefetch.py build it)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SME2_CACHE_DIR", str(SHARED_CACHE))
        built = build_runner().parent
    shutil.copytree(built, cache / "runner" / built.name)
    return cache


#: Plugins no inner session uses. Third-party ones this environment installs: loading them cost
#: each of the ~120 inner sessions ~2.5 s (hypothesis's 2.0 s, hydra's 0.5 s; measured with
#: ``python -X importtime -m pytest --co`` in an empty directory: 7.3 s with them, 2.3 s without,
#: on the loaded 2-core VM), anyio's, kgb's and platformdirs' 0.35 s more. And pytest's own hooks
#: for unraisable and thread exceptions, whose clean-up at exit runs the garbage collector over
#: torch's objects: 0.56 s. An inner session of the small model collected in 3.0 s with only the
#: first two spared, 2.0 s with all (quiet EPYC 26/2). Blocking a plugin that is not installed is
#: no error.
SPARED_PLUGINS = (
    "-p no:hypothesispytest",
    "-p no:hydra_pytest",
    "-p no:anyio",
    "-p no:kgb",
    "-p no:platformdirs",
    "-p no:unraisableexception",
    "-p no:threadexception",
)


#: What xdist puts in a worker's environment. An inner session started from a test on a worker
#: inherits it, and the plugin takes a process that has it for a worker: one that neither counts
#: its cases ahead nor exports on every core, and prefixes its progress lines with the worker's
#: id. So CI's inner sessions of one process ran as workers, and two tests failed only off xdist.
XDIST_WORKER_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")

#: The short plan of :data:`INNER_DEFAULTS`.
INNER_PLAN = ("--sme2-runs=6", "--sme2-rounds=2", "--sme2-traced-runs=2")

#: What every inner session runs with unless its test says otherwise (a later flag wins):
#: time judged beside the other worker (see :func:`pytester`); the host alone, where the default
#: (auto) adds qemu-sme2 on this CPU; and category shares opened wide — the inner models run in
#: 0.07 ms, where a baseline recorded beside the other worker held Other at 43 % and every later
#: measurement, four of them spread over 10 s, at 9 %. The share gate is tested where it is the
#: subject (tests/judge/test_gates.py), and on real-sized models by benchmarks/gating_quality.py.
#: And a short measurement plan (the session's default is 10 rounds of 20 runs and 10 traced
#: runs): each round is a runner call, over a second through the adb double, so two phones'
#: three cases took 5 minutes; a test that judges time against its own planted change passes
#: the plan it needs (a later flag wins).
INNER_DEFAULTS = (
    *SPARED_PLUGINS,
    "--sme2-judge-disturbed",
    "--sme2-device=host",
    "--sme2-share-tolerance=100",
    *INNER_PLAN,
)


SMALL_MODEL = """
import torch
from torch import nn

from pytest_sme2 import register_model


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # 16 output channels: with 8 SME2 is dearer (tests/judge/small_model.py)
        self.conv = nn.Conv2d(3, 16, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x)).mean(dim=(2, 3))


def small_inputs(seed):
    return (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(seed)),)
"""


def inner_conftest(*names: str) -> str:
    """A conftest registering the small model under each of ``names``: cases run in this order,
    and a qemu wrapper can single one out by its name (``NAME_xnnpack`` in the program's path)."""
    return SMALL_MODEL + "".join(
        f'\n\n@register_model("{name}", inputs=small_inputs, dtypes=("fp32",))\n'
        f"def {name}():\n    torch.manual_seed({seed})\n    return Small().eval()\n"
        for seed, name in enumerate(names)
    )


INNER_TEST = """
def test_model(sme2_measurement, sme2_judge):
    sme2_judge(sme2_measurement)
"""


def examples_session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, cache: Path, suite: str
) -> None:
    """Make ``pytester``'s directory a project of the repository's example models with the test
    file ``suite``, its sessions (and their xdist workers) using the cache ``cache``: the real
    one, resolved before pytester pointed HOME elsewhere, so exports and qemu are reused."""
    monkeypatch.setenv("SME2_CACHE_DIR", str(cache))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join((str(REPO), os.environ.get("PYTHONPATH", ""))))
    pytester.makeconftest("import models  # noqa: F401  (registers the examples)")
    pytester.makepyfile(test_suite=suite)


def through_qemu(qemu: Path, tmp_path: Path) -> tuple[str, ...]:
    """An inner qemu-sme2 session's arguments through the user's ``qemu`` (a wrapper that lies or
    hangs), recording fresh baselines and its artifacts under ``tmp_path``."""
    return (
        "-p",
        "no:cacheprovider",
        "--sme2-device=qemu-sme2",
        f"--sme2-qemu={qemu}",
        f"--sme2-baseline-dir={tmp_path / 'baselines'}",
        f"--sme2-artifacts={tmp_path / 'artifacts'}",
        "--sme2-update-baselines",
    )


class InnerProject:
    """A user's project in a directory of its own, whose pytest sessions a fixture wider than one
    test runs: pytester's directory and sessions belong to one test, so tests that check the
    same sessions each ran them again. Its sessions run as pytester's do (tests/conftest.py):
    :data:`INNER_DEFAULTS` before their own arguments, the suite's cache, the repository
    importable, forked from this worker's server (:mod:`tests.forked_sessions`)."""

    def __init__(self, path: Path, conftest: str, **test_files: str) -> None:
        path.mkdir(parents=True, exist_ok=True)
        (path / "conftest.py").write_text(conftest)
        for name, text in test_files.items():
            (path / f"{name}.py").write_text(text)
        self.path = path
        self._sessions = 0

    def run(
        self, *args: str, timeout_s: float = 900, env: Mapping[str, str] | None = None
    ) -> pytest.RunResult:
        """``python -mpytest *args`` in the project (``env`` over this process's environment),
        as pytester's ``runpytest_subprocess`` returns it; its output is echoed, for a failure's
        report."""
        self._sessions += 1
        name = f"session{self._sessions}"
        out, err = self.path / f"{name}.out", self.path / f"{name}.err"
        environment = {
            **{name: value for name, value in os.environ.items() if name not in XDIST_WORKER_ENV},
            "PYTEST_ADDOPTS": " ".join(INNER_DEFAULTS),
            "SME2_CACHE_DIR": str(SHARED_CACHE),
            "HOME": str(self.path),
            "PY_COLORS": "0",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            **(env or {}),
        }
        command = ["-p", "no:cacheprovider", f"--basetemp={self.path / name}", *args]
        started = time.monotonic()
        out.touch()
        err.touch()
        session = fork_pytest(
            command, env=environment, cwd=self.path, stdout=str(out), stderr=str(err)
        )
        try:
            code = session.wait(timeout_s)
        except subprocess.TimeoutExpired:
            session.kill()
            session.wait()
            raise
        outlines, errlines = out.read_text().splitlines(), err.read_text().splitlines()
        print(f"{name}: pytest {' '.join(command)}", *outlines, *errlines, sep="\n")
        ret = pytest.ExitCode(code) if code in set(pytest.ExitCode) else code
        return pytest.RunResult(ret, outlines, errlines, time.monotonic() - started)
