"""The GitHub Actions recipe in examples/ passes a real workflow linter (actionlint, installed with
the dev extra), and the linter is awake: a copy with one mistake a user could make fails it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "github-actions" / "sme2.yml"


def _lint(path: Path) -> subprocess.CompletedProcess[str]:
    actionlint = shutil.which("actionlint")
    assert actionlint, "actionlint is missing: pip install -e '.[dev]'"
    return subprocess.run(
        [actionlint, "-no-color", str(path)], capture_output=True, text=True, timeout=120
    )


def test_the_recipe_passes_actionlint() -> None:
    done = _lint(RECIPE)
    assert done.returncode == 0, done.stdout + done.stderr
    text = RECIPE.read_text()
    # the jobs docs/ci.md promises: emulated SME2, a real M4, and a merge of both
    assert "runs-on: [self-hosted, macOS, ARM64]" in text
    assert "needs: [qemu-sme2, mac-m4]" in text
    assert "sme2 history history/kept" in text


def test_a_broken_copy_of_the_recipe_fails_actionlint(tmp_path: Path) -> None:
    broken = tmp_path / "sme2.yml"
    # the merge job waiting for a job that does not exist
    broken.write_text(
        RECIPE.read_text().replace("needs: [qemu-sme2, mac-m4]", "needs: [qemu, mac-m4]")
    )
    done = _lint(broken)
    assert done.returncode != 0
    assert 'job "merge" needs job "qemu" which does not exist' in done.stdout, done.stdout
