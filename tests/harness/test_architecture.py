"""The house's rules as checks: import-linter's contracts (pyproject.toml) hold, an upward import
or a circle breaks them naming the import, and no function or module outgrows its limit."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: import-linter's ``lint-imports`` command, run by the interpreter of this session
LINT_IMPORTS = (
    "import sys; from importlinter.cli import lint_imports_command; lint_imports_command()"
)


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter over the package at ``root`` (its pyproject's contracts), no cache."""
    return subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache"],
        cwd=root,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_layers_hold() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A copy of the package and its contracts to break."""
    shutil.copytree(REPO / "pytest_sme2", tmp_path / "pytest_sme2")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_an_upward_import_fails_naming_it(scratch: Path) -> None:
    """analysis (the pure layer) made to import judge: the contract breaks and names the line."""
    trace = scratch / "pytest_sme2/analysis/trace.py"
    trace.write_text(trace.read_text() + "\nfrom pytest_sme2.judge import gates  # noqa\n")
    result = lint_imports(scratch)
    assert result.returncode != 0
    assert "pytest_sme2.analysis is not allowed to import pytest_sme2.judge" in result.stdout
    assert "pytest_sme2.analysis.trace -> pytest_sme2.judge.gates" in result.stdout


def test_a_record_that_imports_a_stage_fails_naming_it(scratch: Path) -> None:
    """The shared records made to import the judge (which imports them): both the layers and the
    records' own contract break, naming the line."""
    verdict = scratch / "pytest_sme2/records/verdict.py"
    verdict.write_text(verdict.read_text() + "\nfrom pytest_sme2.judge import gates  # noqa\n")
    result = lint_imports(scratch)
    assert result.returncode != 0
    assert "The shared records import no stage but analysis BROKEN" in result.stdout
    assert "pytest_sme2.records.verdict -> pytest_sme2.judge.gates" in result.stdout


def test_a_circle_between_siblings_fails_naming_it(scratch: Path) -> None:
    """Two report modules importing each other: the acyclic contract breaks and names them."""
    fmt = scratch / "pytest_sme2/report/format.py"
    fmt.write_text(fmt.read_text() + "\nfrom pytest_sme2.report import content  # noqa\n")
    result = lint_imports(scratch)
    assert result.returncode != 0
    assert "No cycles are allowed in pytest_sme2.report" in result.stdout
    assert ".format -> .content" in result.stdout or ".content -> .format" in result.stdout


def test_no_function_or_module_outgrows_its_limit() -> None:
    """scripts/longest.py prints the longest functions, classes and modules and the functions with
    the most parameters; it fails past a limit."""
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts/longest.py")], capture_output=True, text=True
    )
    assert "longest functions (limit 60 lines)" in result.stdout
    assert result.returncode == 0, result.stdout
