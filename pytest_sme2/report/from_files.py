"""The same reports from files: a pytest-sme2 artifact directory, or ETDumps made anywhere.

``sme2 report RUN_DIR`` finds two kinds of input under ``RUN_DIR``:

* our own test directories (a ``manifest.json`` with a pytest-sme2 ``sme2`` record): the case
  record is reloaded exactly (``Measurement.from_json``) with the verdicts, so the report equals
  the one pytest wrote;
* any other ETDump (``*.etdump``, ``*.etdp``), e.g. a reference-kit run directory
  (``manifest.json``, experiment folders ``<device>_sme2_on``/``_off`` holding
  ``<model>_xnnpack_<dtype>_<exp>_t<threads>.etdump``): paired SME2-off/on by path, where the path
  names the variant (``sme2_on``/``sme2-off``, …); an experiment folder's name gives the device,
  the kit manifest's ``model`` the program and so its ETRecord (``<model>.etrecord``, which names
  the delegated operators' backend; without one they are still read). Latency then comes from
  the traced runs' E2E, since there are no timing-only runs, and the report says so.

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

from pytest_sme2.analysis.etrecord import delegate_backends
from pytest_sme2.analysis.profile import profile
from pytest_sme2.analysis.trace import read_etdump
from pytest_sme2.cache import write_atomic
from pytest_sme2.errors import ConfigError
from pytest_sme2.records.device import DeviceInfo, Variant
from pytest_sme2.records.measurement import Measurement, VariantMeasurement
from pytest_sme2.records.outcome import CaseOutcome
from pytest_sme2.records.verdict import Verdict
from pytest_sme2.report.artifacts import MANIFEST_NAME, SESSION_REPORT_NAME, write_artifacts
from pytest_sme2.report.charts import render_charts
from pytest_sme2.report.content import FLEET_NOTE, fleet_table
from pytest_sme2.report.kit_json import GENERATOR, SCHEMA_VERSION, Program
from pytest_sme2.report.markdown import case_report, session_markdown
from pytest_sme2.report.session_report import build_session_report

ETDUMP_SUFFIXES = (".etdump", ".etdp")
_VARIANT = re.compile(r"sme2[_-]?(on|off)", re.IGNORECASE)
_KIT_STEM = re.compile(
    r"^(?P<model>.+?)_xnnpack_(?P<dtype>[a-z0-9-]+?)_(?P<exp>.+?)_t(?P<threads>\d+)$"
)
#: a kit experiment folder: ``<device>_sme2_on`` / ``<device>_sme2_off``
_EXPERIMENT = re.compile(r"^(?P<device>.+?)_sme2_(?:on|off)$", re.IGNORECASE)
#: the kit's program stem: ``<model>_xnnpack_<dtype>``
_PROGRAM_STEM = re.compile(r"^(?P<model>.+?)_xnnpack_(?P<dtype>[a-z0-9-]+)$")


def _variant_measurement(
    variant: Variant, etdump: Path, warmup: int, backends: Mapping[int, str] | None
) -> VariantMeasurement:
    """One variant from an ETDump made elsewhere: no timing-only runs, so its latencies are the
    traced runs' E2E (first ``warmup`` runs dropped, keeping at least one)."""
    trace = read_etdump(etdump)
    prof = profile(trace, warmup=min(warmup, len(trace.runs) - 1), backends=backends)
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
    backends: Mapping[int, str] | None = None,
) -> Measurement:
    """A Measurement from one ETDump per variant, latency from the traced runs (first
    ``warmup`` runs of each dropped, keeping at least one); ``backends`` from the program's
    ETRecord, where there is one."""
    variants = {
        v: _variant_measurement(v, etdumps[v], warmup, backends)
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


def _record(data: Any) -> Mapping[str, Any] | None:
    """Our part of a manifest: its ``sme2`` record (schema 3), or the whole manifest of an
    older pytest-sme2 (schema ≤ 2, the record at the top level); None for anyone else's."""
    if not isinstance(data, dict):
        return None
    ours = data.get("sme2")
    if isinstance(ours, dict) and ours.get("generator") == GENERATOR:
        return ours
    return data if data.get("generator") == GENERATOR else None


def load_test_dir(manifest_path: Path) -> tuple[Measurement, tuple[Verdict, ...]]:
    """Reload the case record and the verdicts of a test directory pytest-sme2 wrote."""
    try:
        ours = _record(json.loads(manifest_path.read_text()))
        if ours is None:
            raise KeyError("no pytest-sme2 record")
        if ours["schema_version"] != SCHEMA_VERSION:
            raise ConfigError(
                f"{manifest_path}: manifest schema {ours['schema_version']}, this pytest-sme2 "
                f"reads {SCHEMA_VERSION}; re-run the tests that wrote it"
            )
        measurement = Measurement.from_json(ours["record"], manifest_path.parent)
        verdicts = tuple(Verdict.from_json(v) for v in ours["verdicts"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"{manifest_path}: not a readable pytest-sme2 manifest ({err})") from None
    return measurement, verdicts


def _read_manifest(manifest_path: Path) -> Any:
    try:
        return json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class KitRun:
    """A run directory (the kit's, or ours): the program its ``manifest.json`` names."""

    directory: Path
    #: ``<model>_xnnpack_<dtype>``, the .pte's stem
    program_stem: str | None
    #: the program and its ETRecord, where they are still there
    pte: Path | None
    etrecord: Path | None

    @classmethod
    def read(cls, manifest_path: Path, data: Mapping[str, Any]) -> KitRun:
        """The run of a manifest. Its ``model`` is a path on the machine that ran it: when the
        directory has moved, the program is looked for beside the manifest by its name."""
        directory = manifest_path.parent
        model = data.get("model")
        if not isinstance(model, str) or not model:
            return cls(directory, None, None, None)
        named = Path(model)
        ptes = (named, directory / named.name)
        pte = next((c for c in ptes if c.is_file()), None)
        etrecords = (Path(f"{named}.etrecord"), directory / f"{named.name}.etrecord")
        etrecord = next((c for c in etrecords if c.is_file()), None)
        return cls(directory, named.stem, pte, etrecord)

    def backends(self) -> dict[int, str] | None:
        return delegate_backends(self.etrecord) if self.etrecord is not None else None

    def program(self) -> Program | None:
        """What a report made from this run copies into its own run directory."""
        return Program(self.pte, self.etrecord) if self.pte is not None else None


@dataclass(frozen=True)
class Found:
    """One report to make: a name (its output folder), the measurement and its verdicts."""

    name: str
    measurement: Measurement
    verdicts: tuple[Verdict, ...]
    #: the report's title where the run had one (the pytest node id)
    title: str | None = None
    program: Program | None = None


def _foreign_case(key: str, folder: str = "", program_stem: str | None = None) -> dict[str, Any]:
    """model/dtype/threads/device of an ETDump made elsewhere: from its kit-style file stem,
    the kit experiment folder it is in (``folder``: the device) and the kit manifest's program
    (``program_stem``), else the stem as the model."""
    stem = Path(key).name
    for suffix in ETDUMP_SUFFIXES:
        stem = stem.removesuffix(suffix)
    match = _KIT_STEM.match(stem.replace("{}", "sme2"))
    program = _PROGRAM_STEM.match(program_stem or "")
    if match:
        case = {
            "model": match["model"],
            "dtype": match["dtype"],
            "threads": int(match["threads"]),
            "device": match["exp"].replace("sme2", "").strip("_-") or "unknown",
        }
    else:
        case = {
            "model": program["model"] if program else _VARIANT.sub("", stem).strip("_-") or stem,
            "dtype": program["dtype"] if program else "unknown",
            "threads": 1,
            "device": "unknown",
        }
    experiment = _EXPERIMENT.match(folder)
    if experiment:
        case["device"] = experiment["device"]
    return case


def _enclosing(path: Path, runs: list[KitRun]) -> KitRun | None:
    """The innermost kit run directory holding ``path``."""
    holding = [r for r in runs if path.is_relative_to(r.directory)]
    return max(holding, key=lambda r: len(r.directory.parts), default=None)


def _etdump_pairs(
    run_dir: Path, ours: list[Path], skip: list[Path]
) -> dict[str, dict[Variant, Path]]:
    """ETDumps made elsewhere, by their path with the variant taken out ("{}"): the SME2-off and
    -on traces of a case share it. Our own test directories (``ours``) and ``skip`` are left
    out; an ETDump whose path names no variant is an error."""
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
        groups.setdefault(_VARIANT.sub("{}", rel), {})[variant] = path
    return groups


def discover(run_dir: Path, *, warmup: int, exclude: Path | None = None) -> list[Found]:
    """Everything reportable under ``run_dir`` (see the module docstring), except what lies
    under ``exclude`` (a previous report's output inside the run directory)."""
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: not a directory (sme2 report takes a run directory)")
    found: list[Found] = []
    ours: list[Path] = []
    kit_runs: list[KitRun] = []
    skip = [exclude.resolve()] if exclude is not None else []
    for manifest_path in sorted(run_dir.rglob(MANIFEST_NAME)):
        if any(manifest_path.resolve().is_relative_to(d) for d in skip):
            continue
        data = _read_manifest(manifest_path)
        ours_record = _record(data)
        if ours_record is not None:
            m, verdicts = load_test_dir(manifest_path)
            name = str(manifest_path.parent.relative_to(run_dir)).replace("/", "_")
            config = ours_record.get("config")
            title = config.get("nodeid") if isinstance(config, dict) else None
            program = KitRun.read(manifest_path, data).program()
            found.append(Found(name if name != "." else m.model, m, verdicts, title, program))
            ours.append(manifest_path.parent)
        elif isinstance(data, dict):
            kit_runs.append(KitRun.read(manifest_path, data))
    for key, etdumps in _etdump_pairs(run_dir, ours, skip).items():
        path = next(iter(etdumps.values()))
        run = _enclosing(path, kit_runs)
        case = _foreign_case(key, path.parent.name, run.program_stem if run else None)
        backends = run.backends() if run is not None else None
        m = measurement_from_etdumps(etdumps, warmup=warmup, backends=backends, **case)
        found.append(
            Found(
                f"{case['model']}_{case['dtype']}_{case['device']}_t{case['threads']}",
                m,
                (),
                program=run.program() if run is not None else None,
            )
        )
    if not found:
        raise ConfigError(
            f"{run_dir}: no ETDump (*.etdump, *.etdp) and no pytest-sme2 manifest found"
        )
    return found


def report_run_dir(run_dir: Path, out: Path, *, warmup: int) -> str:
    """Write every found test's artifacts to ``out/<name>/`` (a run directory each) and the
    session report to ``out/report.md``; return the session report's markdown."""
    outcomes = []
    for item in discover(run_dir, warmup=warmup, exclude=out):
        m = item.measurement
        written = write_artifacts(
            m,
            item.verdicts,
            out / item.name,
            config={"source": str(run_dir)},
            charts=render_charts(m),
            title=item.title,
            program=item.program,
        )
        outcomes.append(
            CaseOutcome(
                item.name,
                m.device.name,
                m.model,
                m.dtype,
                m.threads,
                measurement=m,
                verdicts=tuple(item.verdicts),
                run_dir=written.directory,
                case_report=written.report_md,
            )
        )
    text = session_markdown(build_session_report(outcomes, here=out), base=out)
    write_atomic(out / SESSION_REPORT_NAME, text)
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
    return f"# SME2 across devices\n\n{first} and {second}. {FLEET_NOTE}\n\n{table.markdown()}\n"


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
