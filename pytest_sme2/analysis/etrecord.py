"""What pytest-sme2 reads from an ETRecord: which backend each delegate call ran on.

An ETRecord is a zip; its ``delegate_map`` member is JSON mapping, per method, the instruction id
of every delegate call to its backend (``{"forward": {"0": {"name": "XnnpackBackend", …}}}``).
Events logged inside a delegate carry that instruction id. Reading it needs neither torch nor
executorch (Inspector would import both to get the same names).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from pytest_sme2.errors import TraceError


def delegate_backends(path: Path | str, method: str = "forward") -> dict[int, str]:
    """Instruction id of each delegate call of ``method`` → its backend's name."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            document = json.loads(archive.read("delegate_map"))
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except (zipfile.BadZipFile, IsADirectoryError):
        raise TraceError(path, "not an ETRecord (not a zip archive)") from None
    except KeyError:
        raise TraceError(path, "not an ETRecord (no delegate_map member)") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise TraceError(path, "corrupt ETRecord: delegate_map is not JSON") from None
    calls = document.get(method, {}) if isinstance(document, dict) else {}
    try:
        return {int(instruction): entry["name"] for instruction, entry in calls.items()}
    except (TypeError, KeyError, ValueError, AttributeError):
        raise TraceError(
            path, f"corrupt ETRecord: unexpected delegate_map for {method!r}"
        ) from None
