"""The set-up scripts skip pip only when this Python already has what they would install
(scripts/install_check.py): a recorded install of this pyproject.toml, the package installed
editable from the checkout, and every requirement, theirs included, satisfied."""

from __future__ import annotations

import importlib.util
import json
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install_check.py"


@pytest.fixture
def check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The script, pointed at the checkout pytest-sme2 is installed from here (the set-up script
    ran there), with its stamp in a file of the test's own."""
    spec = importlib.util.spec_from_file_location("install_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    installed = module._installed()
    assert installed is not None, "pytest-sme2 is not installed: bash scripts/install_tests.sh"
    direct = json.loads(installed.read_text("direct_url.json") or "{}")
    installed_from = Path(direct["url"].removeprefix("file://"))
    monkeypatch.setattr(module, "ROOT", installed_from)
    monkeypatch.setattr(module, "STAMP", tmp_path / ".install-stamp")
    return module


def test_a_recorded_install_whose_requirements_hold_skips_pip(check: ModuleType) -> None:
    assert check.missing(["export"]) is not None  # nothing recorded yet
    assert check.main(["--record", "export"]) == 0
    assert check.missing(["export"]) is None
    assert check.main(["export"]) == 0


def test_another_extra_or_a_changed_pyproject_runs_pip(check: ModuleType) -> None:
    check.main(["--record", "export"])
    assert "no install of pytest-sme2[dev] recorded" in check.missing(["dev"])
    check.STAMP.write_text(check.STAMP.read_text().replace('"pyproject": "', '"pyproject": "0'))
    assert "recorded for this pyproject.toml" in check.missing(["export"])


def test_a_requirement_of_a_requirement_out_of_range_runs_pip(
    check: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch is the export extra's; sympy is torch's own: an old one is found all the same."""
    check.main(["--record", "export"])
    version = metadata.version

    def older_sympy(name: str) -> str:
        return "0.1" if name.lower() == "sympy" else version(name)

    monkeypatch.setattr(metadata, "version", older_sympy)
    why = check.missing(["export"])
    assert why is not None and why.startswith("sympy 0.1 does not satisfy sympy")
    assert why.endswith("(torch)")


def test_a_missing_requirement_runs_pip(check: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    check.main(["--record", "export"])
    version = metadata.version

    def no_cmake(name: str) -> str:
        if name.lower() == "cmake":
            raise metadata.PackageNotFoundError(name)
        return version(name)

    monkeypatch.setattr(metadata, "version", no_cmake)
    assert check.missing(["export"]) == "cmake>=3.28 is not installed (wanted by pytest-sme2)"
