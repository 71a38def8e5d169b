"""A linear and a LayerNorm in fp16, the user's story from issue 36: at width 64 it exports and
passes; at width 512 ExecuTorch's portable fp16 LayerNorm computes wrong numbers, which the
export's numerics check refuses (tests/e2e/test_broken_export.py)."""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from pytest_sme2.export.model_spec import ModelSpec


class LnNet(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(16, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x))


def ln_inputs(seed: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(4, 16, generator=torch.Generator().manual_seed(seed)),)


def ln_net(width: int, seed: int = 0) -> LnNet:
    torch.manual_seed(seed)
    return LnNet(width).eval()


def ln_spec(name: str, width: int, seed: int = 0) -> ModelSpec:
    """The net ``width`` wide as ``name``, as a project registers it (fp16 only)."""
    return ModelSpec(name, partial(ln_net, width, seed), ln_inputs, "", ("fp16",))
