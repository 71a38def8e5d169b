"""ExecuTorch's LLM custom kernels: a decoder exported the way ExecuTorch's LLM docs recommend for
speed (``export_llm`` with ``model.use_sdpa_with_kv_cache=True``: ``llama::custom_sdpa`` and
``llama::update_cache``; 8da4w linears and a 4-bit embedding, ``quantized_decomposed::
embedding_4bit``) is gated like any program: its prefill and its decode step, registered with
``register_program``, run in the runner with ExecuTorch's own kernel library loaded
(:mod:`pytest_sme2.runner.kernel_libraries`), and the report names ``custom_sdpa`` as one
operator with its share and category.

The decoder is exported for real, once per exporter version: dim 64, 2 layers, vocabulary 512,
32 positions, dynamic sequence length (one program serves the 8-token prefill and the decode step
at position 8); kept in the shared cache like the runner's build.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pytest_sme2.cache import cached_dir, content_key
from pytest_sme2.errors import RunnerError
from pytest_sme2.export.key import package_versions
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
from tests.test_program import CACHE, PARAMS, _run, _session

pytest_plugins = ["pytester"]

#: This module's tests on one xdist worker (the outer session distributes by ``loadgroup``,
#: which the plugin chooses for a fleet with a real device): from an empty cache, a second
#: worker reaching one of them sat idle while the first exported ``custom_llama`` (38 s).
pytestmark = pytest.mark.xdist_group("custom-llama")

#: A seeded checkpoint for the exporter: without one it leaves the norms' weights uninitialised
#: (every logit came out -inf, see tests/test_program.py).
CHECKPOINT = """
import json
import sys

import torch
from executorch.examples.models.llama.llama_transformer import construct_transformer
from executorch.examples.models.llama.model_args import ModelArgs

torch.manual_seed(0)
args = ModelArgs(**json.load(open(sys.argv[1])), max_seq_len=32, max_context_len=32)
torch.save(construct_transformer(args).state_dict(), sys.argv[2])
"""

#: ``python -m executorch.extension.llm.export.export_llm`` with what ExecuTorch's LLM docs
#: recommend for speed: the custom SDPA and KV cache (``use_sdpa_with_kv_cache``), 8da4w linears,
#: 4-bit embeddings; dynamic sequence length, so one program serves the prefill and the decode.
OVERRIDES = (
    "model.use_kv_cache=True",
    "model.use_sdpa_with_kv_cache=True",
    "model.enable_dynamic_shape=True",
    "backend.xnnpack.enabled=True",
    "quantization.qmode=8da4w",
    "quantization.group_size=32",
    "quantization.embedding_quantize='4,32'",
    "export.max_seq_length=32",
    "export.max_context_length=32",
)

PROMPT = 8

#: The prefill (8 tokens at position 0) and the decode step (1 token at position 8).
INPUTS = f"""
import numpy as np


def custom_prefill(seed):
    tokens = (np.arange({PROMPT}, dtype=np.int64) * 37 + seed) % 500 + 1
    return (tokens.reshape(1, {PROMPT}), np.array([0], dtype=np.int64))


def custom_decode(seed):
    return (np.array([[seed % 500 + 1]], dtype=np.int64), np.array([{PROMPT}], dtype=np.int64))
"""


def _export(out: Path) -> None:
    params, checkpoint, pte = out / "params.json", out / "weights.pth", out / "custom_llama.pte"
    params.write_text(json.dumps(PARAMS))
    export = ["-m", "executorch.extension.llm.export.export_llm"]
    export += [f"base.params={params}", f"base.checkpoint={checkpoint}", *OVERRIDES]
    export += [f"export.output_dir={out}", f"export.output_name={pte}"]
    for arguments in (["-c", CHECKPOINT, str(params), str(checkpoint)], export):
        done = subprocess.run(
            [sys.executable, *arguments], cwd=out, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-3000:]
    checkpoint.unlink()


@pytest.fixture(scope="module")
def custom_llama() -> Path:
    """The exported program, once per exporter version and script (in the shared cache)."""
    versions = json.dumps(package_versions(), sort_keys=True)
    key = content_key(CHECKPOINT, *OVERRIDES, json.dumps(PARAMS), versions)
    return cached_dir(CACHE / "tests" / f"custom-llama-{key}", _export) / "custom_llama.pte"


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


#: The tokens of each phase, whose inputs are ``custom_<phase>`` (:data:`INPUTS`).
PHASES = {"prefill": PROMPT, "decode": 1}


def _register(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    pte: Path,
    phases: tuple[str, ...] = tuple(PHASES),
) -> None:
    """An inner session registering ``phases`` of ``pte`` as ``custom_llama_<phase>`` (8da4w)."""
    register = "from pytest_sme2 import register_program\n"
    for phase in phases:
        register += (
            f"register_program('custom_llama_{phase}', pte={str(pte)!r}, "
            f"inputs=custom_{phase}, dtype='8da4w', tokens={PHASES[phase]})\n"
        )
    _session(pytester, monkeypatch, INPUTS + register)


def test_prefill_and_decode_with_custom_kernels_are_recorded_then_judged_on_host(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, custom_llama: Path
) -> None:
    """Both phases recorded, then judged unchanged; each profile holds ``custom_sdpa`` as one
    operator in GEMM (attention) and ``update_cache`` as a cache write, and report.md shows
    them with their shares."""
    _register(pytester, monkeypatch, custom_llama)
    _run(pytester, "--sme2-update-baselines").assert_outcomes(passed=2)
    # judged unchanged in structure and operators (tests.test_program.FAST opens latency wide:
    # the decode step runs in 0.02 ms, where an unchanged rerun read 13 % slower)
    _run(pytester).assert_outcomes(passed=2)
    report = (pytester.path / "artifacts/report.md").read_text()
    for phase in ("prefill", "decode"):
        manifest = pytester.path / f"artifacts/host/custom_llama_{phase}-8da4w/manifest.json"
        measurement, _ = load_test_dir(manifest)
        (variant,) = measurement.variants.values()
        operators = {op.name: op for op in variant.profile.operators}
        sdpa = operators["native_call_custom_sdpa.out"]
        assert sdpa.category == "GEMM" and 0 < sdpa.share < 1, sdpa
        assert "native_call_update_cache.out" in operators, sorted(operators)
    assert "custom_sdpa" in report


def test_the_decode_step_with_custom_kernels_is_counted_then_judged_on_qemu_sme2(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    custom_llama: Path,
    qemu_device: object,
) -> None:
    """The same program emulated, with the aarch64 wheel's kernels and PyPI's aarch64 torch
    libraries: instructions recorded, then judged unchanged (read back from the stored counts,
    whose key holds those libraries); SME2-on and SME2-off outputs alike; ``custom_sdpa`` one
    operator in GEMM with its share of the counted instructions.

    The decode step alone: the prefill is the same program, the same kernels, other inputs (both
    phases are judged on host, above), and each emulated run spends about a minute starting
    torch's libraries before anything is counted — from an empty cache both phases took this
    test 250 s on a 2-core VM, the longest of the suite."""
    _register(pytester, monkeypatch, custom_llama, phases=("decode",))
    device = "--sme2-device=qemu-sme2"
    # a first count takes about a minute per variant: torch's libraries, loaded and initialised
    # before any counted call, are left out of qemu's exec log (exec_filter)
    _run(pytester, device, "--sme2-update-baselines", timeout_s=1800).assert_outcomes(passed=1)
    _run(pytester, device, timeout_s=900).assert_outcomes(passed=1)  # read back: stored counts
    manifest = pytester.path / "artifacts/qemu-sme2/custom_llama_decode-8da4w/manifest.json"
    measurement, verdicts = load_test_dir(manifest)
    judged = {v.gate: v for v in verdicts}
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
