"""SIGTERM unwinds a session as Ctrl-C does (:mod:`pytest_sme2.interrupt`), and the xdist
controller's passes it on to its workers first. In a process of its own: the handler sends
SIGTERM to every child of the process it runs in, which in this suite's worker includes its
forkserver."""

from __future__ import annotations

import signal
import subprocess
import sys

#: Installs the controller's handler, starts a child that would sleep for a minute, receives
#: SIGTERM: says whether it raised Terminated and how the child ended.
CONTROLLER = """
import os, signal, subprocess, sys
from pytest_sme2.interrupt import Terminated, unwind_on_sigterm

unwind_on_sigterm(pass_on=True)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
try:
    os.kill(os.getpid(), signal.SIGTERM)
    raised = False
except Terminated:
    raised = True
print(raised, child.wait(timeout=30))
"""


def test_the_controllers_sigterm_reaches_its_children_then_unwinds_it() -> None:
    """Its workers unwind at once instead of waiting out xdist's teardown in a runner call."""
    done = subprocess.run(
        [sys.executable, "-c", CONTROLLER], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", str(-signal.SIGTERM)]
