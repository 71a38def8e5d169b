"""Node provenance shared while lowering: the same programs and the same provenance, cheaper."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.fx.traceback import NodeSource

from pytest_sme2.export.provenance import provenance_shared
from pytest_sme2.export.recipes import export_program, lower, to_executorch


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4)
    ).eval()


def _lowered() -> tuple[bytes, list[Any]]:
    """The program's bytes, and every edge node's provenance without graph ids (``id()`` of a
    graph object: different in every run)."""
    edge = lower(export_program(_model(), (torch.randn(1, 3, 8, 8),)))
    provenance = [
        (node.name, [_without_ids(s.to_dict()) for s in node.meta.get("from_node", [])])
        for node in edge.exported_program().graph.nodes
    ]
    return bytes(to_executorch(edge).buffer), provenance


def _without_ids(source: dict[str, Any]) -> dict[str, Any]:
    return {
        **{k: v for k, v in source.items() if k != "graph_id"},
        "from_node": [_without_ids(s) for s in source["from_node"]],
    }


def test_a_program_lowered_with_shared_provenance_is_the_same_program() -> None:
    plain = _lowered()
    with provenance_shared():
        shared = _lowered()
    assert shared[0] == plain[0]
    assert shared[1] == plain[1]
    assert any(chain for _, chain in plain[1])  # there was provenance to compare


def test_inside_the_block_a_node_source_is_shared_and_after_it_copied_again() -> None:
    graph = torch.fx.Graph()
    source = NodeSource(graph.placeholder("x"), "a_pass")
    with provenance_shared():
        assert copy.deepcopy([source])[0] is source
        with provenance_shared():  # nested: the outer block's sharing is left in place
            pass
        assert copy.deepcopy(source) is source
    copied = copy.deepcopy(source)
    assert copied is not source and copied == source
