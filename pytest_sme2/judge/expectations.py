"""What a test asks for beyond its baseline: the ``sme2`` marker's keywords, checked against
their schema when the test is collected (a misspelt keyword costs no measurement)."""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import jsonschema

from pytest_sme2.analysis.categories import CATEGORIES
from pytest_sme2.errors import ConfigError
from pytest_sme2.validation import key_path, problem, validator


@dataclass(frozen=True)
class Expectations:
    """What a test asks for beyond its baseline: ``@pytest.mark.sme2(...)`` keyword arguments."""

    speedup_floor: float | None = None
    max_share: Mapping[str, float] = field(default_factory=dict)
    min_share: Mapping[str, float] = field(default_factory=dict)
    require_sme2_kernels: bool = False
    op_counts: Mapping[str, float] = field(default_factory=dict)
    instruction_ratio_floor: float | None = None
    #: each variant's fastest method init (weight packing), ms, where time means something
    max_init_ms: float | None = None

    @classmethod
    def from_marker(cls, kwargs: Mapping[str, Any]) -> Expectations:
        """The expectations a marker's keyword arguments state; a ConfigError naming the keyword
        and its value for anything else (checked when the test is collected, so a misspelt
        keyword costs no measurement: see ``plugin.pytest_collection_modifyitems``)."""
        known = [f.name for f in fields(cls)]
        for key, value in kwargs.items():
            if key not in known:
                near = difflib.get_close_matches(key, known, n=1)
                hint = f"did you mean {near[0]!r}?" if near else f"it takes {', '.join(known)}"
                raise ConfigError(f"{key}={value!r}: unknown keyword; {hint}")
        found = problem(_marker_validator(), dict(kwargs))
        if found is not None:
            path, message = found
            at = f" (at {key_path(path)})" if len(path) > 1 else ""
            raise ConfigError(f"{path[0]}={kwargs[path[0]]!r}: {message}{at}")
        return cls(**kwargs)


_SHARES = {
    "type": "object",
    "propertyNames": {"enum": list(CATEGORIES)},
    "additionalProperties": {"type": "number", "minimum": 0, "maximum": 1},
}
_FLOOR = {"type": ["number", "null"], "exclusiveMinimum": 0}
#: What each keyword of the ``sme2`` marker takes: a share is a fraction of a category (one of
#: the five), a floor a positive ratio, an operator count per run zero (absent) or more.
MARKER_SCHEMA: Mapping[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "speedup_floor": _FLOOR,
        "instruction_ratio_floor": _FLOOR,
        "max_init_ms": _FLOOR,
        "max_share": _SHARES,
        "min_share": _SHARES,
        "require_sme2_kernels": {"type": "boolean"},
        "op_counts": {
            "type": "object",
            "additionalProperties": {"type": "number", "minimum": 0},
        },
    },
}


@functools.cache
def _marker_validator() -> jsonschema.protocols.Validator:
    return validator(MARKER_SCHEMA)
