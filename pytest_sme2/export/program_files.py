"""Bring your own program: a ``.pte`` exported elsewhere, gated like a registered model.

Users export with their own pipeline (ExecuTorch's ``export_llm``, optimum-executorch, a
product's) and want *that* file gated, not a re-export of a model this plugin builds. So
:func:`register_program` takes the file, a function making its inputs and, optionally, the
outputs it must give; the suite parametrizes over it as over a model (one case, its ``dtype`` a
label: ``program`` unless the user names one), and :func:`prepare_program` turns it into the
export stage's :class:`~pytest_sme2.export.exporter.Artifact`, so measuring, judging and reporting
are the models' own.

Nothing the user owns is copied or linked: the artifact points at the ``.pte`` (and ETRecord)
where they are. What this module makes — the inputs in the runner's tensor format, the expected
outputs, ``artifact.json`` — lives in a cache directory keyed by the ``.pte``'s content and the
inputs' (and expected outputs') bytes, so a re-exported program is never served a stale check.

A program is checked before anything is measured, by one execution in the native host runner:
a file that is no program, is truncated or of another ExecuTorch version, inputs that do not
match its input specs, an operator the runner has no kernel for or outputs
off the expected ones each fail its case in one line (:class:`ProgramError`) naming the file
and what to do; the session's other cases go on.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pytest_sme2.analysis.numerics import (
    ExportNumerics,
    MismatchError,
    Numerics,
    OutputError,
    Tolerance,
    compare_outputs,
    degenerate,
)
from pytest_sme2.analysis.tolerances import tolerance_for
from pytest_sme2.cache import cache_root, cached_dir, content_key, write_atomic
from pytest_sme2.errors import ConfigError, ProgramError, RunnerError
from pytest_sme2.export.exporter import MANIFEST_NAME, Artifact
from pytest_sme2.export.key import package_versions
from pytest_sme2.export.model_spec import registered_models
from pytest_sme2.export.recipes import EXAMPLE_SEED
from pytest_sme2.quiet import quiet_libraries
from pytest_sme2.runner.tensors import encode_tensors, read_tensors

#: The seed a program's inputs (and callable expected outputs) are made with.
PROGRAM_SEED = EXAMPLE_SEED
#: A program's case label (its "dtype" in ids and baseline names) unless the user names one.
DEFAULT_LABEL = "program"
#: What a program's outputs are compared with, as the numerics verdict says it.
REFERENCE = "the expected outputs given to register_program"
#: Bumped when what a cached check holds changes: older entries are then checked afresh.
CHECK_VERSION = "1"

ProgramInputs = Callable[[int], Sequence[Any]]  # (seed) -> torch tensors or numpy arrays
ExpectedOutputs = Sequence[Any] | Callable[[int], Sequence[Any]]

_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]*$")  # no "-": ids split model-dtype-tN on it
# ExecuTorch's log line for each operator a method needs that no linked library registers
_MISSING_OPERATOR = re.compile(r"Missing operator: \[\d+\] (\S+)")


@dataclass(frozen=True)
class ProgramSpec:
    """A registered program. Duck-types the parts of
    :class:`~pytest_sme2.export.model_spec.ModelSpec` a case uses (``name``, ``dtypes``,
    ``for_emulation``), so cases, ids and baselines (``baselines/<device>/<name>-<label>.json``) are
    built as for models."""

    name: str
    pte: Path
    inputs: ProgramInputs = field(compare=False)
    etrecord: Path | None
    expected_outputs: ExpectedOutputs | None = field(compare=False)
    tolerance: Tolerance
    label: str = DEFAULT_LABEL
    #: tokens one execution processes (a language model's phase), for tokens/s; None: not one
    tokens: int | None = None

    @property
    def tokens_per_inference(self) -> int | None:
        return self.tokens

    def expectations(self, dtype: str) -> dict[str, Any]:
        """A program sets no marker keywords of its own: the test's marker decides."""
        return {}

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The one case label: a program was exported once, in whatever precision it has."""
        return (self.label,)

    def for_emulation(self) -> ProgramSpec:
        """A file has no smaller variant to emulate: the same program."""
        return self


#: (name, dtype label) → spec: one name carries many dtypes (``opt_llama-fp32``,
#: ``opt_llama-8da4w``), as a registered model's does
_REGISTRY: dict[tuple[str, str], ProgramSpec] = {}


def register_program(
    name: str,
    *,
    pte: str | Path,
    inputs: ProgramInputs,
    etrecord: str | Path | None = None,
    expected_outputs: ExpectedOutputs | None = None,
    dtype: str = DEFAULT_LABEL,
    tolerance: Tolerance | None = None,
    tokens: int | None = None,
) -> ProgramSpec:
    """Register the ExecuTorch program at ``pte`` under ``name``, gated like a model.

    ``inputs(seed)`` returns its inputs (torch tensors or numpy arrays). ``expected_outputs``
    (tensors or arrays, or a function of the seed returning them) are what its outputs must
    match within ``tolerance`` (default: the ``dtype`` label's, ``tolerances.tolerance_for``), as
    SME2-on outputs must match SME2-off; without them its numbers are "not judged". ``dtype`` is
    a label, any name (``8da8w``): the case is ``<name>-<dtype>``, and a known dtype's SME2 proof
    applies (``fp32``: PF32 operators). Call it once per dtype to give one name several programs
    (the same model exported in fp32, 8da4w and 8da8w); the same name and dtype twice with
    another file is a ConfigError naming both. ``tokens`` (per execution: a prefill's prompt, a
    decode step's 1) makes reports show tokens/s. A missing file is a ConfigError here, at
    registration.
    """
    if not _LABEL.match(dtype):
        raise ConfigError(
            f"program {name!r}: dtype={dtype!r} must be letters, digits, '_' or '.' (no '-')"
        )
    if any(spec.name == name for spec in registered_models()):
        raise ConfigError(f"program {name!r}: a model is registered under that name already")
    files = [Path(pte), *([Path(etrecord)] if etrecord is not None else [])]
    for path in files:
        if not path.is_file():
            raise ConfigError(f"program {name!r}: {path} does not exist (or is not a file)")
    spec = ProgramSpec(
        name=name,
        pte=files[0].resolve(),
        inputs=inputs,
        etrecord=files[1].resolve() if etrecord is not None else None,
        expected_outputs=expected_outputs,
        tolerance=tolerance or tolerance_for(dtype),
        label=dtype,
        tokens=tokens,
    )
    previous = _REGISTRY.get((name, dtype))
    if previous is not None and previous.pte != spec.pte:
        raise ConfigError(
            f"program {name!r} is registered twice as dtype {dtype!r} ({previous.pte} and "
            f"{spec.pte}); give one of them another dtype label or name"
        )
    _REGISTRY[(name, dtype)] = spec
    return spec


def registered_programs() -> tuple[ProgramSpec, ...]:
    """All registered programs, in registration order."""
    return tuple(_REGISTRY.values())


@dataclass(frozen=True)
class ProgramArtifact(Artifact):
    """A registered program as the export stage's Artifact: its numerics say it has no eager
    model, and "not judged" where it was given no expected outputs."""

    @property
    def numerics(self) -> ExportNumerics:
        return ExportNumerics(self.program_error, None, self.degenerate, registered=True)


_FAILURES: dict[tuple[ProgramSpec, str], ProgramError] = {}
"""Checks already failed in this process, by spec and content key: raised again at once (a
program's cases on several devices or thread counts are checked once)."""


def prepare_program(spec: ProgramSpec, *, cache_dir: Path | None = None) -> Artifact:
    """The checked artifact of ``spec``: its inputs (and expected outputs) written to the cache,
    the program run once in the host runner. ProgramError, in one line, when it cannot be gated.
    The libraries' warnings on the way (torch, executorch, torchao) are logged, not raised into
    the user's summary; the user's own inputs function's are."""
    with quiet_libraries():
        return _prepared(spec, cache_dir)


def _prepared(spec: ProgramSpec, cache_dir: Path | None) -> Artifact:
    arrays = _arrays(spec, spec.inputs(PROGRAM_SEED), "inputs")
    expected = _expected(spec)
    inputs_bytes = encode_tensors(arrays)
    expected_bytes = encode_tensors(expected) if expected is not None else b""
    key = content_key(
        CHECK_VERSION,
        _file_digest(spec.pte),
        inputs_bytes,
        expected_bytes,
        json.dumps(package_versions(), sort_keys=True),
    )
    previous = _FAILURES.get((spec, key))
    if previous is not None:
        raise previous
    root = cache_dir if cache_dir is not None else cache_root() / "programs"
    directory = root / f"{spec.name}-{spec.label}-{key}"
    try:
        cached_dir(
            directory, lambda out: _check(spec, key, out, inputs_bytes, expected, expected_bytes)
        )
    except ProgramError as err:
        _FAILURES[(spec, key)] = err
        raise
    return _load(spec, directory)


def _arrays(spec: ProgramSpec, values: Any, what: str) -> list[np.ndarray]:
    """``values`` (a tuple of torch tensors or numpy arrays) as numpy arrays."""
    if not isinstance(values, (tuple, list)):
        values = (values,)
    arrays = []
    for index, value in enumerate(values):
        if hasattr(value, "detach"):  # a torch tensor, without importing torch
            value = value.detach().cpu()
            if str(value.dtype) == "torch.bfloat16":
                raise ProgramError(
                    spec.name, spec.pte, f"{what}[{index}] is bfloat16: give it as a numpy array"
                )
            value = value.numpy()
        if not isinstance(value, np.ndarray):
            raise ProgramError(
                spec.name,
                spec.pte,
                f"{what}({PROGRAM_SEED})[{index}] is a {type(value).__name__}, "
                "not a torch tensor or numpy array",
            )
        arrays.append(value)
    return arrays


def _expected(spec: ProgramSpec) -> list[np.ndarray] | None:
    given = spec.expected_outputs
    if given is None:
        return None
    return _arrays(spec, given(PROGRAM_SEED) if callable(given) else given, "expected_outputs")


def _file_digest(path: Path) -> str:
    """The SHA-256 of a file, read in chunks (an LLM's program is gigabytes)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _check(
    spec: ProgramSpec,
    key: str,
    out: Path,
    inputs_bytes: bytes,
    expected: list[np.ndarray] | None,
    expected_bytes: bytes,
) -> None:
    """Run the program once on its inputs in the host runner and write the entry into ``out``
    (manifest last): the inputs, the expected outputs and their per-output errors."""
    (out / "inputs.tensors").write_bytes(inputs_bytes)
    if expected is not None:
        (out / "expected_outputs.tensors").write_bytes(expected_bytes)
    started = time.perf_counter()
    outputs = _run_once(spec, out / "inputs.tensors")
    errors = None
    if expected is not None:
        try:
            errors = compare_outputs(outputs, expected, what="expected_outputs")
        except MismatchError as err:
            raise ProgramError(spec.name, spec.pte, f"{err}") from None
    manifest = {
        "kind": "registered program",
        "model": spec.name,
        "dtype": spec.label,
        "key": key,
        "pte": str(spec.pte),
        "etrecord": None if spec.etrecord is None else str(spec.etrecord),
        "versions": package_versions(),
        "files": {
            "inputs": "inputs.tensors",
            "expected_outputs": None if expected is None else "expected_outputs.tensors",
        },
        "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype)} for o in outputs],
        "seed": PROGRAM_SEED,
        "reference": REFERENCE if expected is not None else None,
        "degenerate": degenerate(expected) if expected is not None else None,
        "numerics": None if errors is None else [e.to_json() for e in errors],
        "timings_s": {"check": round(time.perf_counter() - started, 3)},
    }
    write_atomic(out / MANIFEST_NAME, json.dumps(manifest, indent=2) + "\n")


def _run_once(spec: ProgramSpec, inputs: Path) -> list[np.ndarray]:
    """The program's outputs on ``inputs`` in the host runner (with ExecuTorch's LLM custom
    kernels where it calls ``llama::`` operators); ProgramError in one line if it cannot run."""
    from pytest_sme2.runner import Executions, Launch, RunnerCall, build_runner, run_runner
    from pytest_sme2.runner.kernel_libraries import host_custom_kernels, libraries_for

    with tempfile.TemporaryDirectory(prefix="sme2-program-") as work:
        try:
            result = run_runner(
                build_runner("host"),
                RunnerCall(spec.pte, inputs, Executions(runs=1, warmup=0), Path(work)),
                Launch(libraries=libraries_for(spec.pte, host_custom_kernels)),
            )
        except RunnerError as err:
            log = Path(work, "runner.log")
            said = log.read_text(errors="replace") if log.is_file() else str(err)
            raise ProgramError(spec.name, spec.pte, _problem(said, inputs)) from None
        return read_tensors(result.outputs)


def _problem(log: str, inputs: Path) -> str:
    """The runner's failure as what is wrong with the program and what to do about it."""
    missing = sorted(set(_MISSING_OPERATOR.findall(log)))
    if missing:
        return (
            f"needs operator(s) {', '.join(missing)} that sme2_runner does not link (it has "
            "ExecuTorch's portable, optimized and quantized kernels, XNNPACK, and loads "
            "ExecuTorch's LLM custom ops for llama:: operators): re-export without them, or "
            "link their kernel library into a runner built from "
            "pytest_sme2/runner/CMakeLists.txt"
        )
    said = [line.strip() for line in log.splitlines() if line.strip().startswith("error:")]
    if not said:
        tail = " | ".join(line.strip() for line in log.splitlines()[-3:] if line.strip())
        return f"the host runner failed: {tail or 'no output'}"
    problem = said[-1].removeprefix("error:").strip()
    if "Error::InvalidProgram" in problem:  # a valid header, then no valid program behind it
        return f"{problem}: the file is truncated or corrupt; export it again"
    problem = problem.replace(f"inputs file {inputs}", f"inputs({PROGRAM_SEED})")
    return problem.replace(f" in {inputs}", f" of inputs({PROGRAM_SEED})")


def _load(spec: ProgramSpec, directory: Path) -> Artifact:
    """The entry in ``directory`` as an Artifact, its errors judged by the spec's tolerance
    now (a changed tolerance needs no new check). ProgramError where they are beyond it."""
    manifest = json.loads((directory / MANIFEST_NAME).read_text())
    files = manifest["files"]
    program_error = None
    if manifest["numerics"] is not None:
        program_error = Numerics.judge(
            [OutputError.from_json(output) for output in manifest["numerics"]],
            spec.tolerance,
            reference=REFERENCE,
            vacuous=manifest["degenerate"],
        )
        if not program_error.ok:
            raise ProgramError(
                spec.name,
                spec.pte,
                f"outputs off the expected ones: {program_error.describe()}; if the program is "
                "right, give register_program a wider tolerance=Tolerance(abs=..., rel=...)",
            )
    expected = files["expected_outputs"]
    return ProgramArtifact(
        model=spec.name,
        dtype=spec.label,
        key=manifest["key"],
        pte=spec.pte,
        etrecord=spec.etrecord,
        inputs=directory / files["inputs"],
        expected_outputs=None if expected is None else directory / expected,
        program_error=program_error,
        quantization_error=None,
        degenerate=manifest["degenerate"],
        versions=manifest["versions"],
        directory=directory,
        timings_s=manifest["timings_s"],
    )
