"""Export stage: a registered model × dtype → a cached, numerics-checked ExecuTorch program.

One export is a directory in the cache (``<cache>/exports/<model>-<dtype>-<key>/``) holding the
``.pte`` (XNNPACK-delegated), its ETRecord (so Inspector-style tools can map delegate events back
to the graph), the seeded example inputs the program is run on, the eager-PyTorch outputs for
those inputs, and ``artifact.json``: versions, shapes, export-stage timings and the numerics.

The key hashes what is exported — the model as its factory builds it (traced graph, every
submodule's configuration, weights, example and calibration inputs: :func:`program_fingerprint`),
the dtype, the torch / executorch / torchao versions and this recipe. Not the model's source
files: a class kept in another module, a width read from an environment variable or a config
file, or a weights file all change the program without changing the factory's file, and a key
of that file would hand back the old ``.pte`` — a false green. So a warm hit builds and traces the
model, once per model and process: what its factory takes (up to ~2 s here, for the examples that
calibrate BatchNorm) plus a few hundredths of a second; torch is already imported by the module
that registers the model. It never lowers: executorch is imported inside the build only. Entries
are built under a file lock and renamed into place (:func:`pytest_sme2.cache.cached_dir`), so
concurrent pytest-xdist workers export once.

Warnings and log records that torch, executorch and torchao raise about themselves during an
export are silenced (a cold export of toy_cnn's four dtypes printed 40, none about the model);
the model's own warnings pass through (:func:`_quiet_libraries`). So do their log records below
ERROR, the model's own kept (:func:`_quiet_log_records`). A build is a progress task
(:mod:`pytest_sme2.progress`): its stages are said while they run and timed in the manifest.

Dtypes (what the program takes is what a user of that precision feeds it):

- ``fp32``: the model as is.
- ``fp16``: ``model.half()`` fed fp16 inputs; the program's inputs and outputs are fp16. The
  XNNPACK partitioner needs no configuration for it; ops XNNPACK refuses in fp16 (GELU,
  LayerNorm) run as portable kernels.
- ``int8``: static PT2E quantization with the XNNPACK quantizer, symmetric per-channel weights,
  activations calibrated on the inputs of :data:`CALIBRATION_SEEDS`; fp32 in and out.
- ``int8-dynamic``: the same quantizer in dynamic mode (activations quantized per run, weights
  per channel); fp32 in and out.

Numerics are checked for real, as two numbers with two meanings (:mod:`pytest_sme2.numerics`):

- the *program error*: the ``.pte`` runs in the native runner (never the Python bindings, which
  crash) on the example inputs, and its outputs are compared with the eager model it was lowered
  from, on the very inputs the program received: eager fp32 for fp32, ``model.half()`` in eager
  fp16 for fp16 (eager fp32 where PyTorch cannot run the model in fp16 on the CPU, the manifest
  says why), the converted (fake-quantized) PT2E model for int8 and int8-dynamic. A program that
  disagrees beyond its dtype's :data:`TOLERANCES` (static int8: counted in output quantization
  steps, :func:`_output_steps`, and in the output's spread) — or returns any NaN/inf — raises
  :class:`NumericsError`; the entry stays cached with its errors, so a re-run raises again in
  milliseconds instead of re-exporting. Tolerances are applied when an entry is read, not baked
  into it, so changing them needs no re-export; an entry checked before the errors it is judged
  by were kept is run and compared again (:func:`_checked`).
- the *quantization error*: that reduced-precision eager model against eager fp32, measured at
  export and stored in the manifest; shown, never judged (the user chose the model and its
  weights; random weights quantize worse than trained ones).

In ``artifact.json``: ``reference`` (what the program was compared with), ``output_steps``,
``quantization`` (its reference and per-output errors, null for fp32), ``degenerate`` and, once
checked, ``numerics`` (the program's per-output errors).

Degenerate eager outputs (all zero, denormal, constant: :func:`pytest_sme2.numerics.degenerate`)
make both vacuous: any program matches them. Such an export is not refused — a constant output
can be legitimate, and the model is the user's — but it does not pass silently either: the
manifest records the reason, every :func:`export_model` of it warns once per process in one line
(:class:`DegenerateOutputWarning`, with what to do), and the program error is marked vacuous,
which the numerics verdict and the report show. Non-finite eager fp32 outputs do refuse the
export (at ``build model``): there is nothing to compare a program with, the model is broken.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import logging
import os
import re
import socket
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib import metadata
from operator import attrgetter
from pathlib import Path
from types import FrameType
from typing import Any

from filelock import FileLock

from pytest_sme2 import progress
from pytest_sme2.cache import cache_root, cached_dir, content_key, write_atomic
from pytest_sme2.errors import ConfigError, ExportError, NumericsError, RunnerError
from pytest_sme2.models import ModelSpec
from pytest_sme2.numerics import (
    DEGENERATE_ADVICE,
    TOLERANCES,
    DegenerateOutputWarning,
    Deviation,
    ExportNumerics,
    MismatchError,
    Numerics,
    OutputError,
    compare_outputs,
    degenerate,
)
from pytest_sme2.tensors import read_tensors, write_tensors

#: Bump when the export recipe changes in a way that changes programs (invalidates every entry).
#: 2: the program is checked against the eager model it was lowered from (int8: the converted
#: PT2E model) and the quantization error is stored; ``expected_outputs`` changed meaning.
#: 3: the fp32 program-error tolerance (stored judged in each entry) widened to rel 1e-3.
#: 4: mutable buffers stored with their initial values; eager references leave state untouched.
RECIPE_VERSION = "4"
#: The seed of the example inputs the program is checked (and later profiled) on.
EXAMPLE_SEED = 0
#: Seeds of the inputs int8 quantization calibrates on (static: activation ranges).
CALIBRATION_SEEDS: tuple[int, ...] = (1, 2, 3, 4)
#: Packages whose versions change programs; part of the key and of the manifest.
VERSIONED_PACKAGES: tuple[str, ...] = ("torch", "executorch", "torchao")
#: Whose warnings and log records an export silences: theirs, about themselves (see
#: :func:`_quiet_libraries`).
QUIET_LIBRARIES: tuple[str, ...] = ("torch", "executorch", "torchao")
#: Whose log records below ERROR an export drops (see :func:`_quiet_log_records`): those
#: libraries', and the file locks' that keep concurrent exports apart.
QUIET_LOGGERS: tuple[str, ...] = (*QUIET_LIBRARIES, "filelock")

MANIFEST_NAME = "artifact.json"
INPUTS_NAME = "inputs.tensors"
EXPECTED_OUTPUTS_NAME = "expected_outputs.tensors"
MANIFEST_FORMAT = 2

#: The stages an export can fail at (``ExportError.stage``), in pipeline order.
STAGES: tuple[str, ...] = (
    "build model",
    "torch.export",
    "quantize",
    "lower",
    "to_executorch",
    "serialize",
    "etrecord",
    "numerics",
)


@dataclass(frozen=True)
class Artifact:
    """One exported model × dtype in the cache. Tensor files use :mod:`pytest_sme2.tensors`."""

    model: str
    dtype: str
    key: str
    pte: Path
    etrecord: Path
    inputs: Path  # the example inputs, in the program's dtypes
    #: the program's reference on those inputs: the eager model it was lowered from
    expected_outputs: Path
    #: the program against ``expected_outputs``, judged (vacuous when ``degenerate``); None only
    #: when exported with check_numerics=False and not checked since
    program_error: Numerics | None
    #: the reduced-precision eager model against eager fp32 (None for fp32, or where PyTorch
    #: cannot run the model in fp16); never judged
    quantization_error: Deviation | None
    #: why the eager outputs are degenerate (:func:`pytest_sme2.numerics.degenerate`), or None
    degenerate: str | None
    versions: Mapping[str, str]  # torch, executorch, torchao
    directory: Path
    timings_s: Mapping[str, float]  # seconds per export stage

    @property
    def numerics(self) -> ExportNumerics | None:
        """The three numerics facts as the case record carries them; None until checked."""
        if self.program_error is None:
            return None
        return ExportNumerics(self.program_error, self.quantization_error, self.degenerate)


def package_versions() -> dict[str, str]:
    """Installed versions of :data:`VERSIONED_PACKAGES`, from metadata (no import)."""
    versions = {}
    for package in VERSIONED_PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def artifact_key(spec: ModelSpec, dtype: str) -> str:
    """The cache key of ``spec`` × ``dtype``: the program, dtype, package versions, recipe."""
    versions = package_versions()
    return content_key(
        RECIPE_VERSION,
        program_fingerprint(spec),
        dtype,
        repr((EXAMPLE_SEED, CALIBRATION_SEEDS)),
        *(f"{package}={versions[package]}" for package in VERSIONED_PACKAGES),
    )


_FINGERPRINTS: dict[ModelSpec, str] = {}
"""program_fingerprint's results in this process: a spec is built and traced once."""

_BUILT: dict[ModelSpec, Any] = {}
"""The model program_fingerprint built and hashed, until an export takes it (or finds its entry
cached): a cold export lowers the very model its key hashed instead of calling the factory again
— up to ~2 s for the examples that calibrate BatchNorm (``benchmarks/export_cost.py``)."""


def program_fingerprint(spec: ModelSpec) -> str:
    """A hash of the program ``spec`` exports, from the model its factory builds.

    It covers the traced graph, every submodule (name, class, plain configuration attributes),
    every parameter and buffer (names, dtypes, shapes, bytes) and the example and calibration
    inputs (dtypes, shapes, bytes) — whatever the factory read to make them: another module, an
    environment variable, a config or weights file. The graph comes from
    ``torch.fx.symbolic_trace``, which takes ~0.1 s for the four example models together where
    ``torch.export`` takes seconds (plus a one-time warm-up of ~4 s); symbolic_trace keeps
    ``torch.nn`` modules as single nodes, which is why their attributes are hashed
    (``MultiheadAttention.num_heads`` shows in no weight shape). A model it cannot trace
    (control flow on a tensor's value or shape, say) is traced with ``torch.export`` instead,
    as the export itself would, and the kind of trace is part of the hash.

    Only what is the same in every process and checkout enters the hash: no stack traces, file
    paths, object ids or memory addresses, so two interpreters agree on it.

    Computed once per spec and process. A model that cannot be built or traced at all has no
    program to hash: it gets a fingerprint of its own in this process, so no cached entry is ever
    taken for it, and its export then fails at its own stage with the error to fix.
    """
    fingerprint = _FINGERPRINTS.get(spec)
    if fingerprint is None:
        with _quiet_libraries():
            fingerprint = _hash_program(spec)
        _FINGERPRINTS[spec] = fingerprint
    return fingerprint


def _hash_program(spec: ModelSpec) -> str:
    """:func:`program_fingerprint`, computed."""
    import torch

    try:
        # Forked RNG: keying must not disturb the caller's random state (a factory may seed it).
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            model = spec.build()
            if not isinstance(model, torch.nn.Module):
                raise TypeError(f"the factory returned a {type(model).__name__}, not a Module")
            inputs = {
                seed: _tensors(spec.example_inputs(seed), "inputs")
                for seed in (EXAMPLE_SEED, *CALIBRATION_SEEDS)
            }
            kind, graph, extra = _trace(model, inputs[EXAMPLE_SEED])
    except Exception:  # the export fails the same way, at its own stage: say it there
        return f"unbuildable-{uuid.uuid4().hex}"
    _BUILT[spec] = model

    lines = [f"trace {kind}", *_graph_lines(graph), *extra]
    for name, module in model.named_modules():
        cls = type(module)
        config = sorted(
            f"{key}={value}"
            for key, value in ((k, _plain(v)) for k, v in vars(module).items())
            if value is not None and not key.startswith("_")
        )
        lines.append(f"module {name or '<root>'} {cls.__module__}.{cls.__qualname__} {config}")
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        lines.append(f"tensor {name} {_tensor_text(tensor)}")
    for seed, tensors in inputs.items():
        lines += [f"input {seed} {i} {_tensor_text(tensor)}" for i, tensor in enumerate(tensors)]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _trace(model: Any, inputs: tuple[Any, ...]) -> tuple[str, Any, list[str]]:
    """``(kind, graph module, more lines)`` of ``model``: symbolic_trace, else torch.export.

    torch.export's graph takes parameters, buffers and constants as inputs: the more lines are
    its signature (which input is which) and its constants (tensors the forward made, which
    symbolic_trace instead keeps as attributes of its graph module).
    """
    import torch

    try:
        return "fx", torch.fx.symbolic_trace(model), []
    except Exception:  # not traceable symbolically: torch.export is what the export runs
        exported = torch.export.export(model, inputs)
    signature = exported.graph_signature
    lines = [
        f"{spec.kind.name} {_canonical(spec.arg)} {spec.target}"
        for spec in (*signature.input_specs, *signature.output_specs)
    ]
    lines += [
        f"constant {name} "
        + (_tensor_text(value) if isinstance(value, torch.Tensor) else _canonical(value))
        for name, value in exported.constants.items()
    ]
    return "export", exported.graph_module, lines


def _graph_lines(graph_module: Any) -> Iterator[str]:
    """``graph_module``'s nodes as text: op, name, target, arguments — never node metadata, which
    holds stack traces and source paths. What a ``get_attr`` node fetches is included in full:
    a tensor the trace kept (a constant made in ``forward``), a graph (a ``torch.cond`` branch).
    """
    import torch

    for node in graph_module.graph.nodes:
        yield (
            f"{node.op} {node.name} {_canonical(node.target)} "
            f"{_canonical(node.args)} {_canonical(node.kwargs)}"
        )
        if node.op == "get_attr":
            value = attrgetter(node.target)(graph_module)
            if isinstance(value, torch.fx.GraphModule):
                yield from _graph_lines(value)
            else:
                yield _canonical(value)


def _tensor_text(tensor: Any) -> str:
    """A tensor's dtype, shape and a hash of all its bytes (a weights file may change any)."""
    import torch

    tensor = tensor.detach().cpu().contiguous()
    try:
        data: Any = tensor.reshape(-1).view(torch.uint8).numpy()
    except (RuntimeError, TypeError):  # quantized, sparse...: their printed values, in full
        with torch._tensor_str.printoptions(threshold=sys.maxsize, precision=10):
            data = repr(tensor).encode()
    return f"{tensor.dtype} {list(tensor.shape)} {hashlib.sha256(data).hexdigest()}"


#: A memory address in a repr (``<object at 0x7f...>``): different in every process.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _canonical(value: Any) -> str:
    """``value`` (a node's target or argument) as text that is the same in every process."""
    import torch

    if isinstance(value, torch.fx.Node):
        return f"%{value.name}"
    if isinstance(value, tuple | list):
        items = ", ".join(_canonical(item) for item in value)
        return f"({items})" if isinstance(value, tuple) else f"[{items}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_canonical(k)}: {_canonical(v)}" for k, v in value.items()) + "}"
    if isinstance(value, slice):
        return f"slice{_canonical((value.start, value.stop, value.step))}"
    if isinstance(value, torch.Tensor):
        return f"tensor({_tensor_text(value)})"
    if isinstance(value, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return str(value)  # aten.conv2d.default
    if isinstance(value, torch._ops.HigherOrderOperator):
        return f"higher_order.{value.name()}"
    plain = _plain(value)
    if plain is not None:
        return plain
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}:{_ADDRESS.sub('', repr(value))}"


def _plain(value: Any) -> str | None:
    """A configuration value as text, or None when it is not plain configuration: numbers,
    strings, None, tuples and lists of them, functions and classes (by qualified name: an
    activation kept as a function), torch dtypes, devices, layouts and memory formats."""
    import torch

    if value is None or isinstance(value, bool | int | float | complex | str):
        return repr(value)
    if isinstance(value, torch.dtype | torch.device | torch.layout | torch.memory_format):
        return str(value)
    if isinstance(value, tuple | list):
        items = [_plain(item) for item in value]
        if any(item is None for item in items):
            return None
        return f"({', '.join(items)})" if isinstance(value, tuple) else f"[{', '.join(items)}]"
    if callable(value) and hasattr(value, "__qualname__") and hasattr(value, "__module__"):
        return f"{value.__module__}.{value.__qualname__}"
    return None


@contextmanager
def _quiet_libraries() -> Iterator[None]:
    """Silence the warnings and log records torch, executorch and torchao raise while exporting.

    A cold export of toy_cnn's four dtypes printed 40 warnings (the libraries' deprecations of
    their own internals) and torchao logged that it found no triton: nothing a user can act on,
    and it buries what they can. A warning is the libraries' when the code that issued it is
    theirs — found by walking the stack from the ``warnings.warn`` call outward past the
    standard library and typing_extensions, which issue deprecations on their behalf (half of a
    toy_cnn export's are attributed to ``copyreg``, inside a deepcopy, and so escape a
    ``filterwarnings`` module pattern). The rest — the model's own warnings — are issued again,
    in order and once each, when the block ends, through the caller's filters (an ``error``
    filter raises them then). Inside the block every warning is collected rather than filtered,
    so a caller's ``error`` filter cannot turn a library's deprecation into a failed export.

    Log records below ERROR from those libraries are dropped for the block's duration
    (:func:`_quiet_log_records`).
    """
    kept: dict[tuple[Any, ...], tuple[warnings.WarningMessage, str | None]] = {}

    def collect(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        issuer = sys._getframe(1)
        if not _issued_by_libraries(issuer):
            warning = warnings.WarningMessage(message, category, filename, lineno, file, line)
            # The module it is attributed to, for the caller's module-pattern filters.
            frames = (f for f in _frames(issuer) if f.f_code.co_filename == filename)
            module = next((f.f_globals.get("__name__") for f in frames), None)
            kept.setdefault((category, str(message), filename, lineno), (warning, module))

    loggers = [logging.getLogger(name) for name in QUIET_LIBRARIES]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings(), _quiet_log_records():
        warnings.simplefilter("always")
        warnings.showwarning = collect
        for logger in loggers:
            logger.setLevel(max(logger.level, logging.ERROR))
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)
    for warning, module in kept.values():
        warnings.warn_explicit(
            warning.message, warning.category, warning.filename, warning.lineno, module
        )


class _LibraryRecords(logging.Filter):
    """Drops log records below ERROR that :data:`QUIET_LOGGERS` log: on their own loggers
    (``torch.__trace``, ``filelock``), or on the root logger from their files — executorch's
    lowering calls ``logging.debug`` itself (its partitioner printed whole graph modules)."""

    def __init__(self) -> None:
        super().__init__()
        self.files = tuple(_package_dirs(QUIET_LOGGERS))

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        if record.name.partition(".")[0] in QUIET_LOGGERS:
            return False
        return not (record.name == "root" and record.pathname.startswith(self.files))


def _package_dirs(packages: Iterable[str]) -> Iterator[str]:
    """The directories (with a trailing separator) of the installed ``packages``, unimported."""
    for package in packages:
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec else []:
            yield os.path.join(location, "")


@contextmanager
def _quiet_log_records() -> Iterator[None]:
    """Drop the libraries' log records below ERROR (:class:`_LibraryRecords`) for the block.

    A filter on every handler of the root logger, not a change of levels or of pytest's log
    capture: a cold export under pytest's DEBUG capture put 444 lines of
    ``DEBUG torch.__trace`` into a test's report, which a logger level cannot stop when the
    logger sets its own level, and executorch logs on the root logger. The user's own records —
    their loggers, and the root logger from their files — are kept. The handlers are those at the
    block's start: pytest installs its capture handlers for a whole test phase.
    """
    handlers = list(logging.getLogger().handlers)
    quiet = _LibraryRecords()
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)


def _frames(frame: FrameType | None) -> Iterator[FrameType]:
    """``frame`` and its callers, innermost first."""
    while frame is not None:
        yield frame
        frame = frame.f_back


def _issued_by_libraries(frame: FrameType) -> bool:
    """Whether the first frame from ``frame`` outward that is not the standard library's (nor
    typing_extensions', a backport of it) belongs to one of :data:`QUIET_LIBRARIES`."""
    for caller in _frames(frame):
        package = caller.f_globals.get("__name__", "").partition(".")[0]
        if package not in sys.stdlib_module_names and package != "typing_extensions":
            return package in QUIET_LIBRARIES
    return False


def artifact_dir(spec: ModelSpec, dtype: str, cache_dir: Path | None = None) -> Path:
    """Where ``spec`` × ``dtype`` is (or would be) cached: ``<model>-<dtype>-<key>`` under
    ``cache_dir``, by default ``<cache_root()>/exports``."""
    root = cache_dir if cache_dir is not None else cache_root() / "exports"
    return root / f"{spec.name}-{dtype}-{artifact_key(spec, dtype)}"


_FAILURES: dict[tuple[Path, bool], ExportError] = {}
"""Errors already raised in this process, by (entry, check_numerics): raised again at once.
Failed builds are not cached on disk — a fixed environment must be able to retry."""


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
    if previous is not None:
        raise previous
    key = directory.name.rsplit("-", 1)[-1]
    try:
        with ExitStack() as work, _quiet_log_records():
            running: progress.Task | None = None  # a task only when there is work to report

            def build(out: Path) -> None:
                nonlocal running
                running = work.enter_context(progress.task(f"export {spec.name}[{dtype}]"))
                with _quiet_libraries():
                    _build(spec, dtype, key, out, _Stages(spec.name, dtype, running))

            cached_dir(directory, build)
            _BUILT.pop(spec, None)  # a warm hit: the model built for its key is not needed
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


def prefetch(pairs: Iterable[tuple[ModelSpec, str]]) -> None:
    """Export every (model, dtype) pair now, in order.

    A session calls this before its first measurement: an export keeps both cores busy for up to
    ~80 s and leaves the caches cold, and a model measured straight after one moved its shares
    by ~6 points. A failure is not raised here: it is remembered and raised again, at once, when
    its own test asks for the pair.
    """
    for spec, dtype in pairs:
        try:
            export_model(spec, dtype)
        except ExportError:
            continue  # remembered in _FAILURES


def load_cached(spec: ModelSpec, dtype: str, *, cache_dir: Path | None = None) -> Artifact | None:
    """The cached export of ``spec`` × ``dtype`` whatever its numerics, or None if not exported.

    For callers that want a program even when its numbers are off (to profile it anyway).
    """
    directory = artifact_dir(spec, dtype, cache_dir)
    _BUILT.pop(spec, None)  # nothing to lower here
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
                TOLERANCES[dtype],
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
    from pytest_sme2.runner import RunPlan, build_runner, run_runner

    model, dtype = artifact.model, artifact.dtype
    with FileLock(str(artifact.directory) + ".lock"):
        manifest_path = artifact.directory / MANIFEST_NAME
        manifest = json.loads(manifest_path.read_text())
        if _checked(manifest["numerics"]):  # another process checked while we waited
            return _load(artifact.directory, model, dtype)
        started = time.perf_counter()
        try:
            with tempfile.TemporaryDirectory(prefix="sme2-numerics-") as work:
                result = run_runner(
                    build_runner("host"),
                    artifact.pte,
                    Path(work),
                    RunPlan(runs=1, warmup=0, threads=1, traced=False),
                    inputs=artifact.inputs,
                )
                assert result.outputs is not None
                outputs = read_tensors(result.outputs)
            expected = read_tensors(artifact.expected_outputs)
        except RunnerError as err:
            raise ExportError(model, dtype, "numerics", _one_line(err)) from err
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


def _one_line(err: BaseException) -> str:
    """``Type: first non-empty line of the message`` (long messages cut at 300 characters)."""
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    if len(first) > 300:
        first = first[:297] + "..."
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


class _Stages:
    """Times export stages, says each on the export's progress ``task``, and turns any failure
    inside one into an ExportError naming it."""

    def __init__(self, model: str, dtype: str, task: progress.Task | None = None) -> None:
        self.model, self.dtype, self.task = model, dtype, task
        self.timings: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if self.task is not None:
            self.task.stage(name)
        started = time.perf_counter()
        try:
            yield
        except ExportError:
            raise
        except Exception as err:
            raise ExportError(self.model, self.dtype, name, _one_line(err)) from err
        finally:
            elapsed = time.perf_counter() - started
            self.timings[name] = round(self.timings.get(name, 0.0) + elapsed, 3)


def _build(spec: ModelSpec, dtype: str, key: str, out: Path, stages: _Stages) -> None:
    """Export ``spec`` × ``dtype`` into the empty directory ``out`` (manifest last)."""
    with stages.stage("build model"):
        import torch

        with torch.no_grad():
            model = _BUILT.pop(spec, None)
            if model is None:  # keyed earlier, by an export of another dtype
                model = spec.build()
            example = _tensors(spec.example_inputs(EXAMPLE_SEED), "inputs")
            if dtype == "fp16":
                program_inputs = tuple(t.half() if t.is_floating_point() else t for t in example)
                program_model = copy.deepcopy(model).half()
            else:
                program_inputs, program_model = example, model
            fp32_inputs = tuple(t.float() if t.is_floating_point() else t for t in program_inputs)
            with _state_kept(model):
                fp32_outputs = _tensors(model(*fp32_inputs), "outputs")
        eager = [t.float().numpy() for t in fp32_outputs]
        if not all(torch.isfinite(t).all() for t in fp32_outputs):
            raise ValueError(
                f"eager fp32 PyTorch: {degenerate(eager)}: the model itself is broken; "
                + DEGENERATE_ADVICE
            )
        reference = _Reference("eager fp32 PyTorch", fp32_outputs)
        if dtype == "fp16":
            with _state_kept(program_model):
                reference = _fp16_reference(program_model, program_inputs, reference)

    with stages.stage("torch.export"):
        exported = torch.export.export(program_model, program_inputs)

    if dtype in ("int8", "int8-dynamic"):
        with stages.stage("quantize"):
            from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
                XNNPACKQuantizer,
                get_symmetric_quantization_config,
            )
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

            quantizer = XNNPACKQuantizer().set_global(
                get_symmetric_quantization_config(
                    is_per_channel=True, is_dynamic=dtype == "int8-dynamic"
                )
            )
            # the model's own buffers: PT2E adds observers, whose values calibration must keep
            state = {name for name, _ in program_model.named_buffers()}
            prepared = prepare_pt2e(exported.module(), quantizer)
            with torch.no_grad(), _state_kept(prepared, state):
                for seed in CALIBRATION_SEEDS:
                    prepared(*spec.example_inputs(seed))
            quantized = convert_pt2e(prepared)
            with torch.no_grad(), _state_kept(quantized, state):
                reference = _Reference(
                    f"the converted {dtype} PT2E model (eager, fake-quantized)",
                    _tensors(quantized(*program_inputs), "outputs"),
                    _output_steps(quantized),
                )
        with stages.stage("torch.export"):
            exported = torch.export.export(quantized, program_inputs)

    with stages.stage("lower"):
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        edge = to_edge_transform_and_lower(
            exported, partitioner=[XnnpackPartitioner()], generate_etrecord=True
        )
    with stages.stage("to_executorch"):
        from executorch.exir import ExecutorchBackendConfig
        from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

        # ExecuTorch stores a mutable buffer's shape but not its value unless asked: the program
        # would start from zeros (a KV cache the model filled, a position counter) where the eager
        # model starts from its buffers, and compute another inference than the one checked.
        signature = edge.exported_program().graph_signature
        written = set(signature.buffers_to_mutate.values())
        mutated = sorted(p for p, fqn in signature.inputs_to_buffers.items() if fqn in written)
        config = ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(mutated)])
        program = edge.to_executorch(config=config if mutated else None)

    stem = f"{spec.name}_xnnpack_{dtype}"  # the reference kit's <model>_xnnpack_<dtype>.pte
    files = {
        "pte": f"{stem}.pte",
        "etrecord": f"{stem}.etrecord",
        "inputs": INPUTS_NAME,
        "expected_outputs": EXPECTED_OUTPUTS_NAME,
    }
    with stages.stage("serialize"):
        (out / files["pte"]).write_bytes(program.buffer)
        write_tensors(out / INPUTS_NAME, [t.numpy() for t in program_inputs])
        expected = [t.numpy() for t in reference.outputs]
        write_tensors(out / EXPECTED_OUTPUTS_NAME, expected)
        program_outputs = exported.graph.find_nodes(op="output")[0].args[0]
    with stages.stage("etrecord"):
        program.get_etrecord().save(str(out / files["etrecord"]))

    manifest: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "model": spec.name,
        "params": dict(spec.params),
        "dtype": dtype,
        "key": key,
        "recipe": RECIPE_VERSION,
        "versions": package_versions(),
        "files": files,
        "pte_bytes": (out / files["pte"]).stat().st_size,
        "inputs": [_describe(t) for t in program_inputs],
        "outputs": [_describe(node.meta["val"]) for node in program_outputs],
        "example_seed": EXAMPLE_SEED,
        "calibration_seeds": list(CALIBRATION_SEEDS) if dtype.startswith("int8") else [],
        "timings_s": stages.timings,
        "reference": reference.what,
        "output_steps": list(reference.steps or [None] * len(expected)),
        "quantization": None
        if reference.outputs is fp32_outputs
        else {
            "reference": f"{reference.what} vs eager fp32 PyTorch",
            "outputs": [
                e.to_json() for e in compare_outputs(expected, eager, what="eager fp32 PyTorch")
            ],
        },
        "degenerate": _degenerate(eager, expected, reference.what),
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "exported_by": {"host": socket.gethostname(), "pid": os.getpid()},
        "numerics": None,
    }
    write_atomic(out / MANIFEST_NAME, json.dumps(manifest, indent=2) + "\n")


@contextmanager
def _state_kept(module: Any, names: Collection[str] | None = None) -> Iterator[None]:
    """Run eager references and calibration without moving the model's state: a stateful model
    (a KV cache or counter written in place) would otherwise be exported, and checked, at the
    state those runs left rather than the one it was built with.

    ``names`` limits it to those buffers: a PT2E-prepared model's observers are buffers too, and
    what calibration writes there is the point of calibrating."""
    import torch

    saved = {
        name: buffer.detach().clone()
        for name, buffer in module.named_buffers()
        if names is None or name in names
    }
    try:
        yield
    finally:
        with torch.no_grad():
            for name, buffer in module.named_buffers():
                if name in saved:
                    buffer.copy_(saved[name])


@dataclass(frozen=True)
class _Reference:
    """What a program is checked against: the eager model it was lowered from, its outputs on
    the example inputs and (static int8) each output's quantization step."""

    what: str
    outputs: tuple[Any, ...]
    steps: tuple[float | None, ...] | None = None


def _fp16_reference(model: Any, inputs: tuple[Any, ...], fp32: _Reference) -> _Reference:
    """Eager fp16 PyTorch on the program's inputs; eager fp32 (saying why) where PyTorch cannot
    run the model in fp16 on the CPU or its fp16 outputs overflow where fp32's do not."""
    import torch

    try:
        with torch.no_grad():
            outputs = _tensors(model(*inputs), "outputs")
    except Exception as err:  # an op without a CPU Half kernel: compare with what there is
        return replace(
            fp32, what=f"eager fp32 PyTorch (eager fp16 fails on the CPU: {_one_line(err)})"
        )
    if not all(torch.isfinite(t).all() for t in outputs):
        return replace(fp32, what="eager fp32 PyTorch (eager fp16 overflows to NaN/inf)")
    return _Reference("eager fp16 PyTorch", outputs)


#: Ops that move or select values without changing them: an output computed through them from a
#: dequantize is still on that dequantize's grid.
_DATA_MOVEMENT = frozenset(
    {
        "view",
        "_unsafe_view",
        "reshape",
        "permute",
        "transpose",
        "flatten",
        "squeeze",
        "unsqueeze",
        "clone",
        "contiguous",
        "expand",
        "slice",
        "select",
        "cat",
        "getitem",
    }
)


def _output_steps(graph_module: Any) -> tuple[float | None, ...]:
    """Each output's quantization step in a converted PT2E graph: the scale of the static
    ``dequantize_per_tensor`` that produces it (through data-movement ops; the largest where
    several feed it), None where the output is computed in float after it (or quantized
    dynamically, whose scale is chosen per run).

    The program runs the same quantized graph in integer arithmetic: its output is that
    dequantize of an int8 tensor, on the same grid as the converted model's. Where XNNPACK's
    integer requantization rounds an intermediate differently from the converted model's float
    arithmetic, the difference is a step there and, carried through the layers after, a few at
    the output: why the int8 tolerance is counted in output steps (``numerics.TOLERANCES``).
    """
    import torch

    static = torch.ops.quantized_decomposed.dequantize_per_tensor.default

    def step(node: Any) -> float | None:
        if not isinstance(node, torch.fx.Node):
            return None
        if node.target == static:
            return float(node.args[1])
        name = getattr(node.target, "__name__", str(node.target)).split(".")[0]
        if node.op != "call_function" or name not in _DATA_MOVEMENT:
            return None
        sources = [step(source) for source in node.all_input_nodes]
        if not sources or None in sources:
            return None
        return max(s for s in sources if s is not None)

    (outputs,) = graph_module.graph.find_nodes(op="output")[0].args
    outputs = outputs if isinstance(outputs, tuple | list) else (outputs,)
    return tuple(step(node) for node in outputs)


def _degenerate(eager: list[Any], reference: list[Any], what: str) -> str | None:
    """Why the outputs a program is judged against are degenerate: eager fp32's first (the model
    the user chose), else the reduced-precision model's (quantization that collapsed them)."""
    found = degenerate(eager)
    if found is not None:
        return f"eager fp32 PyTorch: {found}"
    found = degenerate(reference)
    return None if found is None else f"{what}: {found}"


def _tensors(value: Any, what: str) -> tuple[Any, ...]:
    """``value`` as a tuple of tensors (a lone tensor becomes a 1-tuple); TypeError otherwise."""
    import torch

    items = tuple(value) if isinstance(value, tuple | list) else (value,)
    if not all(isinstance(item, torch.Tensor) for item in items):
        kinds = ", ".join(sorted({type(item).__name__ for item in items}))
        raise TypeError(f"{what} must be a Tensor or a tuple of Tensors, got {kinds}")
    return tuple(item.detach() for item in items)


def _describe(tensor: Any) -> dict[str, Any]:
    """Shape and dtype of a tensor (or a fake tensor from the exported graph) for the manifest."""
    return {"shape": list(tensor.shape), "dtype": str(tensor.dtype).removeprefix("torch.")}
