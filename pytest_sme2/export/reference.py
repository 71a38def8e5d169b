"""The reference workload: a fixed small program measured in every timing round.

Absolute latency drifts between sessions for reasons that are not the model's — another process
on the sibling hyperthread, thermal state, a different VM host. The reference runs in the same
interleaved rounds as the model, so the latency gate can judge the model's latency *relative to
the reference* and divide the machine's speed out: a slower model moves against an unchanged
reference, a slower machine moves both. It is a pytest-sme2 program, not a registered model, so
no suite parametrizes over it, and its code changes only with pytest-sme2.
"""

from __future__ import annotations

from typing import Any

from pytest_sme2.export.model_spec import ModelSpec


def _reference_model() -> Any:
    """Convolutions, a depthwise convolution, pooling and a linear: the mix of the examples."""
    import torch

    torch.manual_seed(1234)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 24, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(24, 24, 3, padding=1, groups=24),
        torch.nn.Conv2d(24, 48, 1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(48, 64),
    ).eval()


def _reference_inputs(seed: int) -> tuple[Any, ...]:
    import torch

    return (torch.randn(1, 3, 96, 96, generator=torch.Generator().manual_seed(seed)),)


REFERENCE = ModelSpec(
    name="sme2_reference",
    factory=_reference_model,
    inputs=_reference_inputs,
    description="pytest-sme2's reference workload for machine-speed calibration",
    dtypes=("fp32",),
)
