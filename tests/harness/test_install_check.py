"""The set-up scripts skip pip only when this Python already has what they would install
(scripts/install_check.py): a recorded install of this pyproject.toml, the package installed
editable from the checkout, and every requirement, theirs included, satisfied; and they only
re-point the install when the checkout alone is new (a fresh clone whose requirements are here)."""

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


def test_a_fresh_clone_whose_requirements_are_installed_is_only_repointed(
    check: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Another checkout of the same project (CI's clean clone): nothing recorded there and the
    package installed from elsewhere, but every requirement its pyproject.toml names is here, so
    the install is re-pointed without deps (exit 2), not redone."""
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "pyproject.toml").write_bytes((check.ROOT / "pyproject.toml").read_bytes())
    monkeypatch.setattr(check, "ROOT", clone)
    assert check.main(["dev"]) == check.REPOINT
    assert capsys.readouterr().out.startswith("re-pointing the install: no install of ")


def test_a_requirement_only_the_checkouts_pyproject_names_runs_pip(
    check: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The requirements are this checkout's, not those the installed package was built with: a
    pull request that adds one gets pip, and the requirement is named."""
    clone = tmp_path / "clone"
    clone.mkdir()
    pyproject = (check.ROOT / "pyproject.toml").read_text()
    added = pyproject.replace(
        '    "pytest>=8",\n', '    "pytest>=8",\n    "no-such-package-7731>=1",\n'
    )
    assert added != pyproject
    (clone / "pyproject.toml").write_text(added)
    monkeypatch.setattr(check, "ROOT", clone)
    assert check.unmet(["export"]) == (
        "no-such-package-7731>=1 is not installed (wanted by pytest-sme2)"
    )
    assert check.main(["export"]) == 1
