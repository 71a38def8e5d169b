"""The export cache's key: what a program is made of, hashed the same in every process.

The key hashes what is exported — the model as its factory builds it (traced graph, every
submodule's configuration, weights, example and calibration inputs: :func:`program_fingerprint`),
the dtype, the torch / executorch / torchao versions and the recipe version. Not the model's
source files: a class kept in another module, a width read from an environment variable or a
config file, or a weights file all change the program without changing the factory's file, and a
key of that file would hand back the old ``.pte`` — a false green.
"""

from __future__ import annotations

import hashlib
import re
import sys
import uuid
from collections.abc import Iterator
from importlib import metadata
from operator import attrgetter
from typing import Any

from pytest_sme2.cache import content_key
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.export.recipes import CALIBRATION_SEEDS, EXAMPLE_SEED, as_tensors
from pytest_sme2.quiet import quiet_libraries

#: Bump when the export recipe changes in a way that changes programs (invalidates every entry).
#: 2: the program is checked against the eager model it was lowered from (int8: the converted
#: PT2E model) and the quantization error is stored; ``expected_outputs`` changed meaning.
#: 3: the fp32 program-error tolerance (stored judged in each entry) widened to rel 1e-3.
#: 4: mutable buffers stored with their initial values; eager references leave state untouched.
RECIPE_VERSION = "4"
#: Packages whose versions change programs; part of the key and of the manifest.
VERSIONED_PACKAGES: tuple[str, ...] = ("torch", "executorch", "torchao")


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


def take_built(spec: ModelSpec) -> Any | None:
    """The model :func:`program_fingerprint` built for ``spec``, handed over once (None if it
    was not built here, or was taken): the export lowers it; a warm hit just lets it go."""
    return _BUILT.pop(spec, None)


_SIZES: dict[ModelSpec, int] = {}
"""How many nodes each graph program_fingerprint traced has."""


def traced_size(spec: ModelSpec) -> int:
    """The number of nodes in the graph :func:`program_fingerprint` traced for ``spec`` (0 if it
    could not be traced): what an export's lowering time grows with, so a session can start its
    biggest exports first and not end on one long export with the other core idle."""
    program_fingerprint(spec)
    return _SIZES.get(spec, 0)


#: How the fingerprint of a model that could not be built or traced starts: a one-off, so that
#: its export is tried (and fails, at its own stage) again.
UNBUILDABLE = "unbuildable-"


def keyed_by_its_build(spec: ModelSpec) -> bool:
    """Whether ``spec``'s key is of the model its factory built (not a one-off)."""
    return not program_fingerprint(spec).startswith(UNBUILDABLE)


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
        with quiet_libraries():
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
                seed: as_tensors(spec.example_inputs(seed), "inputs")
                for seed in (EXAMPLE_SEED, *CALIBRATION_SEEDS)
            }
            kind, graph, extra = _trace(model, inputs[EXAMPLE_SEED])
    except Exception:  # the export fails the same way, at its own stage: say it there
        return f"{UNBUILDABLE}{uuid.uuid4().hex}"
    _BUILT[spec] = model
    _SIZES[spec] = len(graph.graph.nodes)

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
