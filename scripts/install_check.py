"""Whether this checkout's install is already in place, so the set-up scripts skip pip.

``python scripts/install_check.py EXTRA…`` exits 0 when the running Python has this checkout
installed editable with those extras, its pyproject.toml unchanged since that install
(``--record`` after a successful ``pip install`` writes what it was), and every requirement of
the package and those extras (read from this checkout's pyproject.toml), with theirs in turn,
installed at a version that satisfies it. It exits 2 when only the first two fail (a fresh clone
of a project whose packages this Python has: CI's case): the script then re-points the install
with ``pip install --no-deps --no-build-isolation -e .``. Otherwise it exits 1, and pip installs
everything. Each non-zero exit says why.

Why not let pip decide: with everything in place ``pip install -e .[export]`` still takes 5.5 s
(it builds the editable wheel again), a sixth of the main job's warm run (docs/costs.md); this
check takes a fraction of a second. In a fresh clone whose requirements are all installed, pip
resolving them all again took 10.5 s of `.ci/run`, re-pointing 1.9 s (Xeon 6/207, dev and corpus
extras). Requirement strings, markers and versions are read by ``packaging`` (pip's own); a Python
without it is a fresh one, and pip runs.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STAMP = ROOT / ".install-stamp"
NAME = "pytest-sme2"
#: the exit status that asks for the install to be re-pointed at this checkout, without deps
REPOINT = 2


def stamp(extras: list[str]) -> str:
    """What an install of ``extras`` from this pyproject.toml into this Python is."""
    pyproject = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    return json.dumps({"python": sys.prefix, "pyproject": pyproject, "extras": sorted(extras)})


def missing(extras: list[str]) -> str | None:
    """Why pip must run, or None when nothing is missing."""
    return unrecorded(extras) or unmet(extras)


def unrecorded(extras: list[str]) -> str | None:
    """Why this checkout is not the recorded editable install of ``extras``; None when it is."""
    if not STAMP.is_file() or STAMP.read_text() != stamp(extras):
        return f"no install of {NAME}[{','.join(extras)}] recorded for this pyproject.toml"
    installed = _installed()
    if installed is None:
        return f"{NAME} is not installed"
    direct = json.loads(installed.read_text("direct_url.json") or "{}")
    if direct.get("url") != ROOT.as_uri() or not direct.get("dir_info", {}).get("editable"):
        return f"{NAME} is installed from {direct.get('url', 'elsewhere')}, not {ROOT}"
    return None


def unmet(extras: list[str]) -> str | None:
    """Why a requirement of this checkout's package, its ``extras`` or its build is not
    satisfied here, theirs included; None when every one is."""
    try:
        from packaging.requirements import Requirement
        from packaging.utils import canonicalize_name
    except ImportError:
        return "packaging is not installed: a fresh Python"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pending = [(NAME, frozenset(extras))]
    seen: set[tuple[str, frozenset[str]]] = set()
    while pending:
        name, wanted = pending.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        requires = _own_requires(project, wanted) if name == NAME else metadata.requires(name)
        for text in requires or []:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker and not any(marker.evaluate({"extra": e}) for e in wanted or {""}):
                continue
            try:
                version = metadata.version(requirement.name)
            except metadata.PackageNotFoundError:
                wanted_text = f"{requirement.name}{requirement.specifier}"
                return f"{wanted_text} is not installed (wanted by {name})"
            if not requirement.specifier.contains(version, prereleases=True):
                return f"{requirement.name} {version} does not satisfy {requirement} ({name})"
            pending.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    return None


def _own_requires(project: dict[str, Any], extras: frozenset[str]) -> list[str]:
    """The checkout's build requirements, its dependencies and those of ``extras``; an extra
    that names the package itself (``pytest-sme2[export]``) is walked as the package's."""
    optional = project["project"].get("optional-dependencies", {})
    return [
        *project.get("build-system", {}).get("requires", []),
        *project["project"].get("dependencies", []),
        *(text for extra in sorted(extras) for text in optional.get(extra, [])),
    ]


def _installed() -> metadata.Distribution | None:
    """The installed distribution (pip's, with a ``direct_url.json``), not the ``.egg-info`` a
    checkout on ``sys.path`` also holds."""
    for found in metadata.distributions(name=NAME):
        if found.read_text("direct_url.json") is not None:
            return found
    return None


def main(arguments: list[str]) -> int:
    if arguments[:1] == ["--record"]:
        STAMP.write_text(stamp(arguments[1:]))
        return 0
    why, needed = unrecorded(arguments), unmet(arguments)  # the requirements walked once
    if why is None and needed is None:
        print(f"{NAME}[{','.join(arguments)}] is installed here: pip skipped")
        return 0
    if needed is None:
        print(f"re-pointing the install: {why}; every requirement is installed")
        return REPOINT
    print(f"installing: {why or needed}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
