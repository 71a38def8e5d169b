"""Export failures kept on disk, so a session does not lower again what failed the same way.

An export that fails in ExecuTorch (an operator its partitioner or a pass cannot take: the
example squeezesam_like int8-dynamic fails in ``lower``) leaves no cache entry, so every session
exported it again: 9 s of lowering and 4 s of importing the lowering for nothing, in every warm
run and every CI run. The failure is recorded beside the entry it would have been
(``<entry>.failed.json``) and raised again from there, while nothing it depends on changed:

- the entry's key already holds the model (built, traced and hashed), the recipe and the torch /
  executorch / torchao versions (:mod:`pytest_sme2.export.key`);
- the record holds a digest of pytest-sme2's own sources, which lower the program: any change to
  them exports again;
- only failures of the program itself are recorded, in the stages that only compute (``build
  model`` to ``to_executorch``), and not when the cause was the machine's or the process's (out
  of memory, a file or process error, a runner, a package that does not import, torch refusing a
  second registration of an operator library in a process that imported a module twice): those
  may pass next time, and a record of one would fail every later session — a stale-cache red.

A replayed failure says it was recorded and how to export again (delete the record). A record
that cannot be read is ignored: the export runs and records again.
"""

from __future__ import annotations

import functools
import json
import subprocess
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path

from pytest_sme2.cache import content_key, write_atomic
from pytest_sme2.errors import STAGES, ExportError, RunnerError

SUFFIX = ".failed.json"
FORMAT = 1

#: The stages that only compute, up to ``to_executorch``: a failure there is the program's.
RECORDED_STAGES: tuple[str, ...] = STAGES[: STAGES.index("to_executorch") + 1]
#: Causes that are the machine's, whatever the stage: never recorded.
_MACHINE_CAUSES: tuple[type[BaseException], ...] = (
    ImportError,
    MemoryError,
    OSError,
    RunnerError,
    subprocess.SubprocessError,
)
#: torch's own words for a cause that is the machine's or the process's: out of memory, and an
#: operator library or a cache artifact registered twice in one process (a module imported again,
#: as after a test framework dropped it from ``sys.modules``).
_NOT_THE_PROGRAM = (
    "can't allocate memory",
    "out of memory",
    "only a single torch_library",
    "already registered",
)


def record_path(directory: Path) -> Path:
    """Where the failure of the entry ``directory`` is recorded."""
    return directory.with_name(directory.name + SUFFIX)


def record(directory: Path, err: ExportError) -> None:
    """Record ``err`` for the entry ``directory`` if it is the program's own failure."""
    cause = err.__cause__
    if err.stage not in RECORDED_STAGES or isinstance(cause, _MACHINE_CAUSES):
        return
    if any(words in str(cause).lower() for words in _NOT_THE_PROGRAM):
        return
    failure = {
        "format": FORMAT,
        "model": err.model,
        "dtype": err.dtype,
        "stage": err.stage,
        "cause": err.cause,
        "pytest_sme2": sources_digest(),
        "failed_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    with suppress(OSError):  # unrecorded, it is exported again next time; the failure is raised
        write_atomic(record_path(directory), json.dumps(failure, indent=2) + "\n")


def recorded(directory: Path) -> ExportError | None:
    """The failure recorded for the entry ``directory`` by this very pytest-sme2, if any."""
    path = record_path(directory)
    try:
        failure = json.loads(path.read_text())
        if failure["format"] != FORMAT or failure["pytest_sme2"] != sources_digest():
            return None
        model, dtype, stage, cause = (failure[k] for k in ("model", "dtype", "stage", "cause"))
        when = failure["failed_at"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return ExportError(
        model,
        dtype,
        stage,
        f"{cause} (recorded {when}: the same model, recipe, versions and pytest-sme2 failed "
        f"so; delete {path} to export again)",
    )


@functools.cache
def sources_digest() -> str:
    """A digest of pytest-sme2's Python sources, which lower every program."""
    package = Path(__file__).resolve().parents[1]  # the whole pytest_sme2 package
    files = sorted(package.rglob("*.py"))
    return content_key(*(f"{p.relative_to(package)}\n".encode() + p.read_bytes() for p in files))
