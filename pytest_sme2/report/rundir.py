"""The same reports from files: a pytest-sme2 artifact directory, or ETDumps made anywhere.

``sme2 report RUN_DIR`` finds two kinds of input under ``RUN_DIR``:

* our own test directories (a ``manifest.json`` written by pytest-sme2): the case record it holds
  is reloaded exactly (``Measurement.from_json``) with the verdicts, so the report equals the one
  pytest wrote;
* any other ETDump (``*.etdump``, ``*.etdp``), e.g. the reference workflow's
  ``<model>_xnnpack_<dtype>_<exp>_t<threads>.etdump``: paired SME2-off/on by path, where the path
  names the variant (``sme2_on``/``sme2-off``, …). Latency then comes from the traced runs' E2E,
  since there are no timing-only runs, and the report says so.

``sme2 compare A B`` pairs two ETDumps directly: A is the reference (SME2-off), B the candidate
(SME2-on), so ``speedup = A ÷ B`` like everywhere else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_sme2.analysis import profile
from pytest_sme2.devices.base import DeviceInfo, Variant
from pytest_sme2.errors import ConfigError
from pytest_sme2.gates import Verdict
from pytest_sme2.report.artifacts import (
    GENERATOR,
    MANIFEST_NAME,
    REPORT_NAME,
    SCHEMA_VERSION,
    write_artifacts,
)
from pytest_sme2.report.charts import render_charts
from pytest_sme2.report.content import fleet_table
from pytest_sme2.report.markdown import SessionEntry, case_report, session_report
from pytest_sme2.result import Measurement, VariantMeasurement
from pytest_sme2.trace import read_etdump

ETDUMP_SUFFIXES = (".etdump", ".etdp")
_VARIANT = re.compile(r"sme2[_-]?(on|off)", re.IGNORECASE)
_KIT_STEM = re.compile(
    r"^(?P<model>.+?)_xnnpack_(?P<dtype>[a-z0-9-]+?)_(?P<exp>.+?)_t(?P<threads>\d+)$"
)


def _variant_measurement(variant: Variant, etdump: Path, warmup: int) -> VariantMeasurement:
    """One variant from an ETDump made elsewhere: no timing-only runs, so its latencies are the
    traced runs' E2E (first ``warmup`` runs dropped, keeping at least one)."""
    trace = read_etdump(etdump)
    prof = profile(trace, warmup=min(warmup, len(trace.runs) - 1))
    return VariantMeasurement(
        variant=variant, latencies_ms=prof.e2e_ms, timing_warmup=None, profile=prof, etdump=etdump
    )


def measurement_from_etdumps(
    etdumps: Mapping[Variant, Path],
    *,
    warmup: int,
    model: str,
    dtype: str = "unknown",
    threads: int = 1,
    device: str = "unknown",
) -> Measurement:
    """A Measurement from one ETDump per variant, latency from the traced runs (first
    ``warmup`` runs of each dropped, keeping at least one)."""
    variants = {
        v: _variant_measurement(v, etdumps[v], warmup)
        for v in (Variant.ON, Variant.OFF)
        if v in etdumps
    }
    order = tuple(variants)
    limits = {} if len(order) == 2 else {"speedup": f"only the {order[0]} trace was given"}
    info = DeviceInfo(
        name=device,
        fingerprint={"source": ", ".join(str(etdumps[v]) for v in order)},
        has_sme2=Variant.ON in variants,
        variants=order,
        time_meaningful=True,
        limits=limits,
    )
    return Measurement(
        model=model, dtype=dtype, threads=threads, device=info, variants=variants, interleaved=False
    )


def load_test_dir(manifest_path: Path) -> tuple[Measurement, tuple[Verdict, ...]]:
    """Reload the case record and the verdicts of a test directory pytest-sme2 wrote."""
    try:
        data = json.loads(manifest_path.read_text())
        if data["schema_version"] != SCHEMA_VERSION:
            raise ConfigError(
                f"{manifest_path}: manifest schema {data['schema_version']}, this pytest-sme2 "
                f"reads {SCHEMA_VERSION}; re-run the tests that wrote it"
            )
        measurement = Measurement.from_json(data, manifest_path.parent)
        verdicts = tuple(Verdict.from_json(v) for v in data["verdicts"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"{manifest_path}: not a readable pytest-sme2 manifest ({err})") from None
    return measurement, verdicts


def _is_ours(manifest_path: Path) -> bool:
    try:
        return json.loads(manifest_path.read_text()).get("generator") == GENERATOR
    except (OSError, ValueError, AttributeError):
        return False


@dataclass(frozen=True)
class Found:
    """One report to make: a name (its output folder), the measurement and its verdicts."""

    name: str
    measurement: Measurement
    verdicts: tuple[Verdict, ...]


def _foreign_case(key: str) -> dict[str, Any]:
    """model/dtype/threads/device from a kit-style file stem, else the stem as the model."""
    stem = Path(key).name
    for suffix in ETDUMP_SUFFIXES:
        stem = stem.removesuffix(suffix)
    match = _KIT_STEM.match(stem.replace("{}", "sme2"))
    if not match:
        return {
            "model": _VARIANT.sub("", stem).strip("_-") or stem,
            "dtype": "unknown",
            "threads": 1,
            "device": "unknown",
        }
    experiment = match["exp"].replace("sme2", "").strip("_-")
    return {
        "model": match["model"],
        "dtype": match["dtype"],
        "threads": int(match["threads"]),
        "device": experiment or "unknown",
    }


def discover(run_dir: Path, *, warmup: int, exclude: Path | None = None) -> list[Found]:
    """Everything reportable under ``run_dir`` (see the module docstring), except what lies
    under ``exclude`` (a previous report's output inside the run directory)."""
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: not a directory (sme2 report takes a run directory)")
    found: list[Found] = []
    ours: list[Path] = []
    skip = [exclude.resolve()] if exclude is not None else []
    for manifest_path in sorted(run_dir.rglob(MANIFEST_NAME)):
        if any(manifest_path.resolve().is_relative_to(d) for d in skip):
            continue
        if _is_ours(manifest_path):
            m, verdicts = load_test_dir(manifest_path)
            name = str(manifest_path.parent.relative_to(run_dir)).replace("/", "_")
            found.append(Found(name if name != "." else m.model, m, verdicts))
            ours.append(manifest_path.parent)
    groups: dict[str, dict[Variant, Path]] = {}
    for path in sorted(
        p for p in run_dir.rglob("*") if p.suffix in ETDUMP_SUFFIXES and p.is_file()
    ):
        if any(path.is_relative_to(d) for d in ours) or any(
            path.resolve().is_relative_to(d) for d in skip
        ):
            continue
        rel = str(path.relative_to(run_dir))
        matches = list(_VARIANT.finditer(rel))
        if not matches:
            raise ConfigError(
                f"{path}: cannot tell whether this ETDump is SME2-on or -off; put sme2_on or "
                "sme2_off in its path, or use `sme2 compare OFF.etdump ON.etdump`"
            )
        variant = Variant.ON if matches[-1][1].lower() == "on" else Variant.OFF
        key = _VARIANT.sub("{}", rel)
        groups.setdefault(key, {})[variant] = path
    for key, etdumps in groups.items():
        case = _foreign_case(key)
        m = measurement_from_etdumps(etdumps, warmup=warmup, **case)
        found.append(
            Found(f"{case['model']}_{case['dtype']}_{case['device']}_t{case['threads']}", m, ())
        )
    if not found:
        raise ConfigError(
            f"{run_dir}: no ETDump (*.etdump, *.etdp) and no pytest-sme2 manifest found"
        )
    return found


def report_run_dir(run_dir: Path, out: Path, *, warmup: int) -> str:
    """Write every found test's artifacts to ``out/<name>/`` and the session report to
    ``out/report.md``; return the session report's markdown."""
    entries = []
    for item in discover(run_dir, warmup=warmup, exclude=out):
        m = item.measurement
        written = write_artifacts(
            m,
            item.verdicts,
            out / item.name,
            config={"source": str(run_dir)},
            charts=render_charts(m),
        )
        entries.append(SessionEntry(item.name, m, item.verdicts, written.report_md))
    text = session_report(entries, base=out)
    (out / REPORT_NAME).write_text(text)
    return text


def compare_run_dirs(first: Path, second: Path, *, warmup: int) -> str:
    """The across-devices table of two run directories from different devices (say, a Mac's and
    a phone's ``--sme2-artifacts``, or the kit's ETDumps of each): every case of either, side by
    side by device."""
    measurements = [
        item.measurement for run in (first, second) for item in discover(run, warmup=warmup)
    ]
    table = fleet_table(measurements)
    if table is None:
        device = measurements[0].device.name
        raise ConfigError(
            f"{first} and {second}: both hold runs of {device} only; comparing run directories "
            "compares devices (for SME2-off against SME2-on, give the two ETDumps)"
        )
    return (
        f"# SME2 across devices\n\n{first} and {second}. Shares are of the headline variant "
        f"(SME2-on where it ran).\n\n{table.markdown()}\n"
    )


def compare_etdumps(off: Path, on: Path, *, warmup: int, out: Path | None) -> str:
    """Report SME2-off trace ``off`` against SME2-on trace ``on`` (artifacts into ``out``)."""
    case = _foreign_case(_VARIANT.sub("{}", on.name))
    m = measurement_from_etdumps({Variant.OFF: off, Variant.ON: on}, warmup=warmup, **case)
    if out is None:
        return case_report(m, ())
    written = write_artifacts(
        m, (), out, config={"off": str(off), "on": str(on)}, charts=render_charts(m)
    )
    return written.report_md.read_text()
