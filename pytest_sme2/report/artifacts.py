"""Everything one test leaves on disk, named and shaped like the reference workflow's files.

Per variant (``<prefix>`` = ``<model>_xnnpack_<dtype>_<device>_<sme2_on|sme2_off>_t<threads>``,
the kit's ``<model stem>_<experiment>_t<threads>``):

* ``<prefix>.etdump`` — the traced run's ETDump (hard link, else copy);
* ``<prefix>_exec_all_runs_timeline.csv`` / ``<prefix>_exec_run0_timeline.csv`` — one row per
  event of every run / of the first measured run;
* ``<prefix>_exec_ops_stats.csv`` — one row per operator kind over the measured runs;
* ``<prefix>_trace.json`` — Chrome Trace Event Format for Perfetto;
* ``<prefix>_kernels.csv`` — where the device shows kernels (qemu's exec log, a Debug runner's
  kernel log): one row per microkernel, the kit's ``kernels.csv`` columns
  (:func:`pytest_sme2.kernels.kernels_frame`).

Per test: ``analysis_summary.json``, ``manifest.json``, ``report.md`` and the chart PNGs.

Column meanings where the kit's were wrong or unclear (names are kept exactly):

* ``pct_total`` is the share of E2E in percent: an event's duration over its run's
  ``Method::execute``; an operator's per-run time over the mean E2E. Never over a sum of rows
  (rows nest, so that sum counts the same time three or four times).
* ``type`` is the name without the `` #n`` instance counter (the kit's "base op type").
* ``delegate_backend`` is the ETRecord's backend name of the event's delegate call (else
  ``XnnpackBackend`` for XNNPACK operator events, ``delegated`` for other delegate events),
  ``non-delegated`` otherwise (the kit says "portable", but the trace cannot tell portable from
  optimized kernels) — see ``analysis.event_backend``.
* ``start_us``/``end_us`` count from the trace's first ``Method::execute``; XNNPACK operator
  starts are synthetic (laid back to back by XNNPACK), their durations real.
* ``node_id`` is the event's position in its run (pre-order: parents before children), equal for
  the same event in every run of a fixed graph; ``block`` is the ETDump block, ``Execute``.
* ops_stats rows are leaf operators only (wrappers would double-count); the warm-up runs the
  analysis dropped are in the all-runs timeline (``run_index`` < warm-up) but not in ops_stats.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from pytest_sme2.analysis import Profile, event_backend
from pytest_sme2.categories import Classifier
from pytest_sme2.devices.base import Variant, device_file_name
from pytest_sme2.gates import Verdict
from pytest_sme2.kernels import kernels_frame
from pytest_sme2.ops import parse_op_name
from pytest_sme2.report.chrome_trace import write_chrome_trace
from pytest_sme2.report.content import ordered_variants
from pytest_sme2.report.markdown import case_report
from pytest_sme2.result import Measurement
from pytest_sme2.stats import LatencyStats
from pytest_sme2.trace import Run, Trace, read_etdump

TIMELINE_COLUMNS = (
    "model_id",
    "name",
    "type",
    "delegate_backend",
    "start_us",
    "end_us",
    "duration_ms",
    "pct_total",
    "node_id",
    "run_index",
    "block",
)
OPS_STATS_COLUMNS = (
    "model_id",
    "name",
    "type",
    "delegate_backend",
    "count",
    "total_ms",
    "avg_ms",
    "pct_total",
)
SUMMARY_NAME = "analysis_summary.json"
MANIFEST_NAME = "manifest.json"
REPORT_NAME = "report.md"
#: ``generator`` value of our manifests: ``sme2 report`` reloads those exactly.
GENERATOR = "pytest-sme2"
#: 2: the case record (``Measurement.to_json``) at the top level
SCHEMA_VERSION = 2


def model_stem(m: Measurement) -> str:
    """The kit's ``<model>_xnnpack_<dtype>`` (the .pte stem)."""
    return f"{m.model}_xnnpack_{m.dtype}"


def experiment(m: Measurement, variant: Variant) -> str:
    """The kit's experiment name: ``<device>_sme2_on`` / ``<device>_sme2_off``; file names are
    made of it, so a fleet's device is named as its folder is (``qemu-sme2@vl=32``)."""
    return f"{device_file_name(m.device.name)}_{variant.value.replace('-', '_')}"


def file_prefix(m: Measurement, variant: Variant) -> str:
    return f"{model_stem(m)}_{experiment(m, variant)}_t{m.threads}"


def timeline_frame(
    trace: Trace,
    model_id: str,
    runs: Sequence[Run] | None = None,
    backends: Mapping[int, str] | None = None,
) -> pd.DataFrame:
    """One row per event of ``runs`` (default: every run of ``trace``): ``TIMELINE_COLUMNS``."""
    runs = trace.runs if runs is None else runs
    origin = trace.runs[0].events[0].start_ns
    columns: dict[str, list] = {c: [] for c in TIMELINE_COLUMNS}
    for run in runs:
        for node, event in enumerate(run.events):
            columns["name"].append(event.name)
            columns["type"].append(parse_op_name(event.name).key)
            columns["delegate_backend"].append(event_backend(event, backends))
            columns["start_us"].append((event.start_ns - origin) / 1e3)
            columns["end_us"].append((event.end_ns - origin) / 1e3)
            columns["duration_ms"].append(event.duration_ms)
            columns["pct_total"].append(
                100.0 * (event.end_ns - event.start_ns) / run.e2e_ns if run.e2e_ns else 0.0
            )
            columns["node_id"].append(node)
            columns["run_index"].append(run.index)
            columns["block"].append("Execute")
    columns["model_id"] = [model_id] * len(columns["name"])
    return pd.DataFrame(columns, columns=list(TIMELINE_COLUMNS))


def ops_stats_frame(prof: Profile, model_id: str) -> pd.DataFrame:
    """One row per operator kind of ``prof``, largest total first: ``OPS_STATS_COLUMNS``."""
    rows = [
        {
            "model_id": model_id,
            "name": op.name,
            "type": op.name,
            "delegate_backend": op.backend,
            "count": op.count,
            "total_ms": op.total_ms,
            "avg_ms": op.mean_ms,
            "pct_total": 100.0 * op.share,
        }
        for op in prof.operators
    ]
    return pd.DataFrame(rows, columns=list(OPS_STATS_COLUMNS))


@dataclass(frozen=True)
class VariantFiles:
    """The files written for one variant, all inside ``TestArtifacts.directory``."""

    etdump: Path
    timeline_all: Path
    timeline_run0: Path
    ops_stats: Path
    chrome_trace: Path
    kernels: Path


@dataclass(frozen=True)
class TestArtifacts:
    """Where one test's report files are."""

    __test__ = False  # not a pytest test class, despite the name

    directory: Path
    variants: Mapping[Variant, VariantFiles]
    analysis_summary: Path
    manifest: Path
    report_md: Path
    charts: Mapping[str, Path]

    def links(self) -> list[tuple[str, Path]]:
        """(label, path) of every file written, for the report's artifact list."""
        links = [
            ("report.md", self.report_md),
            ("analysis_summary.json", self.analysis_summary),
            ("manifest.json", self.manifest),
        ]
        for variant, files in self.variants.items():
            links += [
                (f"{variant} ETDump", files.etdump),
                (f"{variant} Perfetto trace", files.chrome_trace),
                (f"{variant} all-runs timeline", files.timeline_all),
                (f"{variant} run0 timeline", files.timeline_run0),
                (f"{variant} ops stats", files.ops_stats),
                (f"{variant} kernels", files.kernels),
            ]
        links += [(f"{name} chart", path) for name, path in self.charts.items()]
        return [(label, path) for label, path in links if label == "report.md" or path.is_file()]


def _link_or_copy(source: Path, target: Path) -> None:
    """Hard-link ``source`` to ``target`` (free, and survives the runner deleting its file),
    copying across file systems."""
    if source.resolve() == target.resolve():
        return
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _rel(path: Path, base: Path) -> str:
    return os.path.relpath(path, base)


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for dist in ("pytest-sme2", "executorch", "torch", "pandas"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def _operator_details(profile_json: Mapping[str, Any], variant: Variant) -> list[dict[str, Any]]:
    """The profile's operators (``Profile.to_json``) with the kit's extra names for them."""
    return [
        {
            **op,
            "avg_ms": op["mean_ms"],
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
    ``operator_details``), for the headline variant at top level, per variant in ``per_etdump``."""
    head = m.headline
    head_json = m.variants[head].profile.to_json()
    per_etdump = []
    csv_files = []
    for variant in ordered_variants(m):
        prof = m.variants[variant].profile.to_json()
        f = files[variant]
        csvs = [_rel(p, base) for p in (f.timeline_all, f.timeline_run0, f.ops_stats)]
        csv_files += csvs
        per_etdump.append(
            {
                "etdump": _rel(f.etdump, base),
                "experiment": experiment(m, variant),
                "variant": str(variant),
                **prof,
                "packed_operators": list(m.variants[variant].profile.packed_operators),
                "csv_files": csvs,
                "chrome_trace": _rel(f.chrome_trace, base),
                "operator_details": _operator_details(prof, variant),
            }
        )
    return {
        "generator": GENERATOR,
        "model": m.model,
        "dtype": m.dtype,
        "threads": m.threads,
        "device": m.device.name,
        "category_totals_variant": str(head),
        "category_totals_ms": head_json["categories_ms"],
        "category_shares": head_json["shares"],
        "per_etdump": per_etdump,
        "operator_details": _operator_details(head_json, head),
        "comparison": comparison_json(m),
        "csv_files": csv_files,
        "csv_dir": ".",
    }


def manifest(
    m: Measurement,
    verdicts: Sequence[Verdict],
    files: Mapping[Variant, VariantFiles],
    base: Path,
    config: Mapping[str, Any],
) -> dict[str, Any]:
    """The case record (``Measurement.to_json``, what ``sme2 report`` and the xdist controller
    reload), and around it run metadata: versions, config, per variant the timing-only and traced
    results with their latencies (the kit's ``results[]``), and the verdicts."""
    versions = _versions()
    results = []
    for variant in ordered_variants(m):
        vm = m.variants[variant]
        f = files[variant]
        if vm.timing_warmup is not None:
            results.append(
                {
                    "experiment": experiment(m, variant),
                    "variant": str(variant),
                    "mode": "timing",
                    "status": "ok",
                    "threads": m.threads,
                    "runs": len(vm.latencies_ms),
                    "warmup": vm.timing_warmup,
                    "latency_ms": list(vm.latencies_ms),
                    "median_ms": LatencyStats.of(vm.latencies_ms).median_ms,
                    "artifacts": {},
                }
            )
        artifacts = {
            name: {"path": str(path), "relative_path": _rel(path, base), "exists": path.is_file()}
            for name, path in (
                ("etdump", f.etdump),
                ("timeline_all", f.timeline_all),
                ("timeline_run0", f.timeline_run0),
                ("ops_stats", f.ops_stats),
                ("chrome_trace", f.chrome_trace),
            )
        }
        results.append(
            {
                "experiment": experiment(m, variant),
                "variant": str(variant),
                "mode": "trace",
                "status": "ok",
                "threads": m.threads,
                "runs": vm.profile.runs,
                "warmup": vm.profile.warmup,
                "latency_ms": list(vm.profile.e2e_ms),
                "median_ms": vm.profile.latency.median_ms,
                "artifacts": artifacts,
            }
        )
    # the record's ETDumps are the copies in this directory: the manifest stays valid with it
    record = replace(
        m,
        variants={
            v: replace(vm, etdump=files[v].etdump) if files[v].etdump.is_file() else vm
            for v, vm in m.variants.items()
        },
    )
    return {
        "schema_version": SCHEMA_VERSION,
        "generator": GENERATOR,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        **record.to_json(base),
        "model_id": model_stem(m),
        "config": dict(config),
        "executorch": {
            "present": versions["executorch"] != "not installed",
            "version": m.device.fingerprint.get("executorch", versions["executorch"]),
        },
        "versions": versions,
        "results": results,
        "comparison": comparison_json(m),
        "verdicts": [v.to_json() for v in verdicts],
    }


def _write_json(path: Path, data: Mapping[str, Any]) -> Path:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path


def write_artifacts(
    m: Measurement,
    verdicts: Sequence[Verdict],
    directory: Path,
    *,
    config: Mapping[str, Any],
    charts: Mapping[str, bytes],
    title: str | None = None,
) -> TestArtifacts:
    """Write every file of the module docstring into ``directory`` (created if needed).

    ``config`` goes into the manifest as is; ``charts`` are PNGs by file stem
    (``charts.render_charts``). The timelines and the Perfetto trace lay out every event of the
    traced run, so they are written only where its ETDump is still there to read.
    """
    directory.mkdir(parents=True, exist_ok=True)
    classifier = Classifier(m.overrides)
    files: dict[Variant, VariantFiles] = {}
    for variant in ordered_variants(m):
        vm = m.variants[variant]
        prefix = file_prefix(m, variant)
        f = VariantFiles(
            etdump=directory / f"{prefix}.etdump",
            timeline_all=directory / f"{prefix}_exec_all_runs_timeline.csv",
            timeline_run0=directory / f"{prefix}_exec_run0_timeline.csv",
            ops_stats=directory / f"{prefix}_exec_ops_stats.csv",
            chrome_trace=directory / f"{prefix}_trace.json",
            kernels=directory / f"{prefix}_kernels.csv",
        )
        ops_stats_frame(vm.profile, prefix).to_csv(f.ops_stats, index=False)
        # where the device shows kernels: a kernel log that named some, or an exec log counted
        # per operator (its list may be empty: no function that ran has a kernel's name)
        if vm.evidence is not None and (vm.evidence.kernels or vm.evidence.operator_kernels):
            kernels_frame(prefix, vm.evidence.kernels).to_csv(f.kernels, index=False)
        if vm.etdump.is_file():
            _link_or_copy(vm.etdump, f.etdump)
            trace = read_etdump(vm.etdump)
            backends, warmup = vm.profile.backends, vm.profile.warmup
            timeline_frame(trace, prefix, backends=backends).to_csv(f.timeline_all, index=False)
            first_measured = trace.runs[warmup : warmup + 1]
            timeline_frame(trace, prefix, first_measured, backends).to_csv(
                f.timeline_run0, index=False
            )
            write_chrome_trace(
                f.chrome_trace,
                trace,
                warmup=warmup,
                title=f"{m.model}[{m.dtype}] {variant} on {m.device.name}",
                classifier=classifier,
            )
        files[variant] = f
    chart_paths = {}
    for name, png in charts.items():
        chart_paths[name] = directory / f"{name}.png"
        chart_paths[name].write_bytes(png)
    written = TestArtifacts(
        directory=directory,
        variants=files,
        analysis_summary=_write_json(
            directory / SUMMARY_NAME, analysis_summary(m, files, directory)
        ),
        manifest=_write_json(
            directory / MANIFEST_NAME, manifest(m, verdicts, files, directory, config)
        ),
        report_md=directory / REPORT_NAME,
        charts=chart_paths,
    )
    links = [(label, _rel(path, directory)) for label, path in written.links()]
    written.report_md.write_text(case_report(m, verdicts, links=links, title=title))
    return written
