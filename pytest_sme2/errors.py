"""Errors a user can cause or fix, each a one-line message naming the file/option and what to do.

The plugin and the CLI turn these into a failed test or a one-line ``error:``; anything else is a
bug in pytest-sme2 and keeps its traceback.
"""

from __future__ import annotations

from pathlib import Path


class Sme2Error(Exception):
    """Base class: ``str(err)`` is a complete, single-line explanation."""


class TraceError(Sme2Error):
    """An ETDump that cannot be read: missing, truncated, not an ETDump, or inconsistent."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


#: The stages an export can fail at (``ExportError.stage``), in pipeline order.
STAGES: tuple[str, ...] = (
    "build model",
    "torch.export",
    "quantize",
    "lower",
    "to_executorch",
    "serialize",
    "etrecord",
    "numerics",
)


class ExportError(Sme2Error):
    """A model × dtype that could not be exported (or exported with wrong numerics)."""

    def __init__(self, model: str, dtype: str, stage: str, cause: str) -> None:
        self.model, self.dtype, self.stage, self.cause = model, dtype, stage, cause
        super().__init__(f"export of {model}[{dtype}] failed at {stage}: {cause}")


class NumericsError(ExportError):
    """The exported program's outputs disagree with eager PyTorch beyond the dtype's tolerance."""


class ProgramError(Sme2Error):
    """A registered program (``register_program``) that cannot be gated as it is: not a program,
    inputs that do not match it, an operator the runner lacks, outputs off its expected ones."""

    def __init__(self, name: str, pte: Path, problem: str) -> None:
        self.name, self.pte, self.problem = name, pte, problem
        super().__init__(f"program {name} ({pte}): {problem}")


class RunnerError(Sme2Error):
    """The native runner could not be built, or a run failed (load, execute, I/O)."""


class DeviceLost(RunnerError):
    """The device stopped being reachable (unplugged, adbd gone): the rest of its cases cannot
    run, while the other devices of the fleet go on."""


class ConfigError(Sme2Error):
    """A bad option, ini value, marker argument or model registration."""
