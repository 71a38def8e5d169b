"""A small real model under a name of the test's choosing, not registered (the suite must not
parametrize over a test's private model): a case measured in seconds on the host and on
qemu-sme2, which a qemu wrapper can single out by its name (``NAME_xnnpack`` is in its program's
path, and an isolated run's ``model.pte`` links to it)."""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from pytest_sme2.export.model_spec import ModelSpec


class Small(nn.Module):
    """One convolution XNNPACK takes, then what the portable kernels run.

    16 output channels, not 8: with 8, SME2's packed convolution costs more instructions than
    NEON's on qemu-sme2 (42,339 vs 37,048 per run: its tile is 16 columns wide either way) and
    the ``sme2-losses`` gate fails it; with 16, 42,339 vs 71,061.
    """

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x)).mean(dim=(2, 3))


def _small(seed: int) -> Small:
    torch.manual_seed(seed)
    return Small().eval()


def _inputs(seed: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(seed)),)


def small_model(name: str, seed: int = 0) -> ModelSpec:
    """The small model as ``name``, its weights seeded with ``seed`` (fp32 only)."""
    return ModelSpec(name, partial(_small, seed), _inputs, "a small convolution", ("fp32",))
