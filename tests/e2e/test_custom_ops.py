"""ExecuTorch's LLM custom kernels: a decoder exported the way ExecuTorch's LLM docs recommend for
speed (``export_llm`` with ``model.use_sdpa_with_kv_cache=True``: ``llama::custom_sdpa`` and
``llama::update_cache``; 8da4w linears and a 4-bit embedding, ``quantized_decomposed::
embedding_4bit``) is gated like any program: its prefill and its decode step, registered with
``register_program``, run in the runner with ExecuTorch's own kernel library loaded
(:mod:`pytest_sme2.runner.kernel_libraries`), and the report names ``custom_sdpa`` as one
operator with its share and category.

The decoder is exported for real, once per exporter version (tests/llm_programs.py:
``custom_llama.pte``, dynamic sequence length, so one program serves the 8-token prefill and the
decode step at position 8); kept in the shared cache like the runner's build.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pytest_sme2.errors import RunnerError
from pytest_sme2.records.device import Variant
from pytest_sme2.records.verdict import Status
from pytest_sme2.report.from_files import load_test_dir
from pytest_sme2.runner import Executions, Launch, RunnerCall, build_runner, run_runner
from pytest_sme2.runner.kernel_libraries import (
    custom_operators,
    host_custom_kernels,
    libraries_for,
    refuse_without_kernels,
)
from pytest_sme2.runner.tensors import read_tensors, write_tensors
from tests.llm_programs import PARAMS, PHASES, RecordedProject

#: On the xdist worker of tests/e2e/test_program.py's tests, which take the same programs and
#: recorded project (tests/llm_programs.py): one worker makes them, the other is not left waiting.
pytestmark = pytest.mark.xdist_group("llm-programs")


@pytest.fixture(scope="module")
def custom_llama(llm_programs: Path) -> Path:
    return llm_programs / "custom_llama.pte"


def test_the_program_names_the_custom_operators_and_the_runner_loads_their_kernels(
    custom_llama: Path, tmp_path: Path
) -> None:
    """Without the library the runner says which operators are missing; with it the prefill
    runs, its logits finite, and the runner says what loading the library took."""
    assert custom_operators(custom_llama) == ("llama::custom_sdpa", "llama::update_cache")
    write_tensors(tmp_path / "inputs.tensors", [np.arange(1, 9).reshape(1, 8), np.array([0])])
    runner, plan = build_runner("host"), Executions(runs=2, warmup=0)
    with pytest.raises(RunnerError, match=r"llama::custom_sdpa"):
        run_runner(
            runner, RunnerCall(custom_llama, tmp_path / "inputs.tensors", plan, tmp_path / "bare")
        )
    libraries = libraries_for(custom_llama, host_custom_kernels)
    run = run_runner(
        runner,
        RunnerCall(custom_llama, tmp_path / "inputs.tensors", plan, tmp_path / "loaded"),
        Launch(libraries=libraries),
    )
    assert run.outputs is not None
    (logits,) = read_tensors(run.outputs)
    assert logits.shape[-1] == PARAMS["vocab_size"] and np.isfinite(logits).all()
    timings = json.loads((tmp_path / "loaded/timings.json").read_text())
    assert timings["kernel_libraries_ms"] > 0


def test_prefill_and_decode_with_custom_kernels_are_recorded_then_judged_on_host(
    llm_project: RecordedProject,
) -> None:
    """Both phases recorded, then judged unchanged; each profile holds ``custom_sdpa`` as one
    operator in GEMM (attention) and ``update_cache`` as a cache write, and report.md shows
    them with their shares."""
    for phase in PHASES:
        assert llm_project.again[f"host-custom_llama_{phase}-8da4w"].failure is None
        manifest = llm_project.path / f"artifacts/host/custom_llama_{phase}-8da4w/manifest.json"
        measurement, _ = load_test_dir(manifest)
        (variant,) = measurement.variants.values()
        operators = {op.name: op for op in variant.profile.operators}
        sdpa = operators["native_call_custom_sdpa.out"]
        assert sdpa.category == "GEMM" and 0 < sdpa.share < 1, sdpa
        assert "native_call_update_cache.out" in operators, sorted(operators)
    assert "custom_sdpa" in (llm_project.path / "artifacts/report.md").read_text()


def test_the_decode_step_with_custom_kernels_is_counted_then_judged_on_qemu_sme2(
    llm_project: RecordedProject,
) -> None:
    """The decode step emulated: instructions recorded, then judged unchanged; SME2-on and
    SME2-off outputs alike; ``custom_sdpa`` one operator in GEMM with its share of the counted
    instructions."""
    again = llm_project.again["qemu-sme2-custom_llama_decode-8da4w"]
    judged, measurement = {v.gate: v for v in again.verdicts}, again.measurement
    assert measurement is not None
    assert measurement.parity is not None and measurement.parity.ok, measurement.parity
    for variant in (Variant.ON, Variant.OFF):
        assert judged[f"instructions[{variant}]"].status is Status.PASS, judged
        operators = {op.name: op for op in measurement.variants[variant].profile.operators}
        sdpa = operators["native_call_custom_sdpa.out"]
        assert sdpa.category == "GEMM" and 0 < sdpa.share < 1, sdpa


def test_a_device_that_cannot_load_the_kernels_says_so_in_one_line(
    custom_llama: Path, tmp_path: Path
) -> None:
    """mac and android run the plugin's own runner unless given the user's: a program calling
    ``llama::`` operators is refused there in one line saying how to give a runner with them;
    a program without them (its operator names gone) is not."""
    with pytest.raises(RunnerError) as refused:
        refuse_without_kernels(custom_llama, "mac", "macOS")
    message = str(refused.value)
    assert "\n" not in message, message
    assert message.startswith(f"{custom_llama} calls ExecuTorch's LLM custom operators (")
    assert "llama::custom_sdpa, llama::update_cache" in message
    assert "--sme2-runner-on=PATH" in message
    plain = tmp_path / "plain.pte"
    plain.write_bytes(custom_llama.read_bytes().replace(b"llama::", b"other::"))
    assert custom_operators(plain) == ()
    refuse_without_kernels(plain, "mac", "macOS")
