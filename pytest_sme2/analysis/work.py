"""Work: the multiply-adds (MACs) of each delegated GEMM and convolution operator instance, read
from the program itself. Pure functions over data; no torch or executorch import.

Why: instructions and milliseconds say what an operator cost, not what it had to do. An SME2
kernel needs far fewer instructions for the same work, so neither SME2's share of the work
(coverage) nor how far an operator is from the chip's limit can be read from costs alone.

Where the shapes come from: XNNPACK's ETDump events carry no shapes, but the ETRecord the export
writes beside every program holds the edge program before lowering
(``edge_dialect_exported_program/<method>``: ``torch.export``'s JSON serialisation, every
tensor's sizes under ``graph.tensor_values``) and ``debug_handle_map``, which gives each
instruction of the lowered program — each delegate call — the debug handles of the edge nodes
it was made of. So a delegate call's GEMM and convolution nodes (``linear``, ``mm``, ``addmm``,
``bmm``, ``convolution``), in graph order, are matched to the XNNPACK GEMM and convolution
events logged in that call, in execution order (XNNPACK runs its subgraph's nodes in the order
the partition serialised them, the graph's). The match is taken only where it is certain: the
same number of nodes and events, and each pair of the same kind (a matrix product with a fully
connected or batch matrix multiply event, a convolution with a convolution — or, 1×1 and of one
group, with a fully connected one, as XNNPACK runs it — a transposed one with a
deconvolution). Any other call's events are "work unknown", never guessed.

MACs, per inference: a matrix product ``M×K · K×N`` is ``M·N·K`` (a batch of them, times the
batch); a convolution is every output element times one filter's taps, ``numel(out) ·
Cin/groups · kh · kw`` (a transposed one, every input element times ``Cout/groups · kh · kw``).
"""

from __future__ import annotations

import json
import math
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pytest_sme2.analysis.categories import is_leaf, subcategory
from pytest_sme2.analysis.trace import Run
from pytest_sme2.errors import TraceError

#: what a GEMM-like node or event is, for matching one with the other
MATMUL, CONV, DECONV = "matmul", "conv", "deconv"
#: event sub-category (:mod:`pytest_sme2.analysis.categories`) → the kind of node it runs
EVENT_KINDS: Mapping[str, str] = {
    "fully connected": MATMUL,
    "batch matmul": MATMUL,
    "convolution": CONV,
    "depthwise convolution": CONV,
    "deconvolution": DECONV,
}
#: edge operator (the target's ``aten.<op>``) → the kind it is
_NODE_OPS: Mapping[str, str] = {
    "linear": MATMUL,
    "mm": MATMUL,
    "addmm": MATMUL,
    "bmm": MATMUL,
    "convolution": CONV,
}


@dataclass(frozen=True)
class NodeWork:
    """One GEMM or convolution node of the edge program: its kind, its MACs per inference, and
    its shape as a GEMM (``m`` rows of ``k`` times ``k×n``, ``batch`` times), how a reader
    compares it with a kernel's tile."""

    op: str  # the edge operator: linear, mm, addmm, bmm, convolution
    kind: str  # MATMUL, CONV or DECONV
    macs: int
    m: int
    n: int
    k: int
    batch: int = 1
    detail: str = ""  # a convolution's kernel, groups and stride
    #: a 1×1 convolution of one group, which XNNPACK runs as a fully connected operator
    pointwise: bool = False

    def runs_as(self, kind: str) -> bool:
        """Whether an event of ``kind`` (:data:`EVENT_KINDS`) can be this node."""
        return kind == self.kind or (self.pointwise and kind == MATMUL)

    @property
    def shape(self) -> str:
        """``linear M=16 N=384 K=384``, ``bmm 6× M=16 N=32 K=64``, ``conv 3×3/2 g16 M=…``."""
        batch = f"{self.batch}× " if self.batch > 1 else ""
        detail = f" {self.detail}" if self.detail else ""
        return f"{self.op}{detail} {batch}M={self.m} N={self.n} K={self.k}"


@dataclass(frozen=True)
class ProgramWork:
    """What the ETRecord says of a method's GEMM and convolution work: per delegate call
    (instruction id), its nodes in graph order."""

    calls: Mapping[int, tuple[NodeWork, ...]]

    @property
    def macs(self) -> int:
        return sum(node.macs for nodes in self.calls.values() for node in nodes)


@dataclass(frozen=True)
class OperatorWork:
    """One GEMM or convolution operator event of an inference and its work.

    ``position`` is the event's place among the run's leaf events (what
    :func:`pytest_sme2.analysis.attribution.operator_kernels` lists, in the same order);
    ``call`` its delegate call's instruction id; ``macs`` None where the work is unknown (the
    call's nodes and events do not match one to one).
    """

    name: str  # the event's name (with its `` #n``)
    position: int
    call: int
    macs: int | None
    shape: str = ""
    m: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OperatorWork:
        return cls(**data)


def read_program_work(path: Path | str, method: str = "forward") -> ProgramWork:
    """The GEMM and convolution nodes of each delegate call of ``method``, from the ETRecord at
    ``path``; a one-line ``TraceError`` where it has no edge program or debug handle map."""
    path = Path(path)
    members = ("debug_handle_map", "delegate_map", f"edge_dialect_exported_program/{method}")
    try:
        with zipfile.ZipFile(path) as archive:
            missing = [name for name in members if name not in archive.namelist()]
            if missing:
                raise TraceError(path, f"an ETRecord without {missing[0]}: no shapes to read")
            handles, delegates, graph = (json.loads(archive.read(name)) for name in members)
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except (zipfile.BadZipFile, IsADirectoryError):
        raise TraceError(path, "not an ETRecord (not a zip archive)") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise TraceError(path, "corrupt ETRecord: a member is not JSON") from None
    try:
        return program_work(
            graph["graph_module"]["graph"], handles.get(method, {}), delegates.get(method, {})
        )
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as error:
        raise TraceError(path, f"an edge program of an unexpected form ({error!r})") from None


def program_work(
    graph: Mapping[str, Any],
    handles: Mapping[str, Any],
    delegates: Mapping[str, Any],
) -> ProgramWork:
    """:func:`read_program_work` on the parsed members: ``graph`` the serialised edge graph,
    ``handles`` its ``debug_handle_map`` (instruction → debug handles), ``delegates`` the
    ``delegate_map`` (which instructions are delegate calls)."""
    sizes = {
        name: tuple(dim["as_int"] for dim in value["sizes"])
        for name, value in graph["tensor_values"].items()
        if all("as_int" in dim for dim in value["sizes"])
    }
    by_handle: dict[int, NodeWork] = {}
    order: dict[int, int] = {}
    for index, node in enumerate(graph["nodes"]):
        handle = node.get("metadata", {}).get("debug_handle")
        work = _node_work(node, sizes)
        if handle is not None and work is not None:
            by_handle[int(handle)] = work
            order[int(handle)] = index
    calls = {}
    for instruction in delegates:
        listed = handles.get(instruction, [])
        listed = listed if isinstance(listed, list) else [listed]
        mine = sorted({h for h in listed if h in by_handle}, key=order.__getitem__)
        calls[int(instruction)] = tuple(by_handle[h] for h in mine)
    return ProgramWork(calls)


def _node_work(node: Mapping[str, Any], sizes: Mapping[str, tuple[int, ...]]) -> NodeWork | None:
    """A GEMM or convolution node's work; None for any other node, or one whose operand sizes
    are not all known (symbolic)."""
    target = str(node.get("target", ""))
    parts = target.split(".")
    op = parts[-2] if len(parts) >= 2 else ""
    if "aten" not in parts or op not in _NODE_OPS:
        return None
    args = {item["name"]: item["arg"] for item in node["inputs"]}
    tensors = {
        name: sizes.get(arg.get("as_tensor", {}).get("name", "")) for name, arg in args.items()
    }
    outputs = [sizes.get(out.get("as_tensor", {}).get("name", "")) for out in node["outputs"]]
    if op == "convolution":
        return _conv_work(args, tensors.get("input"), tensors.get("weight"), outputs[0])
    first, second = {
        "linear": ("input", "weight"),
        "mm": ("self", "mat2"),
        "addmm": ("mat1", "mat2"),
        "bmm": ("self", "mat2"),
    }[op]
    a, b = tensors.get(first), tensors.get(second)
    if not a or not b:
        return None
    if op == "linear":
        m, k, n, batch = math.prod(a[:-1]), a[-1], b[0], 1
    elif op == "bmm":
        batch, m, k, n = a[0], a[1], a[2], b[2]
    else:
        m, k, n, batch = a[0], a[1], b[1], 1
    return NodeWork(op, MATMUL, batch * m * n * k, m, n, k, batch)


def _conv_work(
    args: Mapping[str, Any],
    x: tuple[int, ...] | None,
    w: tuple[int, ...] | None,
    out: tuple[int, ...] | None,
) -> NodeWork | None:
    if not x or not w or not out:
        return None
    groups = args.get("groups", {}).get("as_int", 1)
    stride = args.get("stride", {}).get("as_ints", [1])
    taps = math.prod(w[2:])
    window = "×".join(map(str, w[2:]))
    strides = "" if set(stride) == {1} else "/" + "×".join(map(str, sorted(set(stride))))
    detail = f"{window}{strides}" + (f" g{groups}" if groups > 1 else "")
    if args.get("transposed", {}).get("as_bool", False):
        # weight [Cin, Cout/groups, kh, kw]: each input pixel's Cin/groups values meet
        # Cout/groups · taps weights per group
        rows = x[0] * math.prod(x[2:])
        k, n = x[1] // groups, w[1] * taps
        return NodeWork("conv_transpose", DECONV, groups * rows * n * k, rows, n, k, groups, detail)
    # weight [Cout, Cin/groups, kh, kw]: each output element sums Cin/groups · taps products
    rows = out[0] * math.prod(out[2:])
    n, k = out[1] // groups, w[1] * taps
    pointwise = taps == 1 and groups == 1
    return NodeWork("conv", CONV, groups * rows * n * k, rows, n, k, groups, detail, pointwise)


def operator_work(run: Run, program: ProgramWork) -> tuple[OperatorWork, ...]:
    """Each GEMM and convolution event of ``run`` (one inference) with its work: the nodes of
    its delegate call matched to the call's events in order, where they match one to one in
    number and kind, else each of the call's events with ``macs`` None."""
    events: dict[int, list[tuple[int, int]]] = {}  # call → (event index, leaf position)
    position = 0
    for index, event in enumerate(run.events):
        if not is_leaf(event.name):
            continue
        if event.delegated and _event_kind(event.name) is not None:
            events.setdefault(event.instruction_id, []).append((index, position))
        position += 1
    found = []
    for call, indexed in events.items():
        nodes = program.calls.get(call, ())
        names = [run.events[index].name for index, _ in indexed]
        kinds = [_event_kind(name) for name in names]
        matched = len(nodes) == len(names) and all(
            node.runs_as(kind) for node, kind in zip(nodes, kinds, strict=False)
        )
        for j, (_, at) in enumerate(indexed):
            node = nodes[j] if matched else None
            found.append(
                OperatorWork(
                    names[j],
                    at,
                    call,
                    node.macs if node else None,
                    node.shape if node else "",
                    node.m if node else None,
                )
            )
    return tuple(sorted(found, key=lambda op: op.position))


def _event_kind(name: str) -> str | None:
    return EVENT_KINDS.get(subcategory(name))


def known_macs(work: Sequence[OperatorWork]) -> int:
    """MACs of the operators whose work is known."""
    return sum(op.macs for op in work if op.macs is not None)


def unknown(work: Sequence[OperatorWork]) -> tuple[OperatorWork, ...]:
    """The operators whose work is unknown."""
    return tuple(op for op in work if op.macs is None)
