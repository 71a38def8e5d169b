"""How the session's cases become tests, on the objects: the expectations a case is judged by
(its test's markers and its model's own), the cases each device runs (an emulating device's at
its emulation params), and every case exported before the first is measured — the collection a
session does, without one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.case_context import merged_expectations
from pytest_sme2.collection import export_collected
from pytest_sme2.devices.kinds import BUILT_IN_KINDS
from pytest_sme2.devices.spec import parse_device_specs
from pytest_sme2.errors import ConfigError
from pytest_sme2.export.exporter import export_model, load_cached
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.settings import CATEGORY_OVERRIDES_INI, FLEET_INI, OPTIONS, Case, resolve
from tests.inner import with_host_runner

TEST = "test_suite.py::test_model"


def _conv(size: int = 40) -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten()).eval()


def _wider() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.Flatten()).eval()


def _image(seed: int, size: int = 40) -> tuple[Any, ...]:
    import torch

    return (torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(seed)),)


#: a conv whose input shrinks on emulated devices, as ``register_model(emulation=...)`` makes it
SHRINKING = ModelSpec(
    "plug_e", _conv, _image, "a conv", ("fp32",), emulation_params=(("size", 20),)
)


def _case(spec: ModelSpec, dtype: str = "fp32") -> Case:
    (host,) = parse_device_specs("host", BUILT_IN_KINDS)
    return Case(spec, dtype, 1, False, host, False)


def test_a_models_own_expectations_win_over_the_tests_marker() -> None:
    """The test asks for a Convolution share below 1 %; a model that lifts it for itself (and
    only itself) is judged by its own, the other by the test's."""
    marks = [pytest.mark.sme2(max_share={"Convolution": 0.01}, speedup_floor=1.2).mark]
    lifted = ModelSpec("plug_a", _conv, _image, "", expect={"*": {"max_share": {"Convolution": 1}}})
    plain = ModelSpec("plug_b", _conv, _image, "")
    own = merged_expectations(marks, _case(lifted), TEST)
    other = merged_expectations(marks, _case(plain), TEST)
    assert (own.max_share, other.max_share) == ({"Convolution": 1}, {"Convolution": 0.01})
    assert own.speedup_floor == other.speedup_floor  # the rest of the marker stands


def test_the_closest_marker_wins_and_a_mistake_names_the_test_or_the_model() -> None:
    # closest first, as pytest iterates them: the function's marker over the module's
    marks = [pytest.mark.sme2(speedup_floor=1.5).mark, pytest.mark.sme2(speedup_floor=1.1).mark]
    assert merged_expectations(marks, None, TEST).speedup_floor == 1.5
    with pytest.raises(ConfigError, match=rf"^{TEST}: @pytest.mark.sme2 speedup_flor=1.2: unknown"):
        merged_expectations([pytest.mark.sme2(speedup_flor=1.2).mark], None, TEST)
    with pytest.raises(ConfigError, match="takes keyword arguments only"):
        merged_expectations([pytest.mark.sme2(1.2).mark], None, TEST)
    broken = ModelSpec("plug_c", _conv, _image, "", expect={"*": {"max_share": {"GEMM": "all"}}})
    with pytest.raises(ConfigError) as err:
        merged_expectations([], _case(broken), TEST)
    assert str(err.value).startswith(
        f"{TEST}: @pytest.mark.sme2 with register_model('plug_c', expect=...) "
        "max_share={'GEMM': 'all'}"
    )


@pytest.mark.parametrize(("device", "side"), [("host", 40), ("qemu-sme2", 20)])
def test_an_emulated_device_runs_each_model_at_its_emulation_params(
    tmp_path: Path, device: str, side: int
) -> None:
    given = {"sme2_device": device}
    defaults = {o.dest: o.default for o in OPTIONS} | {FLEET_INI: "", CATEGORY_OVERRIDES_INI: []}
    (case,) = resolve(given.get, defaults.get, tmp_path, BUILT_IN_KINDS).cases([SHRINKING])
    assert case.id == "plug_e-fp32"
    artifact = export_model(case.model, case.dtype)
    manifest = json.loads((artifact.directory / "artifact.json").read_text())
    assert manifest["inputs"][0]["shape"] == [1, 3, side, side]


def test_every_case_is_exported_before_the_first_is_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nothing exported yet
    monkeypatch.setenv("SME2_CACHE_DIR", str(with_host_runner(tmp_path / "cache")))
    wide = ModelSpec("plug_w", _wider, _image, "")
    cases = [_case(SHRINKING), _case(wide)]
    assert all(load_cached(case.model, "fp32") is None for case in cases)
    export_collected(cases)
    assert all(load_cached(case.model, "fp32") is not None for case in cases)
