"""A toy CNN: three convolutions and a linear layer on a 128×128 image.

It is the smoke test of the pipeline, not a workload: it exports in seconds and runs in about a
millisecond, so the plugin's own tests can export, run and trace it on every change. Not less:
at 64×64 (0.13–0.42 ms a run) ExecuTorch's per-process framework overhead moved its category
shares by up to 9 points between runner processes, which no share tolerance should absorb.
"""

from __future__ import annotations

import torch
from torch import nn

from models._seeding import seeded_randn, seeded_weights
from pytest_sme2.export.model_spec import register_model


class ToyCNN(nn.Module):
    """conv(3→16) → conv(16→32, /2) → conv(32→64, /2) → global average → linear(64→10)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1),
            nn.ReLU(),
        )
        self.classifier = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).mean(dim=(2, 3)))


def toy_cnn_inputs(seed: int) -> tuple[torch.Tensor, ...]:
    """One 1×3×128×128 image of seeded normal noise."""
    return (seeded_randn(seed, 1, 3, 128, 128),)


@register_model("toy_cnn", inputs=toy_cnn_inputs)
def toy_cnn() -> nn.Module:
    """Toy CNN (3 convs + linear, 128×128): the pipeline's smoke test, exports in seconds.

    Stresses nothing on purpose; it checks that export, runner and trace work end to end.
    """
    with seeded_weights():
        return ToyCNN().eval()
