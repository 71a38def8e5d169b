"""What a forked inner pytest session runs (tests/forked_sessions.py), as a script: the forkserver's
child runs it with ``runpy.run_path``, given ``SESSION``, so the child imports nothing of the
outer suite's."""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Mapping, Sequence


def _run(
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: str,
    stdout: str,
    stderr: str,
    interpreter_path: Sequence[str],
) -> None:
    """``python -mpytest *args`` as a fresh interpreter would run it in ``cwd`` with ``env`` (its
    ``interpreter_path`` after ``cwd`` and ``PYTHONPATH``), its output appended to the files
    ``stdout`` and ``stderr``; exits with its status."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    pythonpath = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[:] = [cwd, *pythonpath, *interpreter_path]
    for fd, path in ((1, stdout), (2, stderr)):
        target = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.dup2(target, fd)
        os.close(target)
    import pytest

    sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"), *args]
    try:
        status = int(pytest.main(list(args)))
    finally:
        atexit._run_exitfuncs()  # what interpreter exit runs; the forked child ends with _exit
    sys.exit(status)


if "SESSION" in globals():
    _run(**SESSION)  # type: ignore[name-defined]  # noqa: F821
