"""JSON Schema validation (jsonschema) of what users write: stored baselines, marker arguments.

One rule the schemas cannot state: a number is finite. Python's ``json`` reads ``NaN``,
``Infinity`` and overflowing literals (``1e400``) as floats, and a ``nan`` passes every range
check (no comparison with it is true), so it would pass every gate it reaches too. Here
``number`` means a finite real (never a bool, as JSON Schema has it), so a NaN is named with the
key that holds it like any other wrong value.
"""

from __future__ import annotations

import math
import numbers
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

import jsonschema


def _finite_number(checker: Any, instance: object) -> bool:
    return (
        isinstance(instance, numbers.Real)
        and not isinstance(instance, bool)
        and math.isfinite(instance)
    )


def validator(schema: Mapping[str, Any]) -> jsonschema.protocols.Validator:
    """A validator of ``schema`` (its declared draft) whose ``number`` is a finite real."""
    base = jsonschema.validators.validator_for(schema)
    base.check_schema(schema)
    finite = jsonschema.validators.extend(
        base, type_checker=base.TYPE_CHECKER.redefine("number", _finite_number)
    )
    return finite(schema)


def problem(check: jsonschema.protocols.Validator, instance: object) -> tuple[list, str] | None:
    """The most relevant violation (jsonschema's ``best_match``): its path (keys and indices)
    and its message, shortened to one readable line; None when ``instance`` is valid."""
    error = jsonschema.exceptions.best_match(check.iter_errors(instance))
    if error is None:
        return None
    # jsonschema shows the offending value whole: a foreign document could fill a screen
    return list(error.absolute_path), textwrap.shorten(error.message, 240)


def key_path(path: Iterable[str | int]) -> str:
    """``machines.amd-epyc-2c-1a2b.variants.sme2-off.latency.min_ms``: a key with a character
    other than a letter, digit or ``_@=-`` (an operator name) quoted, a list index in brackets."""
    text = ""
    for key in path:
        if isinstance(key, int):
            text += f"[{key}]"
        else:
            plain = key and all(c.isalnum() or c in "_@=-" for c in key)
            shown = key if plain else f'"{key}"'
            text += f".{shown}" if text else shown
    return text or "(the document)"
