"""Small inner sessions for pytester: a tiny model registered under names of the test's choosing.

A fault is aimed at one case by its model's name: the program's path holds ``NAME_xnnpack`` (an
isolated run's ``model.pte`` links to it), so a wrapper (a user's qemu, a runner's disk) can single
it out while the other cases run for real.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: The repository: inner sessions import its example models (``models/``).
REPO = Path(__file__).resolve().parents[1]

SMALL_MODEL = """
import torch
from torch import nn

from pytest_sme2 import register_model


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x)).mean(dim=(2, 3))


def small_inputs(seed):
    return (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(seed)),)
"""


def inner_conftest(*names: str) -> str:
    """A conftest registering the small model under each of ``names``: cases run in this order,
    and a qemu wrapper can single one out by its name (``NAME_xnnpack`` in the program's path)."""
    return SMALL_MODEL + "".join(
        f'\n\n@register_model("{name}", inputs=small_inputs, dtypes=("fp32",))\n'
        f"def {name}():\n    torch.manual_seed({seed})\n    return Small().eval()\n"
        for seed, name in enumerate(names)
    )


INNER_TEST = """
def test_model(sme2_measurement, sme2_judge):
    sme2_judge(sme2_measurement)
"""


def examples_session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, cache: Path, suite: str
) -> None:
    """Make ``pytester``'s directory a project of the repository's example models with the test
    file ``suite``, its sessions (and their xdist workers) using the cache ``cache``: the real
    one, resolved before pytester pointed HOME elsewhere, so exports and qemu are reused."""
    monkeypatch.setenv("SME2_CACHE_DIR", str(cache))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join((str(REPO), os.environ.get("PYTHONPATH", ""))))
    pytester.makeconftest("import models  # noqa: F401  (registers the examples)")
    pytester.makepyfile(test_suite=suite)


def through_qemu(qemu: Path, tmp_path: Path) -> tuple[str, ...]:
    """An inner qemu-sme2 session's arguments through the user's ``qemu`` (a wrapper that lies or
    hangs), recording fresh baselines and its artifacts under ``tmp_path``."""
    return (
        "-p",
        "no:cacheprovider",
        "--sme2-device=qemu-sme2",
        f"--sme2-qemu={qemu}",
        f"--sme2-baseline-dir={tmp_path / 'baselines'}",
        f"--sme2-artifacts={tmp_path / 'artifacts'}",
        "--sme2-update-baselines",
    )
