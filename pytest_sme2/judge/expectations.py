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

#: ``sme2_loss_tolerance`` not given by the marker: the session's tolerance applies (the marker's
#: None turns the gate off, so absent and None must differ).
SESSION = "session"
#: Points SME2 coverage may fall from the baseline's: exact where the device counts kernels per
#: operator, so any layer's move shows; 1 point lets a layer of under 1 % of the work move.
COVERAGE_TOLERANCE_POINTS = 1.0


@dataclass(frozen=True)
class Expectations:
    """What a test asks for beyond its baseline: ``@pytest.mark.sme2(...)`` keyword arguments.

    ``speedup_floor`` is one floor for every thread count, or a floor per thread count
    (``{1: 1.5, 4: 1.2}``: "SME2 still helps at 4 threads"; a count not named has none).
    ``min_thread_gain`` is a floor per thread count N > 1 on E2E(1 thread) ÷ E2E(N threads), per
    variant (``judge.thread_gates``): the N-thread case then times its 1-thread runs too.
    """

    speedup_floor: float | Mapping[int, float] | None = None
    max_share: Mapping[str, float] = field(default_factory=dict)
    min_share: Mapping[str, float] = field(default_factory=dict)
    require_sme2_kernels: bool = False
    op_counts: Mapping[str, float] = field(default_factory=dict)
    instruction_ratio_floor: float | None = None
    #: each variant's fastest method init (weight packing), ms, where time means something
    max_init_ms: float | None = None
    min_thread_gain: Mapping[int, float] = field(default_factory=dict)
    #: % an operator may cost more with SME2 on than off (``judge.sme2_losses``); None: not
    #: judged for this test; :data:`SESSION` (not given): the session's ``--sme2-loss-tolerance``
    sme2_loss_tolerance: float | str | None = SESSION
    #: the least share (%) of the GEMM and convolution work SME2-on must run in SME2 kernels
    #: (``judge.sme2_coverage``); None: no floor
    min_sme2_coverage: float | None = None
    #: points SME2 coverage may fall from the baseline's before the case fails
    sme2_coverage_tolerance: float = COVERAGE_TOLERANCE_POINTS

    def loss_tolerance(self, session: float | None) -> float | None:
        """The SME2 loss tolerance of this test: the marker's where it gives one (None: off),
        else the session's ``session``."""
        if self.sme2_loss_tolerance == SESSION:
            return session
        return None if self.sme2_loss_tolerance is None else float(self.sme2_loss_tolerance)

    def speedup_floor_at(self, threads: int) -> float | None:
        """The SME2 speedup floor of a case on ``threads`` threads, None where there is none."""
        if isinstance(self.speedup_floor, Mapping):
            return self.speedup_floor.get(threads)
        return self.speedup_floor

    def thread_gain_floor(self, threads: int) -> float | None:
        """The floor on E2E(1 thread) ÷ E2E(``threads``), None where there is none."""
        return self.min_thread_gain.get(threads)

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
        # a thread count is a mapping key: JSON Schema names keys as strings
        found = problem(_marker_validator(), {k: _keyed_by_text(v) for k, v in kwargs.items()})
        if found is not None:
            path, message = found
            at = f" (at {key_path(path)})" if len(path) > 1 else ""
            raise ConfigError(f"{path[0]}={kwargs[path[0]]!r}: {message}{at}")
        per_threads = {k: _by_threads(v) for k, v in kwargs.items() if k in _PER_THREADS}
        return cls(**{**kwargs, **per_threads})


#: The keywords that may name thread counts (``{2: 1.5}``).
_PER_THREADS = ("speedup_floor", "min_thread_gain")


def _keyed_by_text(value: Any) -> Any:
    return {str(k): v for k, v in value.items()} if isinstance(value, Mapping) else value


def _by_threads(value: Any) -> Any:
    """A validated per-thread-count mapping with int keys (``{"2": 1.5}`` and ``{2: 1.5}`` alike);
    anything else as given."""
    return {int(k): v for k, v in value.items()} if isinstance(value, Mapping) else value


_SHARES = {
    "type": "object",
    "propertyNames": {"enum": list(CATEGORIES)},
    "additionalProperties": {"type": "number", "minimum": 0, "maximum": 1},
}
_FLOOR = {"type": ["number", "null"], "exclusiveMinimum": 0}
#: A floor per thread count: ``{threads: floor}``, thread counts ≥ 1 (``_FROM_TWO``: ≥ 2).
_COUNTS = "^[1-9][0-9]*$"
_FROM_TWO = "^([2-9]|[1-9][0-9]+)$"


def _per_threads(pattern: str) -> dict[str, Any]:
    return {
        "type": "object",
        "propertyNames": {"pattern": pattern},
        "additionalProperties": {"type": "number", "exclusiveMinimum": 0},
    }


#: What each keyword of the ``sme2`` marker takes: a share is a fraction of a category (one of
#: the five), a floor a positive ratio, an operator count per run zero (absent) or more.
MARKER_SCHEMA: Mapping[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "speedup_floor": {
            "if": {"type": "object"},
            "then": _per_threads(_COUNTS),
            "else": _FLOOR,
        },
        "min_thread_gain": _per_threads(_FROM_TWO),
        "instruction_ratio_floor": _FLOOR,
        "max_init_ms": _FLOOR,
        "max_share": _SHARES,
        "min_share": _SHARES,
        "require_sme2_kernels": {"type": "boolean"},
        "sme2_loss_tolerance": {"type": ["number", "null"], "minimum": 0},
        "min_sme2_coverage": {"type": ["number", "null"], "minimum": 0, "maximum": 100},
        "sme2_coverage_tolerance": {"type": "number", "minimum": 0},
        "op_counts": {
            "type": "object",
            "additionalProperties": {"type": "number", "minimum": 0},
        },
    },
}


@functools.cache
def _marker_validator() -> jsonschema.protocols.Validator:
    return validator(MARKER_SCHEMA)
