"""Baseline files: read (validated against the schema first), written (atomically, only what
would read back), and an invalid one set aside under ``--sme2-update-baselines``.

Each spec writes and reads its own keys (:mod:`pytest_sme2.judge.quantities`), and the schema is
``baseline_schema.json``'s frame with each spec's fragment added; what a file did not hold stays
absent, so a file read and written again is the same file (its ``written_by`` aside). A file's
problems (unreadable, not JSON, outside the schema, of a newer schema) are where a user's hand
edit meets the gates, and each must end in one line naming the file, never in a traceback or a
gate switched off.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import jsonschema

from pytest_sme2.cache import write_atomic
from pytest_sme2.errors import ConfigError
from pytest_sme2.judge.baseline_model import (
    Baseline,
    Figures,
    TimeRecord,
    VariantBaseline,
    VariantTimes,
)
from pytest_sme2.judge.quantities import (
    BUILTIN,
    RECORD_PARTS,
    TIME_PARTS,
    VARIANT_PARTS,
    Quantities,
)
from pytest_sme2.judge.scalar import Place, ScalarSpec
from pytest_sme2.measure.deadline import Deadline
from pytest_sme2.records.device import DeviceInfo
from pytest_sme2.validation import key_path, problem, validator

SCHEMA_VERSION = 2
#: The frame of the JSON Schema every baseline is validated against when read, and before it is
#: written (:func:`schema`).
SCHEMA_FILE = "baseline_schema.json"
#: What an invalid baseline's line advises.
REGENERATE = "regenerate it with --sme2-update-baselines (which sets the invalid file aside)"


def to_json(b: Baseline) -> str:
    """The file's text; ``written_by`` names the pytest-sme2 that wrote it, so that a later one
    that meets a newer schema can say which version reads it."""
    doc = {
        "schema_version": SCHEMA_VERSION,
        "written_by": package_version(),
        "model": b.model,
        "dtype": b.dtype,
        "device": b.device,
        "threads": b.threads,
        "tolerances": dict(b.tolerances),
        "variants": {name: _written(VARIANT_PARTS, v) for name, v in b.variants.items()},
        "machines": {class_id: _record_json(r) for class_id, r in b.machines.items()},
        **b.figures,
    }
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _written(parts: Iterable[Any], part: VariantBaseline | VariantTimes) -> dict[str, Any]:
    """A variant's portable part or times as the file holds them: each spec's keys."""
    doc: dict[str, Any] = {}
    for spec in parts:
        doc.update(spec.to_json(part))
    return {**doc, **part.figures}


def _record_json(record: TimeRecord) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "machine_class": dict(record.machine_class),
        "notes": dict(record.notes),
        "variants": {name: _written(TIME_PARTS, t) for name, t in record.variants.items()},
    }
    for spec in RECORD_PARTS:
        doc.update(spec.to_json(record))
    return doc


@functools.cache
def package_version() -> str:
    """This pytest-sme2's version, as installed ("unknown" run from a source tree that is not)."""
    try:
        return version("pytest-sme2")
    except PackageNotFoundError:
        return "unknown"


class InvalidBaseline(ConfigError):
    """A baseline that cannot be used: unreadable, not JSON, or not what the schema allows.

    ``--sme2-update-baselines`` sets such a file aside and writes a fresh one (:func:`read`)."""

    def __init__(self, path: Path, problem: str, advice: str = REGENERATE) -> None:
        self.path, self.problem = path, problem
        super().__init__(f"{path}: {problem}; {advice}")


class NewerBaseline(ConfigError):
    """A baseline of a newer schema than this pytest-sme2 reads: never judged, never replaced
    (overwriting it would throw away what a newer pytest-sme2 recorded)."""


def schema(quantities: Quantities = BUILTIN) -> dict[str, Any]:
    """The JSON Schema of a baseline: ``baseline_schema.json``'s frame, each spec's keys added
    where the baseline keeps them."""
    frame = json.loads(resources.files("pytest_sme2.judge").joinpath(SCHEMA_FILE).read_text())
    doc = copy.deepcopy(frame)
    defs = doc["$defs"]
    _add(doc, quantities.at(Place.CASE))
    _add(defs["portable_variant"], (*VARIANT_PARTS, *quantities.at(Place.VARIANT)))
    _add(defs["variant_times"], (*TIME_PARTS, *quantities.at(Place.TIME)))
    _add(defs["time_record"], RECORD_PARTS)
    return doc


def _add(target: dict[str, Any], specs: Iterable[Any]) -> None:
    for spec in specs:
        target["properties"].update(spec.schema)
        target["required"] = [*target["required"], *getattr(spec, "required", ())]


@functools.cache
def _validator(quantities: Quantities) -> jsonschema.protocols.Validator:
    """The validator of :func:`schema`, built once per set of quantities."""
    return validator(schema(quantities))


def schema_problem(doc: Any, quantities: Quantities = BUILTIN) -> str | None:
    """The one violation of the schema to tell a user (key path, value and rule), else None."""
    found = problem(_validator(quantities), doc)
    return None if found is None else f"{key_path(found[0])}: {found[1]}"


def load(path: Path, quantities: Quantities = BUILTIN) -> Baseline | None:
    """The baseline at ``path``, None if there is none.

    A file that cannot be used is :class:`InvalidBaseline` (one line: the file, the key path, the
    value), one of a newer schema :class:`NewerBaseline`: validated against the schema before
    anything is built from it, so no stored value (NaN, a negative or zero latency, a string) can
    switch a gate off or end in a traceback.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:  # a directory, no permission, I/O, not text
        problem = getattr(err, "strerror", None) or err
        raise InvalidBaseline(
            path,
            f"cannot read the baseline ({problem})",
            "fix the path or point --sme2-baseline-dir elsewhere",
        ) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise InvalidBaseline(path, f"not valid JSON ({err.msg} at line {err.lineno})") from None
    except RecursionError:
        raise InvalidBaseline(path, "not a baseline (JSON nested too deeply)") from None
    version = doc.get("schema_version") if isinstance(doc, dict) else None
    if isinstance(version, int) and not isinstance(version, bool):
        if version > SCHEMA_VERSION:
            writer = doc.get("written_by")
            writer = (
                f"pytest-sme2 {writer}"
                if isinstance(writer, str)
                else f"a newer pytest-sme2 than {package_version()}"
            )
            raise NewerBaseline(
                f"{path}: baseline schema {version}, written by {writer}; this pytest-sme2 "
                f"({package_version()}) reads schema {SCHEMA_VERSION}: judge this case with "
                f"{writer} (the file is left as it is, --sme2-update-baselines included)"
            )
        if version < SCHEMA_VERSION:
            raise InvalidBaseline(
                path, f"baseline schema {version}, this pytest-sme2 reads {SCHEMA_VERSION}"
            )
    problem = schema_problem(doc, quantities)
    if problem is not None:
        raise InvalidBaseline(path, f"not a valid baseline: {problem}")
    return _from_doc(doc, quantities)


def _from_doc(doc: Mapping[str, Any], quantities: Quantities) -> Baseline:
    """The Baseline of a document the schema accepted (so every key it reads is there)."""
    variant_figures, time_figures = quantities.at(Place.VARIANT), quantities.at(Place.TIME)
    return Baseline(
        model=doc["model"],
        dtype=doc["dtype"],
        device=doc["device"],
        threads=doc["threads"],
        variants={
            name: VariantBaseline(**_read(VARIANT_PARTS, v), figures=_figures(variant_figures, v))
            for name, v in doc["variants"].items()
        },
        machines={
            class_id: TimeRecord(
                machine_class=dict(record["machine_class"]),
                notes=dict(record.get("notes", {})),
                variants={
                    name: VariantTimes(**_read(TIME_PARTS, t), figures=_figures(time_figures, t))
                    for name, t in record["variants"].items()
                },
                **_read(RECORD_PARTS, record),
            )
            for class_id, record in doc["machines"].items()
        },
        tolerances=dict(doc["tolerances"]),
        figures=_figures(quantities.at(Place.CASE), doc),
    )


def _read(parts: Iterable[Any], doc: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of the compound ``parts``, each read by its spec."""
    fields: dict[str, Any] = {}
    for part in parts:
        fields.update(part.from_json(doc))
    return fields


def _figures(specs: Iterable[ScalarSpec], doc: Mapping[str, Any]) -> Figures:
    """The scalar quantities ``specs`` the document holds, under their keys."""
    return {spec.key: doc[spec.key] for spec in specs if spec.key in doc}


@dataclass(frozen=True)
class Stored:
    """What a case's baseline path holds, as the session uses it."""

    baseline: Baseline | None
    #: under ``--sme2-update-baselines``: the line saying where an invalid file was set aside
    set_aside: str | None = None

    def deadline(self, device: DeviceInfo, fixed_s: float | None) -> Deadline:
        """Each runner call's deadline for the case on ``device``: its baseline's
        (``Baseline.deadline``), else ``fixed_s`` or the device's own default."""
        if self.baseline is None:
            return Deadline(fixed_s)
        return self.baseline.deadline(device, fixed_s)


def read(path: Path, *, update: bool, quantities: Quantities = BUILTIN) -> Stored:
    """:func:`load`, and under ``update`` an invalid file set aside so a fresh one is written.

    Set aside when read, before the case is measured, rather than when the fresh one is saved: a
    measurement that then fails leaves the file under a name that says what it is, and the next
    session starts afresh instead of tripping over it again. A newer schema is never set aside.
    """
    try:
        return Stored(load(path, quantities))
    except InvalidBaseline as err:
        if not update:
            raise
        aside = path.with_name(f"{path.name}{INVALID_SUFFIX}{_utc_stamp()}")
        try:
            path.rename(aside)
        except OSError as move_err:
            raise ConfigError(
                f"{path}: {err.problem}; cannot set it aside as {aside.name} "
                f"({move_err.strerror or move_err}): move or delete it"
            ) from None
        return Stored(None, f"set aside the invalid baseline as {aside} ({err.problem})")


#: What a set-aside invalid baseline's name carries (``toy_cnn-fp32.json.invalid-<UTC time>``);
#: the repository's .gitignore keeps such files out of ``git add baselines/``.
INVALID_SUFFIX = ".invalid-"


def _utc_stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def save(path: Path, b: Baseline, quantities: Quantities = BUILTIN) -> None:
    """Write atomically: an interrupted run never leaves a half-written baseline, and one that
    cannot be written (a read-only directory, a full disk) leaves the stored file as it was and
    fails with one line naming the path. What would not be read back (a value outside the
    schema) is never written."""
    text = to_json(b)
    problem = schema_problem(json.loads(text), quantities)
    if problem is not None:
        raise ConfigError(f"{path}: not writing a baseline that would not validate: {problem}")
    try:
        write_atomic(path, text)
    except OSError as err:
        raise ConfigError(
            f"{path}: cannot write the baseline ({err.strerror or err}); the stored file, if any, "
            "is unchanged: make the directory writable or point --sme2-baseline-dir elsewhere"
        ) from None
