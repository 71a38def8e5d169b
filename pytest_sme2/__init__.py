"""pytest-sme2: ExecuTorch/XNNPACK profiling (SME2-on vs SME2-off) as pytest regression tests.

The package is a one-way pipeline of small stages — models → export → runner/devices → trace →
analysis → baseline (judgement) → report — joined by frozen dataclasses. This module only
re-exports what a user's conftest needs, each on first use (PEP 562): importing the package, or
one of its small modules (``pytest_sme2.cache`` from a helper process started dozens of times a
session), costs no numpy, torch or executorch import.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_sme2.analysis.tolerances import Tolerance
    from pytest_sme2.export.model_spec import ModelSpec, register_model
    from pytest_sme2.export.program_files import register_program

__all__ = ["ModelSpec", "Tolerance", "register_model", "register_program"]

#: Each public name → the module that defines it.
_HOMES = {
    "ModelSpec": "pytest_sme2.export.model_spec",
    "register_model": "pytest_sme2.export.model_spec",
    "register_program": "pytest_sme2.export.program_files",
    "Tolerance": "pytest_sme2.analysis.tolerances",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'pytest_sme2' has no attribute {name!r}")
    return getattr(import_module(_HOMES[name]), name)
