"""The documentation holds: the mkdocs site builds in strict mode (mkdocs.yml turns a page left
out of nav, a link to a missing page and a missing anchor into warnings, which strict mode makes
a failed build), and the README stays one page that keeps the fresh-machine commands CI runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_LIMIT = 200
MAIN_JOB = (
    "bash scripts/install.sh && python -m pytest tests/test_suite.py --html=report.html "
    "--self-contained-html"
)


def _ci_commands() -> list[str]:
    """The commands `.ci/run` runs: its install and every ``python -m pytest`` line."""
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [line for line in lines if line.startswith(("bash scripts/", "python -m pytest"))]
    assert any(c.startswith("python -m pytest") for c in commands), ".ci/run runs no pytest"
    return commands


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # mkdocs-material's notice, not ours
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "architecture" / "index.html").is_file()


def test_the_readme_is_one_page_with_both_fresh_machine_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_LIMIT
    assert f"```bash\n{MAIN_JOB}\n```" in text
    # the tests command is what .ci/run runs, step by step, joined as the README shows it
    tests_command = " && ".join(_ci_commands())
    assert f"```bash\n{tests_command}\n```" in text
