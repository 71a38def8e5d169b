"""Baseline files: read (validated against the schema first), written (atomically, only what
would read back), and an invalid one set aside under ``--sme2-update-baselines``.

Apart from :mod:`pytest_sme2.judge.baseline` because a file's problems (unreadable, not JSON,
outside the schema, of a newer schema) are where a user's hand edit meets the gates, and each must
end in one line naming the file, never in a traceback or a gate switched off.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import jsonschema

from pytest_sme2.cache import write_atomic
from pytest_sme2.errors import ConfigError
from pytest_sme2.judge.baseline import (
    Baseline,
    Calibration,
    LatencyBaseline,
    SpeedupBaseline,
    TimeRecord,
    Tolerances,
    VariantBaseline,
    VariantTimes,
)
from pytest_sme2.validation import key_path, problem, validator

SCHEMA_VERSION = 2
#: The JSON Schema every baseline is validated against when read, and before it is written.
SCHEMA_FILE = "baseline_schema.json"
#: The time record's key for the runner's own peak resident memory. Records written before it
#: hold ``peak_rss_bytes``, the pytest session's high-water mark (``ru_maxrss`` crosses exec): read
#: as no figure at all, so the gate says "not judged … --sme2-update-baselines records it".
OWN_PEAK_RSS = "runner_peak_rss_bytes"
#: What an invalid baseline's line advises.
REGENERATE = "regenerate it with --sme2-update-baselines (which sets the invalid file aside)"


def to_json(b: Baseline) -> str:
    """The file's text; ``written_by`` names the pytest-sme2 that wrote it, so that a later one
    that meets a newer schema can say which version reads it."""
    doc = {"schema_version": SCHEMA_VERSION, "written_by": package_version(), **asdict(b)}
    for variant in doc["variants"].values():
        if not variant["operator_sme2_kernels"]:  # baselines without them keep their bytes
            del variant["operator_sme2_kernels"]
        for key in ("init_instructions", "planned_bytes"):  # nor do those made without these
            if variant[key] is None:
                del variant[key]
    for record in doc["machines"].values():
        if record["calibration"] is None:  # uncalibrated records keep the shape they always had
            del record["calibration"]
        for times in record["variants"].values():  # as do those of a runner without load figures
            times[OWN_PEAK_RSS] = times.pop("peak_rss_bytes")
            for key in ("program_load_ms", "method_init_ms", OWN_PEAK_RSS):
                if times[key] is None:
                    del times[key]
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


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


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    """The validator of ``baseline_schema.json`` (the package's copy), built once."""
    return validator(
        json.loads(resources.files("pytest_sme2.judge").joinpath(SCHEMA_FILE).read_text())
    )


def schema_problem(doc: Any) -> str | None:
    """The one violation of the schema to tell a user (key path, value and rule), else None."""
    found = problem(_validator(), doc)
    return None if found is None else f"{key_path(found[0])}: {found[1]}"


def load(path: Path) -> Baseline | None:
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
    problem = schema_problem(doc)
    if problem is not None:
        raise InvalidBaseline(path, f"not a valid baseline: {problem}")
    return _from_doc(doc)


def _from_doc(doc: Mapping[str, Any]) -> Baseline:
    """The Baseline of a document the schema accepted (so every key it reads is there)."""
    return Baseline(
        model=doc["model"],
        dtype=doc["dtype"],
        device=doc["device"],
        threads=doc["threads"],
        variants={
            name: VariantBaseline(
                operators=dict(v["operators"]),
                packed_operators=tuple(v["packed_operators"]),
                instructions=v.get("instructions"),
                sme2_kernels=tuple(v.get("sme2_kernels", ())),
                operator_instructions=dict(v.get("operator_instructions", {})),
                instruction_shares=dict(v.get("instruction_shares", {})),
                operator_sme2_kernels={
                    kind: tuple(names) for kind, names in v.get("operator_sme2_kernels", {}).items()
                },
                init_instructions=v.get("init_instructions"),
                planned_bytes=v.get("planned_bytes"),
            )
            for name, v in doc["variants"].items()
        },
        instruction_ratio=doc.get("instruction_ratio"),
        machines={class_id: _record(record) for class_id, record in doc["machines"].items()},
        tolerances=Tolerances(**doc["tolerances"]),
    )


def _record(doc: Mapping[str, Any]) -> TimeRecord:
    variants = {}
    for name, v in doc["variants"].items():
        lat = v["latency"]
        variants[name] = VariantTimes(
            latency=LatencyBaseline(
                **{
                    **lat,
                    "samples_ms": tuple(lat["samples_ms"]),
                    "reference_samples_ms": tuple(lat.get("reference_samples_ms", ())),
                }
            ),
            shares=dict(v["shares"]),
            program_load_ms=v.get("program_load_ms"),
            method_init_ms=v.get("method_init_ms"),
            peak_rss_bytes=v.get(OWN_PEAK_RSS),  # an old "peak_rss_bytes" was the session's
        )
    speedup = doc.get("speedup")
    calibration = doc.get("calibration")
    return TimeRecord(
        machine_class=dict(doc["machine_class"]),
        notes=dict(doc.get("notes", {})),
        variants=variants,
        speedup=SpeedupBaseline(**speedup) if speedup else None,
        calibration=Calibration(**calibration) if calibration else None,
    )


@dataclass(frozen=True)
class Stored:
    """What a case's baseline path holds, as the session uses it."""

    baseline: Baseline | None
    #: under ``--sme2-update-baselines``: the line saying where an invalid file was set aside
    set_aside: str | None = None


def read(path: Path, *, update: bool) -> Stored:
    """:func:`load`, and under ``update`` an invalid file set aside so a fresh one is written.

    Set aside when read, before the case is measured, rather than when the fresh one is saved: a
    measurement that then fails leaves the file under a name that says what it is, and the next
    session starts afresh instead of tripping over it again. A newer schema is never set aside.
    """
    try:
        return Stored(load(path))
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


def save(path: Path, b: Baseline) -> None:
    """Write atomically: an interrupted run never leaves a half-written baseline, and one that
    cannot be written (a read-only directory, a full disk) leaves the stored file as it was and
    fails with one line naming the path. What would not be read back (a value outside the
    schema) is never written."""
    text = to_json(b)
    problem = schema_problem(json.loads(text))
    if problem is not None:
        raise ConfigError(f"{path}: not writing a baseline that would not validate: {problem}")
    try:
        write_atomic(path, text)
    except OSError as err:
        raise ConfigError(
            f"{path}: cannot write the baseline ({err.strerror or err}); the stored file, if any, "
            "is unchanged: make the directory writable or point --sme2-baseline-dir elsewhere"
        ) from None
