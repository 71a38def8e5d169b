"""pytest-sme2: ExecuTorch/XNNPACK profiling (SME2-on vs SME2-off) as pytest regression tests.

The package is a one-way pipeline of small stages — models → export → runner/devices → trace →
analysis → baseline (judgement) → report — joined by frozen dataclasses. This module only
re-exports what a user's conftest needs; importing it must stay cheap (no torch, no executorch).
"""

from pytest_sme2.analysis.tolerances import Tolerance
from pytest_sme2.export.program_files import register_program
from pytest_sme2.export.registry import ModelSpec, register_model

__all__ = ["ModelSpec", "Tolerance", "register_model", "register_program"]
