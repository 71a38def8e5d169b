"""The dtype recipes on real exports: which quantizer ran, what it left in float, what it says
when it cannot quantize, and the programs run in the native runner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.analysis.trace import read_etdump
from pytest_sme2.errors import ExportError
from pytest_sme2.export.exporter import Artifact, export_model
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.runner import Executions, RunnerCall, build_runner, run_runner


def _manifest(artifact: Artifact) -> dict[str, Any]:
    return json.loads((artifact.directory / "artifact.json").read_text())


def _mlp() -> Any:
    """Two linear layers 8da4w quantizes (in_features 64, 128) and one it cannot (48)."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 48),
        torch.nn.Linear(48, 10),
    ).eval()


def _rows(seed: int) -> tuple[Any, ...]:
    import torch

    return (torch.randn(1, 8, 64, generator=torch.Generator().manual_seed(seed)),)


MLP = ModelSpec("recipes_mlp", _mlp, _rows, "", ("8da4w",))


def test_8da4w_quantizes_the_linear_layers_the_group_divides_and_names_the_rest(
    tmp_path: Path,
) -> None:
    artifact = export_model(MLP, "8da4w")
    manifest = _manifest(artifact)
    assert manifest["quantizer"] == (
        "torchao quantize_ on linear layers: int8 dynamic activations, int4 weights in groups of 32"
    )
    assert manifest["skipped_linears"] == ["3 (in_features 48 not divisible by the group, 32)"]
    assert manifest["reference"] == "the 8da4w torchao model (eager)"
    assert artifact.program_error is not None and artifact.program_error.ok
    assert artifact.quantization_error is not None and artifact.quantization_error.max_rel > 0
    run = run_runner(
        build_runner(),
        RunnerCall(
            artifact.pte, artifact.inputs, Executions(runs=1, warmup=0, traced=True), tmp_path
        ),
    )
    assert run.etdump is not None
    names = {event.name for event in read_etdump(run.etdump).runs[0].events}
    four_bit = [name for name in names if "QB4W" in name]
    assert len(four_bit) == 2, f"two 4-bit linear layers expected among {sorted(names)}"


def test_the_report_names_the_linear_layers_8da4w_left_in_float(tmp_path: Path) -> None:
    """Through the case record, as a measured case carries its export's numbers."""
    from dataclasses import replace

    from pytest_sme2.records.measurement import Measurement
    from pytest_sme2.report.markdown import case_report
    from tests.measurements import measurement

    numerics = export_model(MLP, "8da4w").numerics
    assert numerics is not None
    assert numerics.skipped == ("3 (in_features 48 not divisible by the group, 32)",)
    m = replace(measurement(), dtype="8da4w", numerics=numerics)
    m = Measurement.from_json(m.to_json(tmp_path), tmp_path)
    report = case_report(m, [])
    assert "| linear layers left in float (1) | 3 (in_features 48 not divisible by the group" in (
        report
    )
    assert "| quantizer | torchao quantize_ on linear layers" in report


def _no_group() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(48, 10).eval()


def _rows_48(seed: int) -> tuple[Any, ...]:
    import torch

    return (torch.randn(1, 48, generator=torch.Generator().manual_seed(seed)),)


def test_8da4w_of_a_model_it_cannot_quantize_at_all_is_refused() -> None:
    spec = ModelSpec("recipes_no_group", _no_group, _rows_48, "", ("8da4w",))
    with pytest.raises(ExportError, match=r"failed at quantize: ValueError: no linear layer to "):
        export_model(spec, "8da4w")


def _positions() -> Any:
    """Positions computed with integer index arithmetic, as transformers decoders do: ExecuTorch
    1.5.1's XNNPACK quantizer lifts the scalars to float constants, and PT2E calibration then
    indexes with floats."""
    import torch

    class Gather(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = torch.nn.Embedding(64, 32)
            self.linear = torch.nn.Linear(32, 8)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            last = ids.shape[1] - 1
            positions = torch.arange(ids.shape[1]).flip(0) - last + 3
            return self.linear(self.embedding(ids)[:, positions.clamp(min=0)])

    torch.manual_seed(0)
    return Gather().eval()


def _ids(seed: int) -> tuple[Any, ...]:
    import torch

    return (torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(seed)),)


POSITIONS = ModelSpec("recipes_positions", _positions, _ids, "", ("int8", "int8-dynamic"))
CALIBRATION_FAILURE = (
    "calibration failed at aten.index.Tensor (node index): IndexError: tensors used as indices "
    "must be long, int, byte or bool tensors"
)


def test_static_int8_that_pt2e_cannot_calibrate_says_so_and_names_the_operator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SME2_CACHE_DIR", str(tmp_path))  # exported, not a recorded failure
    with pytest.raises(ExportError) as refused:
        export_model(POSITIONS, "int8")
    assert str(refused.value) == (
        f"export of recipes_positions[int8] failed at quantize: CalibrationError: "
        f"{CALIBRATION_FAILURE}"
    )


def test_dynamic_int8_takes_the_torchao_route_where_pt2e_cannot_calibrate() -> None:
    """As ExecuTorch's LLM exporter quantizes decoders; the manifest says which quantizer ran and
    why, and the program agrees with the torchao model it was lowered from."""
    artifact = export_model(POSITIONS, "int8-dynamic")
    manifest = _manifest(artifact)
    assert manifest["quantizer"] == (
        "torchao quantize_ on linear layers: int8 dynamic activations, int8 weights per channel "
        f"(PT2E could not calibrate it: {CALIBRATION_FAILURE})"
    )
    assert manifest["reference"] == "the int8-dynamic torchao model (eager)"
    assert artifact.program_error is not None and artifact.program_error.ok


def test_fp16_converts_a_decode_steps_kv_cache_with_the_model() -> None:
    """tiny_llama's decode step in fp16: ``model.half()`` converts its cache buffers too, so the
    program starts from the prompt's keys and values in fp16 and agrees with eager fp16."""
    from dataclasses import replace

    import models  # noqa: F401  (registers the examples)
    from pytest_sme2.export.model_spec import get_model

    spec = replace(get_model("tiny_llama_decode"), dtypes=("fp16",))
    artifact = export_model(spec, "fp16")
    assert artifact.program_error is not None and artifact.program_error.ok
    assert _manifest(artifact)["reference"] == "eager fp16 PyTorch"
    assert [t["dtype"] for t in _manifest(artifact)["outputs"]] == ["float16"]
