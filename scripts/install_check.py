"""Whether this checkout's install is already in place, so the set-up scripts skip pip.

``python scripts/install_check.py EXTRA…`` exits 0 when the running Python has this checkout
installed editable with those extras, its pyproject.toml unchanged since that install
(``--record`` after a successful ``pip install`` writes what it was), and every requirement of
the package and those extras, with theirs in turn, installed at a version that satisfies it.
Otherwise it exits 1 and says why, and the script runs pip.

Why not let pip decide: with everything in place ``pip install -e .[export]`` still takes 5.5 s
(it builds the editable wheel again), a sixth of the main job's warm run (docs/costs.md); this
check takes a fraction of a second. Requirement strings, markers and versions are read by
``packaging`` (pip's own); a Python without it is a fresh one, and pip runs.
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAMP = ROOT / ".install-stamp"
NAME = "pytest-sme2"


def stamp(extras: list[str]) -> str:
    """What an install of ``extras`` from this pyproject.toml into this Python is."""
    pyproject = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    return json.dumps({"python": sys.prefix, "pyproject": pyproject, "extras": sorted(extras)})


def missing(extras: list[str]) -> str | None:
    """Why pip must run, or None when nothing is missing."""
    try:
        from packaging.requirements import Requirement
        from packaging.utils import canonicalize_name
    except ImportError:
        return "packaging is not installed: a fresh Python"
    if not STAMP.is_file() or STAMP.read_text() != stamp(extras):
        return f"no install of {NAME}[{','.join(extras)}] recorded for this pyproject.toml"
    installed = _installed()
    if installed is None:
        return f"{NAME} is not installed"
    direct = json.loads(installed.read_text("direct_url.json") or "{}")
    if direct.get("url") != ROOT.as_uri() or not direct.get("dir_info", {}).get("editable"):
        return f"{NAME} is installed from {direct.get('url', 'elsewhere')}, not {ROOT}"
    pending = [(NAME, frozenset(extras))]
    seen: set[tuple[str, frozenset[str]]] = set()
    while pending:
        name, wanted = pending.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        requires = installed.requires if name == NAME else metadata.requires(name)
        for text in requires or []:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker and not any(marker.evaluate({"extra": e}) for e in wanted or {""}):
                continue
            try:
                version = metadata.version(requirement.name)
            except metadata.PackageNotFoundError:
                wanted = f"{requirement.name}{requirement.specifier}"
                return f"{wanted} is not installed (wanted by {name})"
            if not requirement.specifier.contains(version, prereleases=True):
                return f"{requirement.name} {version} does not satisfy {requirement} ({name})"
            pending.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    return None


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
    why = missing(arguments)
    if why is None:
        print(f"{NAME}[{','.join(arguments)}] is installed here: pip skipped")
        return 0
    print(f"installing: {why}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
