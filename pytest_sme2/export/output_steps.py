"""Each output's quantization step in a converted PT2E graph: what static int8's program error is
counted in. Apart from the recipes because it reads a graph the PT2E recipe made, not a model.
"""

from __future__ import annotations

from typing import Any

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


def output_steps(graph_module: Any) -> tuple[float | None, ...]:
    """Each output's quantization step in a converted PT2E graph: the scale of the static
    ``dequantize_per_tensor`` that produces it (through data-movement ops; the largest where
    several feed it), None where the output is computed in float after it (or quantized
    dynamically, whose scale is chosen per run).

    The program runs the same quantized graph in integer arithmetic: its output is that
    dequantize of an int8 tensor, on the same grid as the converted model's. Where XNNPACK's
    integer requantization rounds an intermediate differently from the converted model's float
    arithmetic, the difference is a step there and, carried through the layers after, a few at
    the output: why the int8 tolerance is counted in output steps (``tolerances.TOLERANCES``).
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
