"""Byte-compile what one ``pip install --report REPORT`` installed, on every core.

``python scripts/compile_installed.py REPORT`` compiles each installed distribution's Python files
(as its RECORD lists them) with the standard library's ``compileall``, in one process per core.
Why not pip's own compile: it runs in one process, and from a fresh venv torch's and executorch's
17,000 files made the ``export`` extra's install 53–69 s, against 25 s for pip and 21 s for this
(EPYC 26/2, 2 vCPUs; docs/costs.md). Why only what was installed: checking every file of a site
directory that is compiled already takes 7 s, and a CI clone installs only the package itself.
As with pip's compile, a file that does not compile (a template, a test for another Python) is
left as it is and is no install failure.
"""

from __future__ import annotations

import compileall
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from importlib import metadata
from pathlib import Path


def installed_sources(report: Path) -> list[Path]:
    """The ``.py`` files of every distribution the report says pip installed."""
    names = [entry["metadata"]["name"] for entry in json.loads(report.read_text())["install"]]
    sources = []
    for name in names:
        dist = metadata.distribution(name)
        for file in dist.files or ():
            if file.suffix == ".py":
                sources.append(Path(dist.locate_file(file)))
    return sources


def _compile(path: Path) -> bool:
    return bool(compileall.compile_file(path, quiet=2))


def main(report: str) -> int:
    sources = installed_sources(Path(report))
    with ProcessPoolExecutor() as pool:
        list(pool.map(_compile, sources, chunksize=256))
    print(f"compiled the {len(sources):,} Python files pip installed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
