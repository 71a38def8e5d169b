"""Two programs exported by ExecuTorch's own LLM exporter, for the tests of programs from other
pipelines (tests/test_program.py) and of ExecuTorch's LLM custom kernels (tests/test_custom_ops.py).

Both are the same tiny llama (dim 64, 2 layers, vocabulary 512, 32 positions, seeded weights),
8da4w with groups of 32, XNNPACK, KV cache on, exported with the installed wheel's ``export_llm``
configuration (what ``python -m executorch.extension.llm.export.export_llm base.params=…
model.use_kv_cache=True backend.xnnpack.enabled=True quantization.qmode=8da4w …`` builds):

- ``tiny_llama.pte``: the standard attention ops, static shapes (the decode step);
- ``custom_llama.pte``: what ExecuTorch's LLM docs recommend for speed, ``model.
  use_sdpa_with_kv_cache=True`` (``llama::custom_sdpa``, ``llama::update_cache``) and 4-bit
  embeddings (``quantized_decomposed::embedding_4bit``), with a dynamic sequence length so one
  program serves an 8-token prefill and the decode step at position 8.

One process exports both (the exporter's imports cost ~10 s) into one shared cache entry, keyed by
the script, the parameters and the exporting packages' versions: from an empty cache the two
modules each exported their own, 61 s and 65 s on a 2-core EPYC.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from pytest_sme2.cache import cached_dir, content_key
from pytest_sme2.export.key import package_versions
from pytest_sme2.runner import RunPlan, build_runner, run_runner
from pytest_sme2.runner.tensors import read_tensors, write_tensors
from tests.inner import SHARED_CACHE

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

#: A short plan, and latency judged wide open: these programs' inferences take 0.02–0.06 ms, and
#: beside the other xdist worker a decode step read 10.1 % slower against a reference workload
#: that moved 2 % (a fresh-clone CI run, 2-core EPYC). Their tests are of programs from other
#: pipelines — labels, structure, instructions, outputs — not of the latency gate, which
#: tests/test_plugin.py and benchmarks/gating_quality.py cover.
FAST = (
    "--sme2-runs=6",
    "--sme2-rounds=2",
    "--sme2-traced-runs=2",
    "--sme2-warmup=1",
    "--sme2-latency-tolerance=100",
)

#: Both programs in one process. Without a checkpoint the exporter leaves buffers (the norms'
#: weights) as uninitialised memory (``to_empty``) and every logit came out -inf, so the script
#: writes a seeded checkpoint first.
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
programs = (("tiny_llama.pte", False, None), ("custom_llama.pte", True, "4,32"))
for name, custom, embeddings in programs:
    config = LlmConfig()
    config.base.params = params
    config.base.checkpoint = f"{out}/weights.pth"
    config.model.use_kv_cache = True
    config.model.use_sdpa_with_kv_cache = custom
    config.model.enable_dynamic_shape = custom
    config.backend.xnnpack.enabled = True
    config.quantization.qmode = "8da4w"
    config.quantization.group_size = 32
    config.quantization.embedding_quantize = embeddings
    config.export.max_seq_length = 32
    config.export.max_context_length = 32
    config.export.output_dir = out
    config.export.output_name = f"{out}/{name}"  # a name ending in .pte is the path verbatim
    export_llama(config)
"""


def exported_llm_programs() -> Path:
    """The directory of both programs and ``logits.npy``, ``tiny_llama.pte``'s outputs for one
    token at position 0: a shared cache entry, exported on first use."""
    versions = json.dumps(package_versions(), sort_keys=True)
    key = content_key(EXPORT, json.dumps(PARAMS, sort_keys=True), versions)
    return cached_dir(SHARED_CACHE / "tests" / f"llm-programs-{key}", _export)


def _export(out: Path) -> None:
    (out / "params.json").write_text(json.dumps(PARAMS))
    done = subprocess.run(
        [sys.executable, "-c", EXPORT, str(out / "params.json"), str(out)],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (out / "weights.pth").unlink()
    write_tensors(out / "inputs.tensors", [np.array([[1]]), np.array([0])])
    run = run_runner(
        build_runner("host"),
        out / "tiny_llama.pte",
        out / "run",
        RunPlan(runs=1, warmup=0),
        inputs=out / "inputs.tensors",
    )
    assert run.outputs is not None
    np.save(out / "logits.npy", read_tensors(run.outputs)[0])
