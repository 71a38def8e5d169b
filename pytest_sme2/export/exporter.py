"""Export stage: a registered model × dtype → a cached, numerics-checked ExecuTorch program.

One export is a directory in the cache (``<cache>/exports/<model>-<dtype>-<key>/``) holding the
``.pte`` (XNNPACK-delegated), its ETRecord (so Inspector-style tools can map delegate events back
to the graph), the seeded example inputs the program is run on, the eager-PyTorch outputs for
those inputs, and ``artifact.json``: versions, shapes, the quantizer and the linear layers it
left in float, export-stage timings and the numerics.

The stage is modules along its seams: :mod:`pytest_sme2.export.key` (what the cache key hashes,
and why not the model's source files), :mod:`pytest_sme2.export.recipes` (per dtype: the program
model, the quantizer, lowering, the numerics reference), :mod:`pytest_sme2.export.stages` (one
export built into its cache entry) and :mod:`pytest_sme2.quiet` (the libraries' warnings
and log records off); this one keeps the cache and the check.

A warm hit builds and traces the model, once per model and process (see
:func:`pytest_sme2.export.key.program_fingerprint`); it never lowers: executorch is imported
inside the build only. Entries are built under a file lock and renamed into place
(:func:`pytest_sme2.cache.cached_dir`), so concurrent pytest-xdist workers export once. A build
is a progress task (:mod:`pytest_sme2.progress`): its stages are said while they run and timed
in the manifest.

Numerics are checked for real, as two numbers with two meanings
(:mod:`pytest_sme2.analysis.numerics`):

- the *program error*: the ``.pte`` runs in the native runner (never the Python bindings, which
  crash) on the example inputs, and its outputs are compared with the eager model it was lowered
  from (the recipe's reference), on the very inputs the program received. A program that
  disagrees beyond its dtype's tolerance (:data:`pytest_sme2.analysis.tolerances.TOLERANCES`;
  static int8: counted in output quantization steps,
  :func:`pytest_sme2.export.output_steps.output_steps`, and in the output's spread) — or returns
  any NaN/inf — raises :class:`NumericsError`; the entry stays cached with its errors, so a re-run
  raises again in milliseconds instead of re-exporting. Tolerances are applied when an entry is
  read, not baked into it, so changing them needs no re-export; an entry checked before the
  errors it is judged by were kept is run and compared again (:func:`_checked`).
- the *quantization error*: that reduced-precision eager model against eager fp32, measured at
  export and stored in the manifest; shown, never judged (the user chose the model and its
  weights; random weights quantize worse than trained ones).

In ``artifact.json``: ``reference`` (what the program was compared with), ``output_steps``,
``quantization`` (its reference and per-output errors, null for fp32), ``degenerate`` and, once
checked, ``numerics`` (the program's per-output errors).

Degenerate eager outputs (all zero, denormal, constant:
:func:`pytest_sme2.analysis.numerics.degenerate`) make both vacuous: any program matches them. Such
an export is not refused — a constant output can be legitimate, and the model is the user's — but it
does not pass silently either: the manifest records the reason, every :func:`export_model` of it
warns once per process in one line (:class:`DegenerateOutputWarning`, with what to do), and the
program error is marked vacuous, which the numerics verdict and the report show. Non-finite eager
fp32 outputs do refuse the export (at ``build model``): there is nothing to compare a program with,
the model is broken.
"""

from __future__ import annotations

import gc
import json
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from pytest_sme2 import progress
from pytest_sme2.analysis.numerics import (
    DEGENERATE_ADVICE,
    DegenerateOutputWarning,
    Deviation,
    ExportNumerics,
    MismatchError,
    Numerics,
    OutputError,
    compare_outputs,
)
from pytest_sme2.analysis.tolerances import tolerance_for
from pytest_sme2.cache import cache_root, cached_dir, write_atomic
from pytest_sme2.errors import ConfigError, ExportError, NumericsError, RunnerError
from pytest_sme2.export import failures as export_failures
from pytest_sme2.export.key import (
    artifact_key,
    keyed_by_its_build,
    take_built,
)
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.export.provenance import provenance_shared
from pytest_sme2.export.recipes import (
    one_line,
)
from pytest_sme2.export.stages import MANIFEST_NAME, Stages, build_export
from pytest_sme2.quiet import quiet_libraries, quiet_log_records
from pytest_sme2.runner.tensors import read_tensors


@dataclass(frozen=True)
class Artifact:
    """One exported model × dtype in the cache. Tensor files use
    :mod:`pytest_sme2.runner.tensors`."""

    model: str
    dtype: str
    key: str
    pte: Path
    etrecord: Path | None  # None: a registered program given none (``register_program``)
    inputs: Path  # the example inputs, in the program's dtypes
    #: the program's reference on those inputs: the eager model it was lowered from (a
    #: registered program: the outputs it was given, None when it was given none)
    expected_outputs: Path | None
    #: the program against ``expected_outputs``, judged (vacuous when ``degenerate``); None only
    #: when exported with check_numerics=False and not checked since
    program_error: Numerics | None
    #: the reduced-precision eager model against eager fp32 (None for fp32, or where PyTorch
    #: cannot run the model in fp16); never judged
    quantization_error: Deviation | None
    #: why the eager outputs are degenerate (:func:`pytest_sme2.analysis.numerics.degenerate`), or
    #: None
    degenerate: str | None
    versions: Mapping[str, str]  # torch, executorch, torchao
    directory: Path
    timings_s: Mapping[str, float]  # seconds per export stage
    #: how it was quantized ("" for a float program) and the linear layers left in float
    quantizer: str = ""
    skipped_linears: tuple[str, ...] = ()

    @property
    def numerics(self) -> ExportNumerics | None:
        """The three numerics facts as the case record carries them; None until checked."""
        if self.program_error is None:
            return None
        return ExportNumerics(
            self.program_error,
            self.quantization_error,
            self.degenerate,
            quantizer=self.quantizer,
            skipped=self.skipped_linears,
        )


def artifact_dir(spec: ModelSpec, dtype: str, cache_dir: Path | None = None) -> Path:
    """Where ``spec`` × ``dtype`` is (or would be) cached: ``<model>-<dtype>-<key>`` under
    ``cache_dir``, by default ``<cache_root()>/exports``."""
    root = cache_dir if cache_dir is not None else cache_root() / "exports"
    return root / f"{spec.name}-{dtype}-{artifact_key(spec, dtype)}"


_FAILURES: dict[tuple[Path, bool], ExportError] = {}
"""Errors already raised in this process, by (entry, check_numerics): raised again at once.
A failed build leaves no entry; only a failure of the program itself is recorded beside it
(:mod:`pytest_sme2.export.failures`), so a fixed environment retries the rest."""


def export_model(
    spec: ModelSpec, dtype: str, *, cache_dir: Path | None = None, check_numerics: bool = True
) -> Artifact:
    """The cached export of ``spec`` × ``dtype``, exporting it first if needed.

    Raises ExportError (with the failing stage) if it cannot be exported, NumericsError if
    ``check_numerics`` and the program's outputs are wrong (the artifact stays cached; see
    :func:`load_cached` to get it anyway), ConfigError if the model does not support ``dtype``.
    """
    if dtype not in spec.dtypes:
        raise ConfigError(
            f"model {spec.name!r} does not support dtype {dtype!r}; it supports {list(spec.dtypes)}"
        )
    directory = artifact_dir(spec, dtype, cache_dir)
    previous = _FAILURES.get((directory, check_numerics))
    if previous is None and not directory.is_dir():
        previous = export_failures.recorded(directory)
    if previous is not None:
        _FAILURES[(directory, check_numerics)] = previous
        raise previous
    try:
        with ExitStack() as work, quiet_log_records():
            running: progress.Task | None = None  # a task only when there is work to report

            def build(out: Path) -> None:
                nonlocal running
                running = _export_into(out, directory, spec, dtype, work)

            cached_dir(directory, build)
            take_built(spec)  # a warm hit: the model built for its key is not needed
            artifact = _load(directory, spec.name, dtype)
            _warn_degenerate(artifact)
            if check_numerics:
                if artifact.program_error is None:
                    if running is None:  # exported by a process that did not check it
                        running = work.enter_context(
                            progress.task(f"numerics {spec.name}[{dtype}]")
                        )
                    running.stage("numerics")
                    artifact = _check_numerics(artifact)
                assert artifact.program_error is not None
                if not artifact.program_error.ok:
                    raise NumericsError(
                        spec.name, dtype, "numerics", artifact.program_error.describe()
                    )
    except ExportError as err:
        _FAILURES[(directory, check_numerics)] = err
        raise
    return artifact


def _export_into(
    out: Path, directory: Path, spec: ModelSpec, dtype: str, work: ExitStack
) -> progress.Task:
    """Export ``spec`` × ``dtype`` into ``out`` under the lock of its entry ``directory``; the
    export's progress task, entered in ``work``.

    Under the lock, a process that waited for it while another's export failed takes that
    failure's record rather than lowering the same program again, and a failure is recorded
    before the lock is released."""
    failed = export_failures.recorded(directory)
    if failed is not None:
        raise failed
    running = work.enter_context(progress.task(f"export {spec.name}[{dtype}]"))
    stages = Stages(spec.name, dtype, running)
    key = directory.name.rsplit("-", 1)[-1]
    try:
        with quiet_libraries(), _collections_paused(), provenance_shared():
            _on_fresh_stack(lambda: build_export(spec, dtype, key, out, stages))
    except ExportError as err:
        if keyed_by_its_build(spec):  # else a one-off key: nothing to replay
            export_failures.record(directory, err)
        raise
    return running


def settled(directory: Path) -> bool:
    """Whether the entry ``directory`` (:func:`artifact_dir`) is exported, or failed as
    recorded: nothing to lower."""
    return directory.is_dir() or export_failures.recorded(directory) is not None


_WARNED: set[Path] = set()
"""Entries whose degenerate outputs were already warned about in this process."""


def _warn_degenerate(artifact: Artifact) -> None:
    """One line, once per entry and process, when the model's eager outputs are degenerate."""
    if artifact.degenerate is None or artifact.directory in _WARNED:
        return
    _WARNED.add(artifact.directory)
    warnings.warn(
        DegenerateOutputWarning(
            f"{artifact.model}[{artifact.dtype}]: degenerate outputs ({artifact.degenerate}): "
            f"its numerics and SME2-on/off parity verdicts are vacuous; {DEGENERATE_ADVICE}"
        ),
        stacklevel=3,
    )


@contextmanager
def _collections_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while an export runs, back as it was after.

    Why: lowering allocates millions of short-lived objects (fx nodes, fake tensors, deep
    copies), so the collector runs every few hundred allocations and walks them again and
    again: 1.3 s of a 14.2 s mobilenet_v3_small fp32 export, and 12.6 s in all with it off, for
    0.1 GB more peak memory; in two export processes, 8 exports took 60.0 s against 62.6 s (two
    runs each), a small gain. The export's cyclic garbage is freed by the first collection
    after it. (Leaving it to an export process's exit instead saved those collections, 19 s of
    CPU over the example suite's 23 exports, and lost as much to lowering in ever new memory.)
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _on_fresh_stack(work: Callable[[], None]) -> None:
    """Run ``work`` in a new thread and wait for it; its exception is raised here.

    Why: CPython 3.11 keeps a thread's frames in 16 KiB chunks, mapped when a call crosses a
    chunk's end and unmapped when it returns. An export called deep in a session's stack (a
    pytest fixture; a process forked from one) can sit its hottest calls right on a boundary:
    seen, 12,000 mmap/munmap pairs a second, half of the export's CPU in the kernel and
    mobilenet_v3_small fp32 lowered in 29 s instead of 14. A new thread starts its own stack,
    so an export runs at the same shallow depth whoever calls it (``benchmarks/
    export_parallel.py`` measures the phase). It also starts with torch's per-thread state at
    its defaults, whatever the caller's: vit_tiny's programs exported inside a session before
    this carried ``requires_grad`` on 77 activation values, where a standalone process and the
    export thread leave it off (delegates, instructions and memory plan byte-identical). A
    daemon: an interrupted session does not wait for the export to finish (its half-built
    entry is never published, see ``cached_dir``).
    """
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as err:  # handed to the waiting thread
            failure.append(err)

    thread = threading.Thread(target=run, name="sme2-export", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def load_cached(spec: ModelSpec, dtype: str, *, cache_dir: Path | None = None) -> Artifact | None:
    """The cached export of ``spec`` × ``dtype`` whatever its numerics, or None if not exported.

    For callers that want a program even when its numbers are off (to profile it anyway).
    """
    directory = artifact_dir(spec, dtype, cache_dir)
    take_built(spec)  # nothing to lower here
    if not (directory / MANIFEST_NAME).is_file():
        return None
    return _load(directory, spec.name, dtype)


def _load(directory: Path, model: str, dtype: str) -> Artifact:
    manifest_path = directory / MANIFEST_NAME
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
        numerics, quantization = manifest["numerics"], manifest["quantization"]
        artifact = Artifact(
            model=manifest["model"],
            dtype=manifest["dtype"],
            key=manifest["key"],
            pte=directory / files["pte"],
            etrecord=directory / files["etrecord"],
            inputs=directory / files["inputs"],
            expected_outputs=directory / files["expected_outputs"],
            program_error=None
            if not _checked(numerics)
            else Numerics.judge(
                [OutputError.from_json(output) for output in numerics["outputs"]],
                tolerance_for(dtype),
                reference=manifest["reference"],
                vacuous=manifest["degenerate"],
            ),
            quantization_error=None
            if quantization is None
            else Deviation.of(
                [OutputError.from_json(output) for output in quantization["outputs"]],
                quantization["reference"],
            ),
            degenerate=manifest["degenerate"],
            versions=manifest["versions"],
            directory=directory,
            timings_s=manifest["timings_s"],
            quantizer=manifest.get("quantizer", ""),
            skipped_linears=tuple(manifest.get("skipped_linears", ())),
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ExportError(
            model, dtype, "serialize", f"{manifest_path} is unreadable ({err}); delete {directory}"
        ) from err
    return artifact


def _checked(numerics: Mapping[str, Any] | None) -> bool:
    """Whether a manifest's program check is there and complete: one made before the RMS error
    was kept (``rms_abs``, judged for static int8) is checked again — one host run, not a new
    export — so no cached program is judged by less than the current rule."""
    return numerics is not None and all("rms_abs" in output for output in numerics["outputs"])


def _check_numerics(artifact: Artifact) -> Artifact:
    """Run the program in the native host runner, compare with the stored outputs of the eager
    model it was lowered from, and record the errors in the manifest. Needs no torch: the
    reference (and, for static int8, each output's quantization step) was stored at export."""
    from pytest_sme2.runner import Executions, RunnerCall, build_runner, run_runner

    model, dtype = artifact.model, artifact.dtype
    with FileLock(str(artifact.directory) + ".lock"):
        manifest_path = artifact.directory / MANIFEST_NAME
        manifest = json.loads(manifest_path.read_text())
        if _checked(manifest["numerics"]):  # another process checked while we waited
            return _load(artifact.directory, model, dtype)
        started = time.perf_counter()
        try:
            with tempfile.TemporaryDirectory(prefix="sme2-numerics-") as work:
                once = Executions(runs=1, warmup=0)
                call = RunnerCall(artifact.pte, artifact.inputs, once, Path(work))
                result = run_runner(build_runner("host"), call)
                outputs = read_tensors(result.outputs)
            expected = read_tensors(artifact.expected_outputs)
        except RunnerError as err:
            raise ExportError(model, dtype, "numerics", one_line(err)) from err
        try:
            errors = compare_outputs(
                outputs, expected, what=manifest["reference"], steps=manifest["output_steps"]
            )
        except MismatchError as err:
            raise ExportError(model, dtype, "numerics", str(err)) from None
        manifest["numerics"] = {
            "outputs": [error.to_json() for error in errors],
            "runner": "native host runner, 1 thread",
            "seconds": round(time.perf_counter() - started, 3),
        }
        write_atomic(manifest_path, json.dumps(manifest, indent=2) + "\n")
    return _load(artifact.directory, model, dtype)
