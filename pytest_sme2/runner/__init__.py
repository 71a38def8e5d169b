"""The native runner: its C++ source, its cached build, and one run of it as a subprocess.

``build_runner()`` gives a binary linked against an executorch wheel (host, or aarch64 by cross
compilation); ``run_runner()`` runs a :class:`RunnerCall` (a ``.pte``, its inputs, its
:class:`Executions`) as a device's :class:`Launch` says and returns a :class:`RunResult`
(latencies, ETDump, outputs). Importing this package imports neither torch nor executorch.
"""

from pytest_sme2.runner.build import build_runner, executorch_version
from pytest_sme2.runner.invoke import Executions, Launch, RunnerCall, RunResult, run_runner

__all__ = [
    "Executions",
    "Launch",
    "RunResult",
    "RunnerCall",
    "build_runner",
    "executorch_version",
    "run_runner",
]
