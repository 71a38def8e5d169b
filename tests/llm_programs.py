"""Two programs exported by ExecuTorch's own LLM exporter, for the tests of programs from other
pipelines (tests/e2e/test_program.py) and of ExecuTorch's LLM custom kernels
(tests/e2e/test_custom_ops.py).

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

And one user project registers them all (:func:`recorded_project`): recorded by one session on
the host and qemu-sme2, then judged again unchanged on the objects; each test module checks its
part of them (six sessions once).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pytest_sme2.cache import cached_dir, content_key
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.export.key import package_versions
from pytest_sme2.judge.check import Checked
from pytest_sme2.runner import Executions, RunnerCall, build_runner, run_runner
from pytest_sme2.runner.tensors import read_tensors, write_tensors
from tests.inner import INNER_TEST, SHARED_CACHE, InnerProject
from tests.judge.host_case import host_device
from tests.judge.project_cases import judge_cases
from tests.session.contexts import project_settings

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

#: A short plan, and latency judged wide open, by option dest: these programs' inferences take
#: 0.02–0.06 ms, and beside the other xdist worker a decode step read 10.1 % slower against a
#: reference workload that moved 2 % (a fresh-clone CI run, 2-core EPYC). Their tests are of
#: programs from other pipelines — labels, structure, instructions, outputs — not of the latency
#: gate, which tests/session/test_plugin.py and benchmarks/gating_quality.py cover.
FAST_OPTIONS = {
    "sme2_runs": "6",
    "sme2_rounds": "2",
    "sme2_traced_runs": "2",
    "sme2_warmup": "1",
    "sme2_latency_tolerance": "100",
}
#: :data:`FAST_OPTIONS` on a command line.
FAST = tuple(f"--{dest.replace('_', '-')}={value}" for dest, value in FAST_OPTIONS.items())

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
    call = RunnerCall(
        out / "tiny_llama.pte", out / "inputs.tensors", Executions(runs=1, warmup=0), out / "run"
    )
    run = run_runner(build_runner("host"), call)
    assert run.outputs is not None
    np.save(out / "logits.npy", read_tensors(run.outputs)[0])


#: The project's devices: the host and the emulated SME2 CPU, one fleet.
DEVICES = ("host", "qemu-sme2")

#: The custom decoder's prompt: its prefill's tokens, and the decode step's position.
PROMPT = 8
#: The tokens of each of its phases, whose inputs are ``custom_<phase>`` (:data:`INPUTS`).
PHASES = {"prefill": PROMPT, "decode": 1}

#: The project's inputs: the standard decode step's, one token at position 0 (``forward(
#: tokens[1, 1], input_pos[1])``), and the same as floats, the wrong type; the custom decoder's
#: prefill (8 tokens at position 0) and decode step (1 token at position 8).
INPUTS = f"""
import numpy as np


def decode_inputs(seed):
    return (np.array([[seed % 500 + 1]], dtype=np.int64), np.array([0], dtype=np.int64))


def float_tokens(seed):
    return (np.array([[1.0]], dtype=np.float32), np.array([0], dtype=np.int64))


def custom_prefill(seed):
    tokens = (np.arange({PROMPT}, dtype=np.int64) * 37 + seed) % 500 + 1
    return (tokens.reshape(1, {PROMPT}), np.array([0], dtype=np.int64))


def custom_decode(seed):
    return (np.array([[seed % 500 + 1]], dtype=np.int64), np.array([{PROMPT}], dtype=np.int64))
"""

#: The emulated case the project leaves out (``-k``): the custom decoder's prefill is the same
#: program and kernels as its decode step with other inputs (both phases are judged on host),
#: and each emulated run of it spends about a minute starting torch's libraries before anything
#: is counted — from an empty cache both phases took 250 s on a 2-core VM, the longest test of
#: the suite.
NOT_EMULATED = "qemu-sme2-custom_llama_prefill"


def registered(programs: Path) -> str:
    """The project's registrations: the standard decode step as ``tiny_llama`` under two labels
    (8da4w, and optimum-executorch's 8da8w, no built-in dtype) and, given the outputs it must
    give, as ``tiny_llama_ref`` (the default label, ``program``); both phases of the custom
    decoder as ``custom_llama_<phase>`` (8da4w, with their tokens)."""
    pte, logits = str(programs / "tiny_llama.pte"), str(programs / "logits.npy")
    custom = str(programs / "custom_llama.pte")
    return f"""
from pytest_sme2 import register_program

for label in ("8da4w", "8da8w"):
    register_program("tiny_llama", pte={pte!r}, inputs=decode_inputs, dtype=label)
register_program(
    "tiny_llama_ref", pte={pte!r}, inputs=decode_inputs,
    expected_outputs=lambda seed: (np.load({logits!r}),),
)
for phase, tokens in {PHASES!r}.items():
    register_program(
        f"custom_llama_{{phase}}", pte={custom!r}, inputs=globals()[f"custom_{{phase}}"],
        dtype="8da4w", tokens=tokens,
    )
"""


@dataclass(frozen=True)
class RecordedProject:
    """A user's project of both programs, recorded by its session (:func:`recorded_project`)."""

    path: Path
    #: each case the session recorded, run again unchanged and judged on the objects, by case id
    #: (``host-tiny_llama-8da4w``)
    again: Mapping[str, Checked]


def recorded_project(path: Path, programs: Path) -> RecordedProject:
    """A user's project in ``path`` of :func:`registered`'s cases on :data:`DEVICES` (but
    :data:`NOT_EMULATED`), recorded by its session (``--sme2-update-baselines``), which passes
    and keeps its history; then its host baselines lose their time records, as the committed
    host baselines have none (a 0.1 ms program's time on a shared VM is noise), and each case is
    run again unchanged on the objects, as the project's next session would: measured afresh on
    the devices that session prepares and judged against the recorded baselines. On qemu-sme2
    the custom kernels are the aarch64 wheel's, with PyPI's aarch64 torch libraries, and the
    judging again reads back the stored counts, whose key holds those libraries."""
    project = InnerProject(path, INPUTS + registered(programs), test_programs=INNER_TEST)
    # a first count of the custom decoder takes about a minute per variant: torch's libraries,
    # loaded and initialised before any counted call, are left out of qemu's exec log
    first = project.run(
        *FAST,
        f"--sme2-device={','.join(DEVICES)}",
        f"--sme2-baseline-dir={project.path / 'baselines'}",
        f"--sme2-artifacts={project.path / 'artifacts'}",
        f"--sme2-history={project.path / 'history'}",
        "--sme2-update-baselines",
        "-k",
        f"not {NOT_EMULATED}",
        timeout_s=1800,
    )
    first.assert_outcomes(passed=9, deselected=1)
    for baseline in (project.path / "baselines/host").iterdir():
        stored = json.loads(baseline.read_text())
        stored["machines"] = {}
        baseline.write_text(json.dumps(stored, indent=2))
    # the session's options by dest, :data:`tests.inner.INNER_DEFAULTS`' among them
    again = project_settings(
        project.path,
        **FAST_OPTIONS,
        sme2_judge_disturbed=True,
        sme2_share_tolerance="100",
        sme2_device=",".join(DEVICES),
        sme2_baseline_dir=str(project.path / "baselines"),
    )
    emulated = QemuSme2Device.from_options(lambda _: None)
    emulated.prepare()
    devices = {"host": host_device(), "qemu-sme2": emulated}
    selected = judge_cases(
        project.path, again, devices, selected=lambda case: NOT_EMULATED not in case.id
    )
    return RecordedProject(project.path, selected)
