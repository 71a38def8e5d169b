"""Export recipes: per dtype, how a model becomes the program XNNPACK lowers, and what that
program is checked against.

A recipe makes the program model and inputs (fp16 converts both), exports and quantizes it
(``export``: torch.export, then PT2E; or torchao's ``quantize_`` first, then torch.export) and
names the eager model the program must agree with (its *reference*). Lowering is the same for
every dtype (:func:`lower`). :data:`RECIPES` maps each dtype to its recipe.

Which quantizer each dtype uses, and why:

- ``int8`` (static): PT2E with ExecuTorch's XNNPACK quantizer — the only flow that calibrates
  activation ranges, and the one XNNPACK's static int8 kernels (``QS8``/``PQS8``) come from.
  A model PT2E cannot calibrate is refused, naming the operator it failed at.
- ``int8-dynamic``: PT2E in dynamic mode (convolutions and linears, per-channel int8 weights).
  Where PT2E cannot trace the model — transformers decoders and encoders compute masks and
  positions with integer index arithmetic that ExecuTorch 1.5.1's XNNPACK quantizer lifts to
  float constants (``IndexError: tensors used as indices must be long…``) — torchao's
  ``quantize_`` on the linear layers instead, as ExecuTorch's LLM exporter does; both lower to
  the same ``Fully Connected (NC, QP8, F32, QC8W)``, and the manifest says which one ran.
- ``8da4w``: torchao ``Int8DynamicActivationIntxWeightConfig`` (int8 dynamic activations, int4
  weights in groups of :data:`GROUP_SIZE`), ExecuTorch's ``-qmode 8da4w``. Only linear layers
  whose ``in_features`` divide by the group are quantized; the rest stay fp32, silently in
  ExecuTorch's exporter, and are named here (``skipped``).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, replace
from typing import Any

from pytest_sme2.errors import ExportError
from pytest_sme2.export.output_steps import output_steps

#: The seed of the example inputs the program is checked (and later profiled) on.
EXAMPLE_SEED = 0
#: Seeds of the inputs int8 quantization calibrates on (static: activation ranges).
CALIBRATION_SEEDS: tuple[int, ...] = (1, 2, 3, 4)
#: 8da4w's weight group, as ExecuTorch's LLM exporter's default ``group_size``.
GROUP_SIZE = 32

Stage = Callable[[str], AbstractContextManager[None]]
"""Times and names one export stage, turning a failure inside it into an ExportError."""


@dataclass(frozen=True)
class Reference:
    """What a program is checked against: the eager model it was lowered from, its outputs on
    the example inputs and (static int8) each output's quantization step."""

    what: str
    outputs: tuple[Any, ...]
    steps: tuple[float | None, ...] | None = None


@dataclass(frozen=True)
class Exported:
    """A recipe's program before lowering, with what it was made by."""

    program: Any  # torch.export.ExportedProgram
    #: the reference, where quantization made a new eager model; None: the recipe's float one
    reference: Reference | None
    #: how it was quantized, for the manifest and the report; "" when it was not
    quantizer: str = ""
    #: linear layers the quantizer left in float, each with why (8da4w's group)
    skipped: tuple[str, ...] = ()


class Recipe(ABC):
    """How one dtype exports. Subclasses override what differs from fp32."""

    dtype: str
    #: whether it calibrates on :data:`CALIBRATION_SEEDS` (those inputs are part of the key)
    calibrates: bool = False

    def program(self, model: Any, example: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
        """The module torch.export sees and the inputs the program takes."""
        return model, example

    def reference(self, model: Any, inputs: tuple[Any, ...], fp32: Reference) -> Reference:
        """The float reference before quantization: eager fp32 unless the program is fp16."""
        return fp32

    @abstractmethod
    def export(
        self, model: Any, inputs: tuple[Any, ...], calibration: list[tuple[Any, ...]], stage: Stage
    ) -> Exported:
        """torch.export ``model`` (quantizing it where the dtype says) in ``stage``s."""


class Float(Recipe):
    dtype = "fp32"

    def export(
        self, model: Any, inputs: tuple[Any, ...], calibration: list[tuple[Any, ...]], stage: Stage
    ) -> Exported:
        with stage("torch.export"):
            return Exported(export_program(model, inputs), None)


class Half(Float):
    """``model.half()`` fed fp16 inputs: the program's inputs and outputs are fp16. The XNNPACK
    partitioner needs no configuration for it; ops XNNPACK refuses in fp16 (GELU, LayerNorm) run
    as portable kernels. Buffers convert with the model: a KV cache is fp16 too.

    Buffers convert in place (``.data``), not as ``Module.half`` does (a new tensor under the
    buffer's name): another object holding the same tensor — transformers' ``StaticCache``, which
    its ExecuTorch wrapper registers as buffers — would keep writing an fp32 cache."""

    dtype = "fp16"

    def program(self, model: Any, example: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
        half = tuple(t.half() if t.is_floating_point() else t for t in example)
        converted = copy.deepcopy(model)
        for buffer in converted.buffers():
            if buffer.is_floating_point():
                buffer.data = buffer.data.half()
        return converted.half(), half

    def reference(self, model: Any, inputs: tuple[Any, ...], fp32: Reference) -> Reference:
        with state_kept(model):
            return fp16_reference(model, inputs, fp32)


class Pt2e(Recipe):
    """PT2E with the XNNPACK quantizer, symmetric per-channel weights; fp32 in and out."""

    def __init__(self, dtype: str, *, dynamic: bool) -> None:
        self.dtype, self.dynamic, self.calibrates = dtype, dynamic, True

    def export(
        self, model: Any, inputs: tuple[Any, ...], calibration: list[tuple[Any, ...]], stage: Stage
    ) -> Exported:
        import torch
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        with stage("torch.export"):
            exported = export_program(model, inputs)
        with stage("quantize"):
            quantizer = XNNPACKQuantizer().set_global(
                get_symmetric_quantization_config(is_per_channel=True, is_dynamic=self.dynamic)
            )
            # the model's own buffers: PT2E adds observers, whose values calibration must keep
            state = {name for name, _ in model.named_buffers()}
            prepared = prepare_pt2e(exported.module(), quantizer)
            with torch.no_grad(), state_kept(prepared, state):
                for batch in calibration:
                    calibrate(prepared, batch)
            quantized = convert_pt2e(prepared)
            with torch.no_grad(), state_kept(quantized, state):
                reference = Reference(
                    f"the converted {self.dtype} PT2E model (eager, fake-quantized)",
                    as_tensors(quantized(*inputs), "outputs"),
                    output_steps(quantized),
                )
        with stage("torch.export"):
            program = export_program(quantized, inputs)
        how = "PT2E, XNNPACK quantizer, " + ("dynamic" if self.dynamic else "static")
        return Exported(program, reference, f"{how}, per-channel int8 weights")


class Int8Dynamic(Pt2e):
    """PT2E's dynamic mode, else torchao on the linear layers where PT2E cannot calibrate."""

    def __init__(self) -> None:
        super().__init__("int8-dynamic", dynamic=True)

    def export(
        self, model: Any, inputs: tuple[Any, ...], calibration: list[tuple[Any, ...]], stage: Stage
    ) -> Exported:
        try:
            return super().export(model, inputs, calibration, stage)
        except ExportError as failed:  # the stage names it; the cause says it was calibration
            if not isinstance(failed.__cause__, CalibrationError):
                raise
            import torch
            from torchao.quantization.granularity import PerAxis

            made = torchao_linear(
                self.dtype, model, inputs, stage, weight_dtype=torch.int8, granularity=PerAxis(0)
            )
            why = f"PT2E could not calibrate it: {failed.__cause__}"
            return replace(made, quantizer=f"{made.quantizer} ({why})")


class Int8Da4w(Recipe):
    dtype = "8da4w"

    def export(
        self, model: Any, inputs: tuple[Any, ...], calibration: list[tuple[Any, ...]], stage: Stage
    ) -> Exported:
        import torch
        from torchao.quantization.granularity import PerGroup

        return torchao_linear(
            self.dtype,
            model,
            inputs,
            stage,
            weight_dtype=torch.int4,
            granularity=PerGroup(GROUP_SIZE),
            group=GROUP_SIZE,
        )


def torchao_linear(
    dtype: str,
    model: Any,
    inputs: tuple[Any, ...],
    stage: Stage,
    *,
    weight_dtype: Any,
    granularity: Any,
    group: int | None = None,
) -> Exported:
    """torchao ``quantize_`` of ``model``'s linear layers (int8 dynamic activations, weights of
    ``weight_dtype`` per ``granularity``), then torch.export, as ExecuTorch's LLM exporter does.
    With a ``group``, a layer whose ``in_features`` it does not divide stays fp32 and is named."""
    import torch
    from torchao.quantization import quantize_
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

    with stage("quantize"):
        quantized = copy.deepcopy(model)
        linears = {
            name: module
            for name, module in quantized.named_modules()
            if isinstance(module, torch.nn.Linear)
        }
        skipped = tuple(
            f"{name} (in_features {module.in_features} not divisible by the group, {group})"
            for name, module in linears.items()
            if group is not None and module.in_features % group
        )
        if len(skipped) == len(linears):
            raise ValueError(
                f"no linear layer to quantize: {len(linears)} linear layer(s), "
                + ("none with in_features divisible by the group" if linears else "none at all")
            )
        config = Int8DynamicActivationIntxWeightConfig(
            weight_dtype=weight_dtype, weight_granularity=granularity
        )
        quantize_(
            quantized,
            config,
            filter_fn=lambda module, _: (
                isinstance(module, torch.nn.Linear)
                and (group is None or module.in_features % group == 0)
            ),
        )
        with torch.no_grad(), state_kept(quantized):
            reference = Reference(
                f"the {dtype} torchao model (eager)", as_tensors(quantized(*inputs), "outputs")
            )
    with stage("torch.export"):
        program = export_program(quantized, inputs)
    weights = f"int4 weights in groups of {group}" if group else "int8 weights per channel"
    how = f"torchao quantize_ on linear layers: int8 dynamic activations, {weights}"
    return Exported(program, reference, how, skipped)


def export_program(model: Any, inputs: tuple[Any, ...]) -> Any:
    """torch.export, non-strict (torch's default), else strict: a module whose Python state
    non-strict tracing cannot follow (a static KV cache object) often exports strictly.

    Strict too where non-strict succeeds but writes in place into a lifted constant: a buffer
    the model reaches through another Python object (transformers' ``StaticCache`` holds the KV
    cache its ExecuTorch wrapper registers as buffers) is, to non-strict tracing, a constant.
    That program holds no state and fails lowering (AOT autograd: "expected compiled_fn to be
    GraphModule"); strict tracing follows the object to the buffer.
    """
    import torch

    with torch.no_grad():
        try:
            program = torch.export.export(model, inputs)
        except Exception as non_strict:
            try:
                return torch.export.export(model, inputs, strict=True)
            except Exception:
                raise non_strict from None
        if writes_constants(program):
            return torch.export.export(model, inputs, strict=True)
        return program


def writes_constants(program: Any) -> bool:
    """Whether an exported program mutates one of its lifted tensor constants."""
    import torch
    from torch.export.graph_signature import InputKind

    constants = {
        spec.arg.name
        for spec in program.graph_signature.input_specs
        if spec.kind == InputKind.CONSTANT_TENSOR
    }
    return any(
        node.op == "call_function"
        and isinstance(node.target, torch._ops.OpOverload)
        and node.target._schema.is_mutable
        and any(
            isinstance(arg, torch.fx.Node) and arg.name in constants
            for arg, schema in zip(node.args, node.target._schema.arguments, strict=False)
            if schema.alias_info is not None and schema.alias_info.is_write
        )
        for node in program.graph.nodes
    )


def lower(exported: Any) -> Any:
    """``exported`` XNNPACK-partitioned, as an edge program with an ETRecord; without gradients
    (a torchao-quantized leaf written in place fails ``to_executorch`` with them)."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    with torch.no_grad():
        return to_edge_transform_and_lower(
            exported, partitioner=[XnnpackPartitioner()], generate_etrecord=True
        )


def to_executorch(edge: Any) -> Any:
    """The ExecuTorch program of a lowered ``edge``, every mutable buffer stored with its value.

    ExecuTorch stores a mutable buffer's shape but not its value unless asked: the program would
    start from zeros (a KV cache the model filled, a position counter) where the eager model
    starts from its buffers, and compute another inference than the one checked.
    """
    import torch
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    signature = edge.exported_program().graph_signature
    written = set(signature.buffers_to_mutate.values())
    mutated = sorted(p for p, fqn in signature.inputs_to_buffers.items() if fqn in written)
    config = ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(mutated)])
    with torch.no_grad():
        return edge.to_executorch(config=config if mutated else None)


class CalibrationError(RuntimeError):
    """PT2E calibration failed inside the model's graph: names the operator."""


def calibrate(prepared: Any, inputs: tuple[Any, ...]) -> None:
    """Run one calibration batch; a failure says it was calibration and at which operator (the
    prepared graph's node, found by running it again node by node)."""
    try:
        prepared(*inputs)
    except Exception as err:
        import torch

        where = ""

        class Locate(torch.fx.Interpreter):
            def run_node(self, node: Any) -> Any:
                nonlocal where
                where = f"{node.target} (node {node.name})"
                return super().run_node(node)

        with suppress(Exception):  # it fails again, now with the node known
            Locate(prepared).run(*inputs)
        at = f" at {where}" if where else ""
        raise CalibrationError(f"calibration failed{at}: {type(err).__name__}: {err}") from err


RECIPES: Mapping[str, Recipe] = {
    recipe.dtype: recipe
    for recipe in (
        Float(),
        Half(),
        Pt2e("int8", dynamic=False),
        Int8Dynamic(),
        Int8Da4w(),
    )
}


@contextmanager
def state_kept(module: Any, names: Collection[str] | None = None) -> Iterator[None]:
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


def fp16_reference(model: Any, inputs: tuple[Any, ...], fp32: Reference) -> Reference:
    """Eager fp16 PyTorch on the program's inputs; eager fp32 (saying why) where PyTorch cannot
    run the model in fp16 on the CPU or its fp16 outputs overflow where fp32's do not."""
    import torch

    try:
        with torch.no_grad():
            outputs = as_tensors(model(*inputs), "outputs")
    except Exception as err:  # an op without a CPU Half kernel: compare with what there is
        return replace(
            fp32, what=f"eager fp32 PyTorch (eager fp16 fails on the CPU: {one_line(err)})"
        )
    if not all(torch.isfinite(t).all() for t in outputs):
        return replace(fp32, what="eager fp32 PyTorch (eager fp16 overflows to NaN/inf)")
    return Reference("eager fp16 PyTorch", outputs)


def one_line(err: BaseException) -> str:
    """``Type: first non-empty line of the message`` (long messages cut at 300 characters)."""
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    if len(first) > 300:
        first = first[:297] + "..."
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def as_tensors(value: Any, what: str) -> tuple[Any, ...]:
    """``value`` as a tuple of tensors (a lone tensor becomes a 1-tuple); TypeError otherwise."""
    import torch

    items = tuple(value) if isinstance(value, tuple | list) else (value,)
    if not all(isinstance(item, torch.Tensor) for item in items):
        kinds = ", ".join(sorted({type(item).__name__ for item in items}))
        raise TypeError(f"{what} must be a Tensor or a tuple of Tensors, got {kinds}")
    return tuple(item.detach() for item in items)
