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
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pytest_sme2.cache import cache_root, cached_dir, content_key
from pytest_sme2.errors import RunnerError
from pytest_sme2.export.key import package_versions
from pytest_sme2.judge.verdict import Status
from pytest_sme2.report.rundir import load_test_dir
from pytest_sme2.run.devices.base import Variant
from pytest_sme2.runner import RunPlan, build_runner, run_runner
from pytest_sme2.runner.kernel_libraries import (
    custom_operators,
    host_custom_kernels,
    libraries_for,
    refuse_without_kernels,
)
from pytest_sme2.runner.tensors import read_tensors, write_tensors

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
#: Resolved at import, before pytester points HOME elsewhere: inner runs reuse the real caches.
CACHE = cache_root()

PARAMS = {
    "dim": 64,
    "n_layers": 2,
    "n_heads": 4,
    "n_kv_heads": 2,
    "vocab_size": 512,
    "multiple_of": 32,
    "norm_eps": 1e-5,
    "rope_theta": 10000.0,
}

#: What ``python -m executorch.extension.llm.export.export_llm base.params=…
#: model.use_kv_cache=True model.use_sdpa_with_kv_cache=True backend.xnnpack.enabled=True
#: quantization.qmode=8da4w quantization.group_size=32 quantization.embedding_quantize=4,32 …``
#: builds, with a seeded checkpoint (without one the norms' weights are uninitialised memory).
EXPORT = """
import json
import sys

import torch
from executorch.examples.models.llama.export_llama_lib import export_llama
from executorch.examples.models.llama.llama_transformer import construct_transformer
from executorch.examples.models.llama.model_args import ModelArgs
from executorch.extension.llm.export.config.llm_config import LlmConfig

params, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
args = ModelArgs(**json.load(open(params)), max_seq_len=32, max_context_len=32)
torch.save(construct_transformer(args).state_dict(), f"{out}/weights.pth")
config = LlmConfig()
config.base.params = params
config.base.checkpoint = f"{out}/weights.pth"
config.model.use_kv_cache = True
config.model.use_sdpa_with_kv_cache = True
config.model.enable_dynamic_shape = True
config.backend.xnnpack.enabled = True
config.quantization.qmode = "8da4w"
config.quantization.group_size = 32
config.quantization.embedding_quantize = "4,32"
config.export.max_seq_length = 32
config.export.max_context_length = 32
config.export.output_dir = out
config.export.output_name = f"{out}/custom_llama.pte"
export_llama(config)
"""

PROMPT = 8

#: The prefill (8 tokens at position 0) and the decode step (1 token at position 8).
INPUTS = f"""
import numpy as np


def prefill_inputs(seed):
    tokens = (np.arange({PROMPT}, dtype=np.int64) * 37 + seed) % 500 + 1
    return (tokens.reshape(1, {PROMPT}), np.array([0], dtype=np.int64))


def decode_inputs(seed):
    return (np.array([[seed % 500 + 1]], dtype=np.int64), np.array([{PROMPT}], dtype=np.int64))
"""

TEST = """
def test_model(sme2_measurement, sme2_judge):
    sme2_judge(sme2_measurement)
"""

FAST = ["--sme2-runs=6", "--sme2-rounds=2", "--sme2-traced-runs=2", "--sme2-warmup=1"]


def _export(out: Path) -> None:
    (out / "params.json").write_text(json.dumps(PARAMS))
    done = subprocess.run(
        [sys.executable, "-c", EXPORT, str(out / "params.json"), str(out)],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (out / "weights.pth").unlink()


@pytest.fixture(scope="module")
def custom_llama() -> Path:
    """The exported program, once per exporter version and script (in the shared cache)."""
    versions = json.dumps(package_versions(), sort_keys=True)
    key = content_key(EXPORT, json.dumps(PARAMS), versions)
    return cached_dir(CACHE / "tests" / f"custom-llama-{key}", _export) / "custom_llama.pte"


def test_the_program_names_the_custom_operators_and_the_runner_loads_their_kernels(
    custom_llama: Path, tmp_path: Path
) -> None:
    """Without the library the runner says which operators are missing; with it the prefill
    runs, its logits finite, and the runner says what loading the library took."""
    assert custom_operators(custom_llama) == ("llama::custom_sdpa", "llama::update_cache")
    write_tensors(tmp_path / "inputs.tensors", [np.arange(1, 9).reshape(1, 8), np.array([0])])
    runner, plan = build_runner("host"), RunPlan(runs=2, warmup=0)
    with pytest.raises(RunnerError, match=r"llama::custom_sdpa"):
        run_runner(
            runner, custom_llama, tmp_path / "bare", plan, inputs=tmp_path / "inputs.tensors"
        )
    libraries = libraries_for(custom_llama, host_custom_kernels())
    run = run_runner(
        runner,
        custom_llama,
        tmp_path / "loaded",
        plan,
        inputs=tmp_path / "inputs.tensors",
        libraries=libraries,
    )
    assert run.outputs is not None
    (logits,) = read_tensors(run.outputs)
    assert logits.shape[-1] == PARAMS["vocab_size"] and np.isfinite(logits).all()
    timings = json.loads((tmp_path / "loaded/timings.json").read_text())
    assert timings["kernel_libraries_ms"] > 0


def _session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, pte: Path) -> None:
    monkeypatch.setenv("SME2_CACHE_DIR", str(CACHE))
    monkeypatch.setenv("PYTHONPATH", f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    register = f"""
        from pytest_sme2 import register_program

        register_program(
            "custom_llama_prefill", pte={str(pte)!r}, inputs=prefill_inputs, dtype="8da4w",
            tokens={PROMPT},
        )
        register_program(
            "custom_llama_decode", pte={str(pte)!r}, inputs=decode_inputs, dtype="8da4w",
            tokens=1,
        )
        """
    pytester.makeconftest(INPUTS + textwrap.dedent(register))
    pytester.makepyfile(test_programs=TEST)


def _run(pytester: pytest.Pytester, *args: str, timeout_s: float = 900) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        *FAST,
        f"--sme2-baseline-dir={pytester.path / 'baselines'}",
        f"--sme2-artifacts={pytester.path / 'artifacts'}",
        *args,
        timeout=timeout_s,
    )


def test_prefill_and_decode_with_custom_kernels_are_recorded_then_judged_on_host(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, custom_llama: Path
) -> None:
    """Both phases recorded, then judged unchanged; each profile holds ``custom_sdpa`` as one
    operator in GEMM (attention) and ``update_cache`` as a cache write, and report.md shows
    them with their shares."""
    _session(pytester, monkeypatch, custom_llama)
    _run(pytester, "--sme2-update-baselines").assert_outcomes(passed=2)
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


def test_prefill_and_decode_with_custom_kernels_are_counted_then_judged_on_qemu_sme2(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    custom_llama: Path,
    qemu_device: object,
) -> None:
    """The same program emulated, with the aarch64 wheel's kernels and PyPI's aarch64 torch
    libraries: instructions recorded, then judged unchanged (read back from the stored counts,
    whose key holds those libraries); SME2-on and SME2-off outputs alike; ``custom_sdpa`` one
    operator in GEMM with its share of the counted instructions."""
    _session(pytester, monkeypatch, custom_llama)
    device = "--sme2-device=qemu-sme2"
    # a first count takes minutes: qemu's exec log covers the dynamic loader binding libtorch_cpu
    # (~90,000 symbol relocations) and torch's operator registrations, before any counted call
    _run(pytester, device, "--sme2-update-baselines", timeout_s=3600).assert_outcomes(passed=2)
    _run(pytester, device, timeout_s=900).assert_outcomes(passed=2)  # read back: stored counts
    for phase in ("prefill", "decode"):
        manifest = pytester.path / f"artifacts/qemu-sme2/custom_llama_{phase}-8da4w/manifest.json"
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
