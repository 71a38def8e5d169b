"""What a forked inner pytest session runs (tests/forked_sessions.py), as a script: the forkserver's
child runs it with ``runpy.run_path``, given ``SESSION``, so the child imports nothing of the
outer suite's."""

from __future__ import annotations

import atexit
import os
import sys
import threading
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
    pythonpath = [os.path.abspath(e) for e in env.get("PYTHONPATH", "").split(os.pathsep) if e]
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
        # what interpreter exit does, in its order (the forked child ends with os._exit): wait
        # for the session's non-daemon threads, then run the atexit functions
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    sys.exit(status)


if "SESSION" in globals():
    _run(**SESSION)  # type: ignore[name-defined]  # noqa: F821
