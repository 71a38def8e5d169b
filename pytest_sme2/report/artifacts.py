"""Everything one test leaves on disk: a run directory of the reference kit, with ours beside it.

The case directory is what the kit calls a run directory (``--run-dir``/``--results``), so its
tools read it unchanged (docs/kit-contract.md):

* ``manifest.json`` — the kit's keys (``model``: the run folder's ``.pte``; ``config``: null;
  ``executorch``: present/sha/dirty; ``results[]``; ``emulated``) and, under ``sme2``, our case
  record (``Measurement.to_json``) with the verdicts, which ``sme2 report`` reloads exactly;
* ``metrics.json`` — ``results[]``: per experiment its latencies (``latency_ms``, ``median_ms`` …)
  and the paths of its ETDump;
* ``<stem>.pte`` and ``<stem>.pte.etrecord`` — the program (the kit finds the ETRecord at
  "<model>.etrecord");
* one folder per variant, named like the kit's experiments (``<device>_sme2_on`` /
  ``<device>_sme2_off``), holding, with ``<prefix>`` = ``<stem>_<experiment>_t<threads>``:

  * ``<prefix>.etdump`` — the traced run's ETDump (hard link, else copy); on an emulated device
    that counted instructions, the counted inference's ETDump re-timed in instructions (below);
    the only ``.etdump`` below the run directory, since the kit's tools analyse and sum every one
    they find;
  * ``<prefix>_exec_all_runs_timeline.csv`` / ``<prefix>_exec_run0_timeline.csv`` — one row per
    event of every run / of run 0;
  * ``<prefix>_exec_ops_stats.csv`` — one row per operator kind, per run (see below);
  * ``<prefix>_instructions_ops.csv`` — where the device counts instructions (qemu-sme2): the
    same rows in millions of instructions (``total_minstr``, ``avg_minstr``); named so no kit glob
    (``*_ops_stats.csv``, ``*_timeline.csv``) takes it for time;
  * ``<prefix>_trace.json`` — Chrome Trace Event Format for Perfetto;
  * ``kernels.csv`` — where the device shows kernels (qemu's exec log, a Debug runner's kernel
    log): one row per microkernel with the kit's columns
    (:func:`pytest_sme2.analysis.kernels.kernels_frame`), the file the kit's
    ``generate_kernel_view.py`` is pointed at;
* ``sme2_analysis_summary.json``, ``sme2_report.md`` and the chart PNGs — ours, under names the
  kit's tools never write (they write ``analysis_summary.json`` and ``report.md`` into the run
  directory, and the three kit-named CSVs beside each ETDump: those hold what the kit's
  ``etdump_to_csv.py`` would write from the same ETDump, so its overwriting them loses nothing).

The runner's own files (timing rounds, traced runs, and on emulated devices the counted runs) are
in ``.sme2-runs/``, their ETDumps named ``run.etdp`` (``modelled.etdp`` beside the counted run's,
below): no kit glob (``**/*.etdump``) reaches them.

Units are what the names say. Time is milliseconds of the device's clock — except on an emulated
device (``emulated: true`` in both JSON files), whose clock is no signal: there the kit-facing
time (``latency_ms``/``median_ms``… in ``results[]``, ``total_ms``/``avg_ms`` in ops_stats) is
*modelled* from the exact instruction counts, 1 ms = 1,000,000 guest instructions of one
steady-state inference (:data:`TIME_MODEL`, also in both JSON files), so the speedup the kit's
``generate_report.py`` computes from it is our instruction ratio; no kit-named timeline is written
(the kit prefers a timeline's rows to ``metrics.json``). The experiment folder's ETDump, which the
kit's ``analyze_results.py`` re-reads into its CSVs, is modelled too: the counted inference alone,
every event's start and end its instruction count (1 ns = 1 instruction,
:mod:`pytest_sme2.measure.modelled_etdump`); the runner's own ETDumps in ``.sme2-runs/`` keep the
emulator's clock. Where an emulated device counts no instructions, ``results[]`` carries no
latency at all: nothing the kit can turn into a speedup. Our own files keep instruction counts
under ``*_minstr`` and ``*_instructions*`` names.

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
* ops_stats rows are leaf operators only (wrappers would double-count), over the measured runs
  (warm-up dropped): ``count`` is instances per run, ``total_ms`` the mean time per run, as the
  kit's tools read them; ``avg_ms`` the mean per instance.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pytest_sme2.analysis.categories import Classifier
from pytest_sme2.analysis.kernels import kernels_frame
from pytest_sme2.analysis.ops import parse_op_name
from pytest_sme2.analysis.profile import INSTRUCTIONS, Profile, event_backend, unit_suffix
from pytest_sme2.analysis.trace import Run, Trace, read_etdump
from pytest_sme2.cache import write_atomic
from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement, VariantMeasurement
from pytest_sme2.records.verdict import Verdict
from pytest_sme2.report.chrome_trace import write_chrome_trace
from pytest_sme2.report.format import ordered_variants
from pytest_sme2.report.kit_json import (
    Program,
    VariantFiles,
    analysis_summary,
    experiment,
    manifest,
    metrics,
    model_stem,
    relative_path,
)
from pytest_sme2.report.markdown import case_report

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
#: the kit's run-level files (its tools read these names)
MANIFEST_NAME = "manifest.json"
KERNELS_NAME = "kernels.csv"
"""Each experiment folder's kernels, the file name the kit's kernel tools use."""
METRICS_NAME = "metrics.json"
#: ours: the kit's tools write ``analysis_summary.json`` and ``report.md`` into the run directory
SUMMARY_NAME = "sme2_analysis_summary.json"
REPORT_NAME = "sme2_report.md"
#: the session's report, above the run directories (never inside one)
SESSION_REPORT_NAME = "report.md"


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


def ops_stats_columns(unit: str) -> tuple[str, ...]:
    """``OPS_STATS_COLUMNS`` with the time columns named for ``unit`` (``total_minstr`` …)."""
    suffix = unit_suffix(unit)
    return tuple(c.replace("_ms", suffix) for c in OPS_STATS_COLUMNS)


def ops_stats_frame(prof: Profile, model_id: str, *, modelled: bool = False) -> pd.DataFrame:
    """One row per operator kind of ``prof``, largest first, per run as the kit reads them:
    ``count`` instances per run, the total the mean per run (``ops_stats_columns``).

    ``modelled``: an instruction profile's values under the kit's ``_ms`` names, as modelled time
    (:data:`TIME_MODEL`: M instructions read as ms)."""
    columns = OPS_STATS_COLUMNS if modelled else ops_stats_columns(prof.unit)
    rows = [
        dict(
            zip(
                columns,
                (
                    model_id,
                    op.name,
                    op.name,
                    op.backend,
                    _per_run(op.count, prof.runs),
                    op.per_run_ms,
                    op.mean_ms,
                    100.0 * op.share,
                ),
                strict=True,
            )
        )
        for op in prof.operators
    ]
    return pd.DataFrame(rows, columns=list(columns))


def _per_run(count: int, runs: int) -> int | float:
    """Instances per run: whole for a fixed graph (every run has the same events)."""
    per_run = count / runs
    return int(per_run) if per_run.is_integer() else per_run


@dataclass(frozen=True)
class TestArtifacts:
    """Where one test's report files are."""

    __test__ = False  # not a pytest test class, despite the name

    directory: Path
    variants: Mapping[Variant, VariantFiles]
    analysis_summary: Path
    manifest: Path
    metrics: Path
    report_md: Path
    charts: Mapping[str, Path]
    #: the program copied into the run directory, where it was given
    program: Program | None

    def links(self) -> list[tuple[str, Path]]:
        """(label, path) of every file written, for the report's artifact list."""
        links = [
            (REPORT_NAME, self.report_md),
            (SUMMARY_NAME, self.analysis_summary),
            (MANIFEST_NAME, self.manifest),
            (METRICS_NAME, self.metrics),
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
            if files.instructions_ops is not None:
                links.append((f"{variant} ops stats (instructions)", files.instructions_ops))
        links += [(f"{name} chart", path) for name, path in self.charts.items()]
        return [(label, path) for label, path in links if label == REPORT_NAME or path.is_file()]


def _link_or_copy(source: Path, target: Path) -> None:
    """Hard-link ``source`` to ``target`` (free, and survives the runner deleting its file),
    copying across file systems."""
    if target.exists() and source.resolve() == target.resolve():
        return
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _kit_etdump(vm: VariantMeasurement) -> Path:
    """The ETDump the kit is given: the modelled one where there is one, else the traced run's."""
    return vm.etdump if vm.modelled_etdump is None else vm.modelled_etdump


def _write_json(path: Path, data: Mapping[str, Any]) -> Path:
    write_atomic(path, json.dumps(data, indent=2, default=str) + "\n")
    return path


def _write_csv(path: Path, frame: pd.DataFrame) -> None:
    write_atomic(path, frame.to_csv(index=False))


def _variant_files(folder: Path, prefix: str, *, counted: bool) -> VariantFiles:
    """The experiment folder (made here) and its files' kit names; ``counted``: the profile
    counts instructions, so it has an instruction CSV."""
    folder.mkdir(parents=True, exist_ok=True)
    return VariantFiles(
        folder=folder,
        etdump=folder / f"{prefix}.etdump",
        timeline_all=folder / f"{prefix}_exec_all_runs_timeline.csv",
        timeline_run0=folder / f"{prefix}_exec_run0_timeline.csv",
        ops_stats=folder / f"{prefix}_exec_ops_stats.csv",
        chrome_trace=folder / f"{prefix}_trace.json",
        instructions_ops=folder / f"{prefix}_instructions_ops.csv" if counted else None,
        kernels=folder / KERNELS_NAME,
    )


def _write_variant(
    m: Measurement, variant: Variant, directory: Path, classifier: Classifier
) -> VariantFiles:
    """One experiment folder: the variant's ETDump and what is read from it.

    The kit-named CSVs hold time read from the ETDump where the device's clock means something.
    On an emulated device they hold no emulated time: ops_stats is the instruction profile as
    modelled time (:data:`TIME_MODEL`) and no timeline is written, since the kit takes each
    run's latency from a timeline before metrics.json; the instruction profile is also in
    ``*_instructions_ops.csv``; the ETDump (and the Perfetto trace read from it) is the modelled
    one where the device counted instructions per event."""
    vm = m.variants[variant]
    prefix = file_prefix(m, variant)
    counted = vm.profile.unit == INSTRUCTIONS
    f = _variant_files(directory / experiment(m, variant), prefix, counted=counted)
    # where the device shows kernels: a kernel log that named some, or an exec log counted per
    # operator (its list may be empty: no function that ran has a kernel's name)
    if vm.evidence is not None and (vm.evidence.kernels or vm.evidence.operator_kernels):
        _write_csv(f.kernels, kernels_frame(prefix, vm.evidence.kernels))
    if f.instructions_ops is not None:
        _write_csv(f.instructions_ops, ops_stats_frame(vm.profile, prefix))
    if not m.device.time_meaningful:
        if counted:
            _write_csv(f.ops_stats, ops_stats_frame(vm.profile, prefix, modelled=True))
        if _kit_etdump(vm).is_file():
            _link_or_copy(_kit_etdump(vm), f.etdump)
            write_chrome_trace(
                f.chrome_trace,
                read_etdump(f.etdump),
                warmup=0,
                title=f"{m.model}[{m.dtype}] {variant} on {m.device.name}",
                classifier=classifier,
            )
        return f
    # the profile still says what the trace did, where its ETDump is gone
    _write_csv(f.ops_stats, ops_stats_frame(vm.profile, prefix))
    if not vm.etdump.is_file():
        return f
    _link_or_copy(vm.etdump, f.etdump)
    trace = vm.parsed_trace()
    backends = vm.profile.backends
    _write_csv(f.timeline_all, timeline_frame(trace, prefix, backends=backends))
    _write_csv(f.timeline_run0, timeline_frame(trace, prefix, trace.runs[:1], backends))
    write_chrome_trace(
        f.chrome_trace,
        trace,
        warmup=vm.profile.warmup,
        title=f"{m.model}[{m.dtype}] {variant} on {m.device.name}",
        classifier=classifier,
    )
    return f


def _copy_program(m: Measurement, program: Program, directory: Path) -> Program:
    """The program in the run directory, named by the kit's stem, its ETRecord at
    "<pte>.etrecord" where the kit's tools look for it."""
    pte = directory / f"{model_stem(m)}.pte"
    _link_or_copy(program.pte, pte)
    if program.etrecord is None or not program.etrecord.is_file():
        return Program(pte, None)
    etrecord = Path(f"{pte}.etrecord")
    _link_or_copy(program.etrecord, etrecord)
    return Program(pte, etrecord)


def write_artifacts(
    m: Measurement,
    verdicts: Sequence[Verdict],
    directory: Path,
    *,
    config: Mapping[str, Any],
    charts: Mapping[str, bytes],
    title: str | None = None,
    program: Program | None = None,
) -> TestArtifacts:
    """Write the run directory of the module docstring into ``directory`` (created if needed).

    ``config`` goes into the manifest's ``sme2`` record as is; ``charts`` are PNGs by file stem
    (``charts.render_charts``); ``program`` is copied in where given. The timelines and the
    Perfetto trace lay out every event of the traced run, so they are written only where its
    ETDump is still there to read.
    """
    directory.mkdir(parents=True, exist_ok=True)
    classifier = Classifier(m.overrides)
    files = {v: _write_variant(m, v, directory, classifier) for v in ordered_variants(m)}
    copied = _copy_program(m, program, directory) if program is not None else None
    chart_paths = {}
    for name, png in charts.items():
        chart_paths[name] = directory / f"{name}.png"
        write_atomic(chart_paths[name], png)
    written = TestArtifacts(
        directory=directory,
        variants=files,
        analysis_summary=_write_json(
            directory / SUMMARY_NAME, analysis_summary(m, files, directory)
        ),
        manifest=_write_json(
            directory / MANIFEST_NAME, manifest(m, verdicts, files, directory, config, copied)
        ),
        metrics=_write_json(directory / METRICS_NAME, metrics(m, files, directory)),
        report_md=directory / REPORT_NAME,
        charts=chart_paths,
        program=copied,
    )
    links = [(label, relative_path(path, directory)) for label, path in written.links()]
    write_atomic(written.report_md, case_report(m, verdicts, links=links, title=title))
    return written
