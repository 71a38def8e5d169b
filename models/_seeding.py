"""Seeding shared by the example models: identical weights and inputs in every process.

Weights come from PyTorch's default initialisers run under a fixed seed inside a forked RNG, so
building a model neither depends on nor disturbs the caller's global random state. Inputs are
normal noise from a private generator seeded by the caller's ``seed`` — never all-ones, which
would make every lane of a kernel compute the same thing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

WEIGHT_SEED = 0


@contextmanager
def seeded_weights(seed: int = WEIGHT_SEED) -> Iterator[None]:
    """Run module construction under ``torch.manual_seed(seed)`` without leaking the RNG state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def seeded_randn(seed: int, *shape: int) -> torch.Tensor:
    """Standard normal fp32 noise of ``shape`` from a generator seeded by ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator)


def calibrate_batchnorm(model: nn.Module, batch: torch.Tensor) -> nn.Module:
    """Set every BatchNorm's running statistics from one forward pass of ``batch``; return eval.

    A randomly initialised deep CNN with identity BatchNorm statistics blows activations up or
    down layer after layer; a trained network's are normalised. Estimating the statistics from a
    seeded batch gives activations of trained-network scale, which matters for int8 calibration
    and for numerics checks that compare relative errors.
    """
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.reset_running_stats()
            module.momentum = None  # cumulative average: one batch sets the statistics exactly
    model.train()
    with torch.no_grad():
        model(batch)
    return model.eval()
