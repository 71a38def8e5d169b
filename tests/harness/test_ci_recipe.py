"""The GitHub Actions recipes in examples/ pass a real workflow linter (actionlint, installed with
the dev extra), and the linter is awake: a copy with one mistake a user could make fails it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "github-actions" / "sme2.yml"
#: the lab's (docs/lab.md)
LAB_RECIPE = RECIPE.with_name("sme2-lab.yml")


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


def test_the_lab_recipe_passes_actionlint() -> None:
    done = _lint(LAB_RECIPE)
    assert done.returncode == 0, done.stdout + done.stderr
    text = LAB_RECIPE.read_text()
    # what docs/lab.md promises: a hosted runner, the Mac as a remote worker, a phone behind the
    # lab host's adb server, one lab session at a time, the tests given without a path argument
    assert "runs-on: ubuntu-24.04" in text and "group: sme2-lab" in text
    assert '--tx "ssh=$LAB_MAC//id=mini1//' in text and "mac:worker=mini1" in text
    assert "android:server=127.0.0.1:15037:serial=$PHONE" in text
    assert '-o "testpaths=$SUITE"' in text


def test_a_broken_copy_of_the_recipe_fails_actionlint(tmp_path: Path) -> None:
    broken = tmp_path / "sme2.yml"
    # the merge job waiting for a job that does not exist
    broken.write_text(
        RECIPE.read_text().replace("needs: [qemu-sme2, mac-m4]", "needs: [qemu, mac-m4]")
    )
    done = _lint(broken)
    assert done.returncode != 0
    assert 'job "merge" needs job "qemu" which does not exist' in done.stdout, done.stdout
