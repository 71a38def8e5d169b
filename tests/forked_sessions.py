"""Inner pytest sessions forked from a server that has imported torch, instead of started as new
interpreters: the same command, environment, directory and output files, a process of its own.

Why: pytester's ``runpytest_subprocess`` starts ``python -mpytest`` afresh, and every inner
session's conftest imports torch (the example models): 1.4 s of CPU before the session collects
anything, about half of what an inner session that reads its exports and counts from the cache
costs, paid by well over a hundred of them per run of this suite. A multiprocessing forkserver
(one per xdist worker) imports torch and pytest once and forks each session from there; the child
then sets up what ``python -mpytest`` would have (``forkserver/sme2_forked_pytest.py``). Only
sessions run through pytester's ``run`` or a :class:`tests.inner.InnerProject` are forked; a
test that starts one with ``pytester.popen`` (to signal it, or read it while it runs) gets a new
interpreter, as does any other command and any test marked ``fresh_interpreter``.

What a forked session cannot see: whatever torch and pytest do while they are imported (their
import-time warnings, filters and log handlers happen in the server, once), and what an
interpreter reads from the environment when it starts (``PYTHONWARNINGS``, ``PYTHONHASHSEED``,
``PYTHONDEVMODE``; torch's ``OMP_*``, ``TORCH_LOGS``): no test sets those for an inner session,
and a test about import-time behaviour (the warnings summary, tests/session/test_plugin.py) is
marked ``fresh_interpreter``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import runpy
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: The script a forked session runs (``runpy.run_path``).
SCRIPT = Path(__file__).resolve().parent / "forkserver" / "sme2_forked_pytest.py"
#: What the server imports before it forks any session.
PRELOADED = ("torch", "pytest")

_CONTEXT: Any = None
_INTERPRETER_PATH: list[str] = []


def _context() -> Any:
    """This worker's forkserver context, set up on first use."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(list(PRELOADED))
    return _CONTEXT


def _interpreter_path() -> list[str]:
    """What a fresh ``python`` has on ``sys.path`` before its directory and ``PYTHONPATH``: the
    standard library and the site-packages with their ``.pth`` entries (the editable install
    among them), read once from the interpreter itself."""
    if not _INTERPRETER_PATH:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        shown = subprocess.run(
            [sys.executable, "-P", "-c", "import json, sys; print(json.dumps(sys.path))"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        _INTERPRETER_PATH.extend(json.loads(shown.stdout))
    return _INTERPRETER_PATH


class ForkedSession:
    """The part of ``subprocess.Popen`` pytester's ``run`` uses, for a forked session."""

    stdin = None

    def __init__(self, command: Sequence[str], process: Any) -> None:
        self.args = list(command)
        self._process = process
        self.pid = process.pid

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self._process.exitcode

    def kill(self) -> None:
        self._process.kill()


def fork_pytest(
    args: Sequence[str], *, env: Mapping[str, str], cwd: Path | str, stdout: str, stderr: str
) -> ForkedSession:
    """``python -mpytest *args`` run in ``cwd`` with ``env``, its output appended to the files
    ``stdout`` and ``stderr``: forked from this worker's server, set up as a new interpreter
    would be (``cwd`` first in ``PYTHONPATH``, as pytester runs it)."""
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.fspath(cwd), env.get("PYTHONPATH")]))
    session = {
        "args": list(args),
        "env": env,
        "cwd": os.fspath(cwd),
        "stdout": stdout,
        "stderr": stderr,
        "interpreter_path": _interpreter_path(),
    }
    process = _context().Process(
        target=runpy.run_path,
        args=(str(SCRIPT),),
        kwargs={"init_globals": {"SESSION": session}, "run_name": "sme2_forked_pytest"},
        name="inner pytest",
    )
    process.start()
    return ForkedSession([sys.executable, "-mpytest", *args], process)


def forked_popen(original: Any) -> Any:
    """pytester's ``popen``, forking what its ``run`` starts of pytest (``python -mpytest`` with
    its output in files) and passing anything else to ``original``."""

    def popen(cmdargs: Sequence[Any], stdout: Any = None, stderr: Any = None, **kw: Any) -> Any:
        command = [os.fspath(arg) for arg in cmdargs]
        files = hasattr(stdout, "name") and hasattr(stderr, "name")
        if command[:2] != [sys.executable, "-mpytest"] or not files or set(kw) - {"stdin"}:
            return original(cmdargs, stdout=stdout, stderr=stderr, **kw)
        stdout.flush()
        stderr.flush()
        return fork_pytest(
            command[2:], env=os.environ, cwd=os.getcwd(), stdout=stdout.name, stderr=stderr.name
        )

    return popen
