"""The kit-facing JSON of a case's run directory: ``manifest.json`` (the kit's keys, and our case
record under ``sme2``), ``metrics.json`` (``results[]``) and ``sme2_analysis_summary.json``, and
the kit's names for a case's experiments.

Apart from :mod:`pytest_sme2.report.artifacts` (which writes the files) because these documents
are a contract with another tool's readers (docs/kit-contract.md): what each key holds, in which
unit, and why an emulated device's milliseconds are modelled, is decided here alone.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib import metadata, util
from pathlib import Path
from typing import Any

from pytest_sme2.analysis.profile import unit_suffix
from pytest_sme2.analysis.stats import LatencyStats
from pytest_sme2.records.device import Variant, device_file_name
from pytest_sme2.records.measurement import LoadMeasurement, Measurement, VariantMeasurement
from pytest_sme2.records.verdict import Verdict
from pytest_sme2.report.format import ordered_variants

#: ``generator`` value of our manifests' ``sme2`` record: ``sme2 report`` reloads those exactly.
GENERATOR = "pytest-sme2"
#: 3: the kit's run manifest, the case record under its ``sme2`` key
SCHEMA_VERSION = 3
#: What the kit-facing milliseconds mean on an emulated device (``time_model`` in the manifest
#: and metrics.json). The emulator's wall time moves with the host's load and JIT, not with the
#: guest's work (a 3.43× instruction ratio read as a 1.23× "slowdown"); the instruction count of
#: one inference is exact, and "1 ns = 1 instruction" is the convention of our instruction-timed
#: profiles already (:mod:`pytest_sme2.analysis.attribution`).
TIME_MODEL = (
    "modelled: 1 ms = 1,000,000 guest instructions of one steady-state inference (qemu exec "
    "log); emulated wall time is not a signal"
)


def model_stem(m: Measurement) -> str:
    """The kit's ``<model>_xnnpack_<dtype>`` (the .pte stem)."""
    return f"{m.model}_xnnpack_{m.dtype}"


def experiment(m: Measurement, variant: Variant) -> str:
    """The kit's experiment name: ``<device>_sme2_on`` / ``<device>_sme2_off``; file names are
    made of it, so a fleet's device is named as its folder is (``qemu-sme2@vl=32``)."""
    return f"{device_file_name(m.device.name)}_{variant.value.replace('-', '_')}"


@dataclass(frozen=True)
class Program:
    """The program the ETDumps came from: its ``.pte`` and ETRecord (None where there is none)."""

    pte: Path
    etrecord: Path | None


@dataclass(frozen=True)
class VariantFiles:
    """The files written for one variant, all inside its experiment folder ``folder``."""

    folder: Path
    etdump: Path
    timeline_all: Path
    timeline_run0: Path
    ops_stats: Path
    chrome_trace: Path
    #: where the device counts instructions: the operators in millions of instructions
    instructions_ops: Path | None
    kernels: Path


def relative_path(path: Path, base: Path) -> str:
    """``path`` as the JSON names it: relative to the run directory ``base``."""
    return os.path.relpath(path, base)


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for dist in ("pytest-sme2", "executorch", "torch", "pandas"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


_GIT_VERSION = re.compile(r"""^git_version\b.*?=\s*['"]([0-9a-f]{7,40})['"]""", re.MULTILINE)


def executorch_sha() -> str | None:
    """The commit the installed executorch wheel was built from (its ``version.py``; read, not
    imported: importing executorch takes seconds). The runners are built against that wheel."""
    spec = util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        return None
    version_py = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        match = _GIT_VERSION.search(version_py.read_text())
    except OSError:
        return None
    return match[1] if match else None


def _operator_details(
    profile_json: Mapping[str, Any], variant: Variant, suffix: str
) -> list[dict[str, Any]]:
    """The profile's operators (``Profile.to_json``, keys ending in ``suffix``) with the kit's
    extra names for them: its ``avg_*`` is our mean per instance."""
    return [
        {
            **op,
            f"avg{suffix}": op[f"mean{suffix}"],
            "kernel_hint": "packed SME operands (SME/SME2 kernel)" if op["packed"] else "",
            "variant": str(variant),
        }
        for op in profile_json["operators"]
    ]


def comparison_json(m: Measurement) -> dict[str, Any] | None:
    comparison = m.comparison
    if comparison is None:
        return None
    s = comparison.speedup
    return {
        "speedup": s.value,
        "speedup_ci95": [s.low, s.high],
        "paired": s.paired,
        "time_meaningful": m.device.time_meaningful,
        "category_speedups": comparison.category_speedups,
        "operator_speedups": comparison.operator_speedups,
    }


def analysis_summary(
    m: Measurement, files: Mapping[Variant, VariantFiles], base: Path
) -> dict[str, Any]:
    """The kit's ``analysis_summary.json`` keys (``category_totals_ms``, ``per_etdump``,
    ``operator_details``), for the headline variant at top level, per variant in ``per_etdump``.
    An instruction profile's totals are ``category_totals_minstr``: never a ``_ms`` name."""
    head = m.headline
    head_profile = m.variants[head].profile
    head_json = head_profile.to_json()
    suffix = unit_suffix(head_profile.unit)
    per_etdump = []
    csv_files = []
    for variant in ordered_variants(m):
        variant_profile = m.variants[variant].profile
        prof = variant_profile.to_json()
        f = files[variant]
        csvs = [
            relative_path(p, base)
            for p in (f.timeline_all, f.timeline_run0, f.ops_stats, f.instructions_ops)
            if p is not None and p.is_file()
        ]
        csv_files += csvs
        per_etdump.append(
            {
                "etdump": relative_path(f.etdump, base),
                "experiment": experiment(m, variant),
                "variant": str(variant),
                **prof,
                "packed_operators": list(variant_profile.packed_operators),
                "csv_files": csvs,
                "chrome_trace": relative_path(f.chrome_trace, base),
                "operator_details": _operator_details(
                    prof, variant, unit_suffix(variant_profile.unit)
                ),
            }
        )
    return {
        "generator": GENERATOR,
        "model": m.model,
        "dtype": m.dtype,
        "threads": m.threads,
        "device": m.device.name,
        "emulated": not m.device.time_meaningful,
        "unit": head_profile.unit,
        "category_totals_variant": str(head),
        f"category_totals{suffix}": head_json[f"categories{suffix}"],
        "category_shares": head_json["shares"],
        "per_etdump": per_etdump,
        "operator_details": _operator_details(head_json, head, suffix),
        "comparison": comparison_json(m),
        "csv_files": csv_files,
        "csv_dir": ".",
    }


def kit_latencies_ms(m: Measurement, variant: Variant) -> tuple[float, ...]:
    """The latencies the kit is given for ``variant``: its measured runs in milliseconds of the
    device's clock where that clock means something; on an emulated device the one inference's
    guest instructions as modelled time (:data:`TIME_MODEL`), or none where it counts none."""
    vm = m.variants[variant]
    if m.device.time_meaningful:
        return tuple(vm.latencies_ms)
    if vm.evidence is None or not vm.evidence.instructions:
        return ()
    return (vm.evidence.instructions / 1e6,)


def kit_results(m: Measurement, files: Mapping[Variant, VariantFiles], base: Path) -> list[dict]:
    """The kit's ``results[]``: per experiment the latencies of the variant's measured runs (its
    timing-only runs, else its traced runs) — on an emulated device, modelled time
    (:func:`kit_latencies_ms`)."""
    results = []
    for variant in ordered_variants(m):
        latencies = kit_latencies_ms(m, variant)
        stats = LatencyStats.of(latencies) if latencies else None
        etdump = files[variant].etdump
        results.append(
            {
                "experiment": experiment(m, variant),
                "variant": str(variant),
                "metrics": {
                    "runs": len(latencies),
                    "threads": m.threads,
                    "latency_ms": list(latencies),
                    "median_ms": stats.median_ms if stats else None,
                    "min_ms": stats.min_ms if stats else None,
                    "max_ms": stats.max_ms if stats else None,
                    "emulated": not m.device.time_meaningful,
                    **_time_model(m),
                    "etdump": str(etdump.resolve()) if etdump.is_file() else None,
                    "log": None,  # the runner's log stays with its run in .sme2-runs
                    "etdump_rel": relative_path(etdump, base) if etdump.is_file() else None,
                    "log_rel": None,
                    **load_metrics(m.variants[variant].load),
                },
            }
        )
    return results


def load_metrics(load: LoadMeasurement | None) -> dict[str, Any]:
    """Load and memory in the kit's metrics, beside the latencies: ``model_load_ms`` as
    ExecuTorch's dashboards name load time (program load + method init), nothing under an
    ``_ms`` name where time is emulated (the kit reads those as milliseconds)."""
    if load is None:
        return {}
    timed = load.program_load_ms is not None and load.method_init_ms is not None
    return {
        "model_load_ms": load.program_load_ms + load.method_init_ms if timed else None,
        "method_init_ms": load.method_init_ms,
        "init_instructions": load.init_instructions,
        "planned_memory_bytes": load.planned_bytes,
        "peak_rss_bytes": load.peak_rss_bytes,
    }


def _time_model(m: Measurement) -> dict[str, str]:
    """``{"time_model": …}`` where the kit-facing milliseconds are modelled, else nothing."""
    return {} if m.device.time_meaningful else {"time_model": TIME_MODEL}


def metrics(m: Measurement, files: Mapping[Variant, VariantFiles], base: Path) -> dict[str, Any]:
    return {
        "emulated": not m.device.time_meaningful,
        **_time_model(m),
        "results": kit_results(m, files, base),
    }


def manifest(
    m: Measurement,
    verdicts: Sequence[Verdict],
    files: Mapping[Variant, VariantFiles],
    base: Path,
    config: Mapping[str, Any],
    program: Program | None,
) -> dict[str, Any]:
    """The kit's run manifest (``model``, ``config``, ``executorch``, ``results``) and, under
    ``sme2``, the case record (``Measurement.to_json``, what ``sme2 report`` and the xdist
    controller reload) with the settings that shaped it, versions and verdicts.

    ``config`` is null for the kit: it names a config JSON file, and our settings are not one."""
    versions = _versions()
    # the record's kit ETDumps are the copies in this directory: the manifest stays valid with it
    record = replace(
        m, variants={v: _kit_etdump_copied(vm, files[v].etdump) for v, vm in m.variants.items()}
    )
    sha = executorch_sha()
    return {
        "model": str(program.pte.resolve()) if program is not None else None,
        "config": None,
        "executorch": {
            "present": versions["executorch"] != "not installed",
            "sha": sha,
            # an installed wheel is a build of one commit: nothing local to be dirty
            "dirty": False if sha is not None else None,
            "version": m.device.fingerprint.get("executorch", versions["executorch"]),
        },
        "emulated": not m.device.time_meaningful,
        **_time_model(m),
        "results": kit_results(m, files, base),
        "sme2": {
            "schema_version": SCHEMA_VERSION,
            "generator": GENERATOR,
            "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "record": record.to_json(base),
            "model_id": model_stem(m),
            "config": dict(config),
            "versions": versions,
            "comparison": comparison_json(m),
            "verdicts": [v.to_json() for v in verdicts],
        },
    }


def _kit_etdump_copied(vm: VariantMeasurement, copy: Path) -> VariantMeasurement:
    """``vm`` with the ETDump the kit is given (:func:`_kit_etdump`) as its ``copy`` in the
    experiment folder, where that was written."""
    if not copy.is_file():
        return vm
    if vm.modelled_etdump is not None:
        return replace(vm, modelled_etdump=copy)
    return replace(vm, etdump=copy)
