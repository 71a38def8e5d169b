"""One export built: the model and its eager outputs, the dtype's recipe (quantizing where it
says), lowering to XNNPACK, and the files of the cache entry with ``artifact.json`` last
(:mod:`pytest_sme2.export.exporter` keeps the cache and checks the numerics).

Apart from the cache because it is the one part that imports torch and executorch, and runs only
on a miss; each step is an export stage (:class:`Stages`): timed, said on the progress line, and
named by the ExportError of anything that fails inside it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_sme2 import progress
from pytest_sme2.analysis.numerics import DEGENERATE_ADVICE, compare_outputs, degenerate
from pytest_sme2.cache import write_atomic
from pytest_sme2.errors import ExportError
from pytest_sme2.export.key import RECIPE_VERSION, package_versions, take_built
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.export.recipes import (
    CALIBRATION_SEEDS,
    EXAMPLE_SEED,
    RECIPES,
    Exported,
    Recipe,
    Reference,
    as_tensors,
    lower,
    one_line,
    state_kept,
    to_executorch,
)
from pytest_sme2.runner.tensors import write_tensors

MANIFEST_NAME = "artifact.json"
INPUTS_NAME = "inputs.tensors"
EXPECTED_OUTPUTS_NAME = "expected_outputs.tensors"
MANIFEST_FORMAT = 2


class Stages:
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
            raise ExportError(self.model, self.dtype, name, one_line(err)) from err
        finally:
            elapsed = time.perf_counter() - started
            self.timings[name] = round(self.timings.get(name, 0.0) + elapsed, 3)


def build_export(spec: ModelSpec, dtype: str, key: str, out: Path, stages: Stages) -> None:
    """Export ``spec`` × ``dtype`` into the empty directory ``out`` (manifest last), by the
    dtype's recipe (:mod:`pytest_sme2.export.recipes`)."""
    recipe = RECIPES[dtype]
    with stages.stage("build model"):
        eager = _eager(spec, recipe)
    calibration = (
        [spec.example_inputs(seed) for seed in CALIBRATION_SEEDS] if recipe.calibrates else []
    )
    made = recipe.export(eager.program_model, eager.program_inputs, calibration, stages.stage)
    reference = made.reference or eager.reference
    with stages.stage("lower"):
        edge = lower(made.program)
    with stages.stage("to_executorch"):
        program = to_executorch(edge)
    stem = f"{spec.name}_xnnpack_{dtype}"  # the reference kit's <model>_xnnpack_<dtype>.pte
    files = {
        "pte": f"{stem}.pte",
        "etrecord": f"{stem}.etrecord",
        "inputs": INPUTS_NAME,
        "expected_outputs": EXPECTED_OUTPUTS_NAME,
    }
    with stages.stage("serialize"):
        (out / files["pte"]).write_bytes(program.buffer)
        write_tensors(out / INPUTS_NAME, [t.numpy() for t in eager.program_inputs])
        expected = [t.numpy() for t in reference.outputs]
        write_tensors(out / EXPECTED_OUTPUTS_NAME, expected)
        program_outputs = made.program.graph.find_nodes(op="output")[0].args[0]
    with stages.stage("etrecord"):
        program.get_etrecord().save(str(out / files["etrecord"]))
    manifest = {
        "format": MANIFEST_FORMAT,
        "model": spec.name,
        "params": dict(spec.params),
        "dtype": dtype,
        "key": key,
        "recipe": RECIPE_VERSION,
        "versions": package_versions(),
        "files": files,
        "pte_bytes": (out / files["pte"]).stat().st_size,
        "inputs": [_describe(t) for t in eager.program_inputs],
        "outputs": [_describe(node.meta["val"]) for node in program_outputs],
        **_made_by(recipe, made, stages),
        **_numerics_found(eager, reference, expected),
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "exported_by": {"host": socket.gethostname(), "pid": os.getpid()},
        "numerics": None,
    }
    write_atomic(out / MANIFEST_NAME, json.dumps(manifest, indent=2) + "\n")


@dataclass(frozen=True)
class _Eager:
    """The model built, the program's model and inputs the recipe makes of it, and the eager
    fp32 outputs (as tensors and as arrays) with the reference the program is checked against."""

    program_model: Any
    program_inputs: tuple[Any, ...]
    fp32_outputs: tuple[Any, ...]
    eager: list[Any]
    reference: Reference


def _eager(spec: ModelSpec, recipe: Recipe) -> _Eager:
    """Build the model (or take the one built to key it) and run it in eager fp32 on the example
    inputs; ValueError where its outputs are not finite: the model itself is broken."""
    import torch

    with torch.no_grad():
        model = take_built(spec)
        if model is None:  # keyed earlier, by an export of another dtype
            model = spec.build()
        example = as_tensors(spec.example_inputs(EXAMPLE_SEED), "inputs")
        program_model, program_inputs = recipe.program(model, example)
        fp32_inputs = tuple(t.float() if t.is_floating_point() else t for t in program_inputs)
        with state_kept(model):
            fp32_outputs = as_tensors(model(*fp32_inputs), "outputs")
    eager = [t.float().numpy() for t in fp32_outputs]
    if not all(torch.isfinite(t).all() for t in fp32_outputs):
        raise ValueError(
            f"eager fp32 PyTorch: {degenerate(eager)}: the model itself is broken; "
            + DEGENERATE_ADVICE
        )
    reference = recipe.reference(
        program_model, program_inputs, Reference("eager fp32 PyTorch", fp32_outputs)
    )
    return _Eager(program_model, program_inputs, fp32_outputs, eager, reference)


def _made_by(recipe: Recipe, made: Exported, stages: Stages) -> dict[str, Any]:
    """The manifest's record of how the program was made: seeds, quantizer, stage timings."""
    return {
        "example_seed": EXAMPLE_SEED,
        "calibration_seeds": list(CALIBRATION_SEEDS) if recipe.calibrates else [],
        "quantizer": made.quantizer,
        "skipped_linears": list(made.skipped),
        "timings_s": stages.timings,
    }


def _numerics_found(eager: _Eager, reference: Reference, expected: list[Any]) -> dict[str, Any]:
    """The manifest's record of what the program is checked against: the reference, its output
    steps, its quantization error against eager fp32 (none where it is eager fp32), and why the
    outputs are degenerate, if they are."""
    return {
        "reference": reference.what,
        "output_steps": list(reference.steps or [None] * len(expected)),
        "quantization": None
        if reference.outputs is eager.fp32_outputs
        else {
            "reference": f"{reference.what} vs eager fp32 PyTorch",
            "outputs": [
                e.to_json()
                for e in compare_outputs(expected, eager.eager, what="eager fp32 PyTorch")
            ],
        },
        "degenerate": _degenerate(eager.eager, expected, reference.what),
    }


def _degenerate(eager: list[Any], reference: list[Any], what: str) -> str | None:
    """Why the outputs a program is judged against are degenerate: eager fp32's first (the model
    the user chose), else the reduced-precision model's (quantization that collapsed them)."""
    found = degenerate(eager)
    if found is not None:
        return f"eager fp32 PyTorch: {found}"
    found = degenerate(reference)
    return None if found is None else f"{what}: {found}"


def _describe(tensor: Any) -> dict[str, Any]:
    """Shape and dtype of a tensor (or a fake tensor from the exported graph) for the manifest."""
    return {"shape": list(tensor.shape), "dtype": str(tensor.dtype).removeprefix("torch.")}
