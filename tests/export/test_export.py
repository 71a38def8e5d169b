"""The export stage: real exports, real numerics through the native runner, and the cache.

The full model × dtype matrix uses the real default cache (slow once, warm afterwards); the cache
behaviours use a per-session cache and a tiny model in a module of its own, so a subprocess can
show what a warm hit costs and that it never lowers (imports no executorch). What the key sees of
a model — other modules, weights files, environment variables — is tested in test_export_key.py.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

import models  # noqa: F401  (registers the examples)
from pytest_sme2.analysis.numerics import DegenerateOutputWarning
from pytest_sme2.analysis.tolerances import TOLERANCES
from pytest_sme2.errors import STAGES, ConfigError, ExportError, NumericsError
from pytest_sme2.export.exporter import (
    MANIFEST_NAME,
    Artifact,
    artifact_dir,
    export_model,
    load_cached,
)
from pytest_sme2.export.key import artifact_key
from pytest_sme2.export.model_spec import ModelSpec, get_model, registered_models
from pytest_sme2.runner.tensors import read_tensors
from tests.inner import with_host_runner
from tests.known_failures import example_cases, expect_known

REPO = Path(__file__).resolve().parents[2]

#: A small conv + linear model in a module of its own, which the cache tests edit and re-import.
LAZY_MODEL = '''
"""A small conv + linear model whose module imports torch only to build it."""


def build():
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Flatten(),
            torch.nn.Linear(8 * 16 * 16, 10),
        ).eval()


def inputs(seed):
    import torch

    return (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(seed)),)
'''

#: Loads LAZY_MODEL from argv[1], exports it into the cache argv[2], reports what it imported.
#: What a warm hit costs is measured by ``benchmarks/export_cache.py``, not asserted here.
EXPORT_SCRIPT = """
import json, sys
from pathlib import Path
import torch
sys.path.insert(0, sys.argv[1])
import lazy_model
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.model_spec import ModelSpec
spec = ModelSpec("lazy_model", lazy_model.build, lazy_model.inputs, "lazy")
artifact = export_model(spec, "fp32", cache_dir=Path(sys.argv[2]))
print(json.dumps({
    "key": artifact.key,
    "executorch": any(name.startswith("executorch") for name in sys.modules),
    "ok": artifact.program_error.ok,
}))
"""


def _lazy_spec(directory: Path) -> ModelSpec:
    """LAZY_MODEL written to ``directory`` and imported under a module name of its own."""
    import importlib.util

    path = directory / "lazy_model.py"
    if not path.exists():
        path.write_text(LAZY_MODEL)
    loader = importlib.util.spec_from_file_location(f"lazy_model_{abs(hash(directory))}", path)
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return ModelSpec("lazy_model", module.build, module.inputs, "lazy")


def _run_script(model_dir: Path, cache: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", EXPORT_SCRIPT, str(model_dir), str(cache)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _report(proc: subprocess.Popen[str]) -> dict[str, object]:
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-2000:]
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def export_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory for this test session (the runner build stays in the default cache)."""
    return tmp_path_factory.mktemp("exports")


# --- the full matrix, in the real cache ---------------------------------------------------------


MATRIX = example_cases(
    spec
    for spec in registered_models()
    if spec.factory.__module__.startswith("models.")  # the examples, not a test's own
)


@pytest.mark.parametrize(("spec", "dtype"), MATRIX)
def test_every_model_and_dtype_exports_with_checked_numerics(spec: ModelSpec, dtype: str) -> None:
    try:
        artifact = export_model(spec, dtype)
    except ExportError as err:
        assert (err.model, err.dtype) == (spec.name, dtype)
        assert err.stage in STAGES
        raise expect_known(err) from None
    assert artifact.program_error is not None and artifact.program_error.ok
    assert artifact.pte.stat().st_size > 0 and artifact.etrecord.stat().st_size > 0
    manifest = json.loads((artifact.directory / MANIFEST_NAME).read_text())
    inputs = read_tensors(artifact.inputs)
    assert [list(t.shape) for t in inputs] == [i["shape"] for i in manifest["inputs"]]
    assert [str(t.dtype) for t in inputs] == [i["dtype"] for i in manifest["inputs"]]
    # floating inputs in the program's precision; token ids and positions stay integers
    example = spec.example_inputs(0)
    floating = "float16" if dtype == "fp16" else "float32"
    assert [i["dtype"] for i in manifest["inputs"]] == [
        floating if t.is_floating_point() else str(t.dtype).removeprefix("torch.") for t in example
    ]
    expected = read_tensors(artifact.expected_outputs)
    assert [list(t.shape) for t in expected] == [o["shape"] for o in manifest["outputs"]]
    assert manifest["versions"] == dict(artifact.versions)
    assert set(artifact.timings_s) <= set(STAGES)
    # Both numbers, each with what it compared: the program against the eager model it was
    # lowered from (judged), that model against eager fp32 (recorded) where they differ.
    program, quantization = artifact.program_error, artifact.quantization_error
    assert program.reference == manifest["reference"] and artifact.degenerate is None
    if dtype == "fp32":
        assert program.reference == "eager fp32 PyTorch" and quantization is None
    else:
        assert quantization is not None and math.isfinite(quantization.max_abs)
        assert quantization.reference == f"{program.reference} vs eager fp32 PyTorch"
        expected_reference = {"fp16": "eager fp16 PyTorch", "8da4w": "the 8da4w torchao model"}
        assert expected_reference.get(dtype, "converted") in program.reference
    if dtype == "int8":  # static: judged in output quantization steps
        assert program.max_steps is not None and program.max_steps <= program.tolerance_steps


def test_vit_fp16_layernorm_bug_is_caught_and_cached() -> None:
    """ExecuTorch 1.5.1's portable fp16 LayerNorm is wrong at width 256: the program runs
    without error and returns wrong numbers. The export must refuse it, with the numbers."""
    spec = get_model("vit_tiny")
    with pytest.raises(NumericsError) as caught:
        export_model(spec, "fp16")
    err = caught.value
    assert (err.model, err.dtype, err.stage) == ("vit_tiny", "fp16", "numerics")
    assert "max rel err" in str(err) or "NaN/inf" in str(err)
    artifact = load_cached(spec, "fp16")
    assert artifact is not None and artifact.program_error is not None
    assert not artifact.program_error.ok
    assert artifact.program_error.max_rel > 10 * TOLERANCES["fp16"].rel


def _layer_norm(width: int) -> ModelSpec:
    def build() -> object:
        import torch

        return torch.nn.LayerNorm(width).eval()

    def inputs(seed: int) -> tuple[object, ...]:
        import torch

        generator = torch.Generator().manual_seed(seed)
        return (torch.randn(1, 197, width, generator=generator),)

    return ModelSpec(f"layer_norm_{width}", build, inputs, "")


@pytest.mark.parametrize("width", [255, 256])
def test_fp16_layernorm_is_judged_by_its_numbers(width: int, export_cache: Path) -> None:
    """The same bug in isolation: the portable fp16 LayerNorm is right up to width 255 and
    wrong from 256 on. If ExecuTorch fixes it, 256 passes and this test must find another
    known-bad program: the point is that a silently wrong program is refused."""
    spec = _layer_norm(width)
    if width < 256:
        artifact = export_model(spec, "fp16", cache_dir=export_cache)
        assert artifact.program_error is not None and artifact.program_error.ok
    else:
        with pytest.raises(NumericsError, match=r"layer_norm_256\[fp16\] failed at numerics"):
            export_model(spec, "fp16", cache_dir=export_cache)


def test_etrecord_lets_inspector_name_delegated_events(tmp_path: Path) -> None:
    """The ETRecord beside the .pte maps a real ETDump's XNNPACK events to their backend."""
    from executorch.devtools import Inspector  # slow to import: only where it is used

    from pytest_sme2.runner import Executions, RunnerCall, build_runner, run_runner

    artifact = export_model(get_model("toy_cnn"), "fp32")
    plan = Executions(runs=1, warmup=0, traced=True)
    result = run_runner(
        build_runner("host"), RunnerCall(artifact.pte, artifact.inputs, plan, tmp_path)
    )
    frame = Inspector(
        etdump_path=str(result.etdump), etrecord=str(artifact.etrecord)
    ).to_dataframe()
    delegated = frame[frame["is_delegated_op"]]
    assert not delegated.empty
    assert set(delegated["delegate_backend_name"]) == {"XnnpackBackend"}
    assert delegated["event_name"].str.startswith("Convolution").any()


# --- what the numbers mean ---------------------------------------------------------------------


def _signed_linear() -> object:
    """One linear layer whose weights are ±0.05: per-channel symmetric int8 quantizes each to
    ±127, so the test knows the bytes the program stores for them."""
    import torch

    signs = torch.randint(0, 2, (10, 256), generator=torch.Generator().manual_seed(0)) * 2 - 1
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(256, 10))
    with torch.no_grad():
        model[1].weight.copy_(0.05 * signs)
        model[1].bias.zero_()
    return model.eval()


def _image_16(seed: int) -> tuple[object, ...]:
    import torch

    return (torch.randn(1, 1, 16, 16, generator=torch.Generator().manual_seed(seed)),)


SIGNED_LINEAR = ModelSpec("signed_linear", _signed_linear, _image_16, "")


@pytest.fixture(scope="module")
def int8_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two caches holding the same int8 export, unchecked: as exported, and with the .pte's
    weights negated after lowering (every stored ±127 flipped), a program that no longer
    computes the graph it was lowered from."""
    intact, tampered = (tmp_path_factory.mktemp(name) for name in ("intact", "tampered"))
    artifact = export_model(SIGNED_LINEAR, "int8", cache_dir=intact, check_numerics=False)
    shutil.copytree(artifact.directory, tampered / artifact.directory.name)
    pte = tampered / artifact.directory.name / artifact.pte.name
    data = bytearray(pte.read_bytes())
    import torch

    weights = _signed_linear()[1].weight.detach()  # type: ignore[index]
    for row in torch.where(weights > 0, 127, -127).to(torch.int8).numpy():
        at = bytes(data).find(row.tobytes())
        assert at >= 0, "the program no longer stores the int8 weights as they were quantized"
        data[at : at + row.size] = (-row).tobytes()
    pte.write_bytes(bytes(data))
    return intact, tampered


def test_a_tampered_program_fails_the_program_check_not_the_quantization(
    int8_pair: tuple[Path, Path],
) -> None:
    intact, tampered = int8_pair
    good = export_model(SIGNED_LINEAR, "int8", cache_dir=intact)
    assert good.program_error is not None and good.program_error.ok
    assert good.quantization_error is not None and good.quantization_error.max_abs > 0
    with pytest.raises(NumericsError) as caught:
        export_model(SIGNED_LINEAR, "int8", cache_dir=tampered)
    err = caught.value
    assert (err.model, err.dtype, err.stage) == ("signed_linear", "int8", "numerics")
    assert "output steps" in str(err) and "against the converted int8 PT2E model" in str(err)
    bad = load_cached(SIGNED_LINEAR, "int8", cache_dir=tampered)
    assert bad is not None and bad.program_error is not None and not bad.program_error.ok
    # negated outputs: off by about twice their range, far beyond both int8 limits
    int8 = TOLERANCES["int8"]
    assert bad.program_error.max_rel > 1.5
    assert bad.program_error.max_steps > 2 * int8.steps  # type: ignore[operator]
    assert bad.program_error.rms_spread > 2 * int8.rms_spread  # type: ignore[operator]
    assert bad.quantization_error == good.quantization_error


def test_a_program_checked_before_the_rms_was_kept_is_checked_again(
    int8_pair: tuple[Path, Path],
) -> None:
    """A cached export whose check predates the RMS error is not judged by less than the
    current rule: it is run and compared again (no new export), and the record completed."""
    intact, _ = int8_pair
    manifest_path = export_model(SIGNED_LINEAR, "int8", cache_dir=intact).directory / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    for output in manifest["numerics"]["outputs"]:
        del output["rms_abs"], output["spread"]
    manifest_path.write_text(json.dumps(manifest))
    old = load_cached(SIGNED_LINEAR, "int8", cache_dir=intact)
    assert old is not None and old.program_error is None
    again = export_model(SIGNED_LINEAR, "int8", cache_dir=intact)
    assert again.program_error is not None and again.program_error.ok
    assert again.program_error.rms_spread is not None
    outputs = json.loads(manifest_path.read_text())["numerics"]["outputs"]
    assert outputs and all("rms_abs" in output for output in outputs)


def _vanishing() -> object:
    """Two linear layers with weights ~1e-20: outputs ~1e-40, below float32's smallest normal —
    what a library's tiny default initialisation gave one real model."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
    with torch.no_grad():
        for layer in model:
            layer.weight.mul_(1e-20)
            layer.bias.zero_()
    return model.eval()


def _vector_16(seed: int) -> tuple[object, ...]:
    import torch

    return (torch.randn(1, 16, generator=torch.Generator().manual_seed(seed)),)


def test_vanishing_outputs_are_named_and_their_numerics_vacuous(export_cache: Path) -> None:
    spec = ModelSpec("vanishing", _vanishing, _vector_16, "")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        artifact = export_model(spec, "fp32", cache_dir=export_cache)
        export_model(spec, "fp32", cache_dir=export_cache)  # said once per process
    lines = [str(w.message) for w in caught if w.category is DegenerateOutputWarning]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert lines[0].startswith(
        "vanishing[fp32]: degenerate outputs (eager fp32 PyTorch: output 0 is denormal (max |x| "
    )
    assert "vacuous" in lines[0] and "batch-norm statistics" in lines[0]
    program = artifact.program_error
    assert program is not None and program.ok  # not refused: the user chose the model
    assert program.vacuous == artifact.degenerate
    assert program.describe().startswith("vacuous (eager fp32 PyTorch: output 0 is denormal")


def test_fp16_is_compared_with_eager_fp32_where_pytorch_cannot_run_it_saying_why() -> None:
    """PyTorch has no CPU fp16 kernel for some ops (linalg here): the program is then compared
    with eager fp32, and the reference says so and why."""
    import torch

    from pytest_sme2.export.recipes import Reference, fp16_reference

    class Inverse(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.linalg.inv(x)

    x = torch.eye(4) * 2
    fp32 = Reference("eager fp32 PyTorch", (Inverse()(x),))
    reference = fp16_reference(Inverse(), (x.half(),), fp32)
    assert reference.outputs is fp32.outputs
    assert reference.what.startswith(
        "eager fp32 PyTorch (eager fp16 fails on the CPU: RuntimeError: linalg.inv: "
    )
    assert fp16_reference(torch.nn.ReLU(), (x.half(),), fp32).what == "eager fp16 PyTorch"


def test_a_buffer_reached_through_another_object_is_exported_as_state() -> None:
    """transformers' ExecuTorch wrapper registers its ``StaticCache``'s tensors as buffers but
    writes them through the cache object: non-strict tracing lifts them as constants written in
    place (a program with no state, which fails lowering), so such a model is exported strictly,
    its cache a mutable buffer."""
    import torch

    from pytest_sme2.export.recipes import export_program, lower, writes_constants

    class Cache:
        def __init__(self) -> None:
            self.values = torch.zeros(4)

    class Accumulate(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cache = Cache()
            self.register_buffer("values", self.cache.values, persistent=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.cache.values.add_(x)
            return self.cache.values * 2

    inputs = (torch.ones(4),)
    assert writes_constants(torch.export.export(Accumulate(), inputs))
    program = export_program(Accumulate(), inputs)
    assert not writes_constants(program)
    mutated = lower(program).exported_program().graph_signature.buffers_to_mutate
    assert list(mutated.values()) == ["values"]


def test_fp16_converts_a_buffer_another_object_holds() -> None:
    """``Module.half`` puts a new tensor under a buffer's name; transformers' ``StaticCache``
    holds the old one and would write an fp32 cache (torch.export: "Expected query, key, and
    value to have the same dtype"). The fp16 program's buffers convert in place."""
    import torch

    from pytest_sme2.export.recipes import RECIPES

    class Cache:
        def __init__(self) -> None:
            self.values = torch.zeros(4)

    class Cached(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cache = Cache()
            self.register_buffer("values", self.cache.values, persistent=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.cache.values + x

    model = Cached()
    half, inputs = RECIPES["fp16"].program(model, (torch.ones(4),))
    assert half.cache.values is half.values and half.values.dtype == torch.float16
    assert half(*inputs).dtype == torch.float16
    assert model.values.dtype == torch.float32  # the user's model is left as it was


# --- the cache ----------------------------------------------------------------------------------


def test_warm_hit_reuses_the_entry(
    export_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_sme2.export import exporter

    spec = _lazy_spec(tmp_path)
    cold = export_model(spec, "fp32", cache_dir=export_cache)
    built = cold.pte.stat().st_mtime_ns

    def never(*args: object) -> None:
        raise AssertionError("a warm hit must not export again")

    monkeypatch.setattr(exporter, "build_export", never)
    warm = export_model(spec, "fp32", cache_dir=export_cache)
    assert warm == cold
    assert warm.pte.stat().st_mtime_ns == built
    assert warm.key == artifact_key(spec, "fp32")
    assert warm.directory == artifact_dir(spec, "fp32", export_cache)


def test_warm_hit_in_a_fresh_process_builds_and_traces_but_never_lowers(
    export_cache: Path, tmp_path: Path
) -> None:
    cold = export_model(_lazy_spec(tmp_path), "fp32", cache_dir=export_cache)
    report = _report(_run_script(tmp_path, export_cache))
    assert report["key"] == cold.key, "another process computes the same key"
    assert report["executorch"] is False
    assert report["ok"] is True


def test_key_follows_the_program_and_dtype_not_the_source_text(tmp_path: Path) -> None:
    spec = _lazy_spec(tmp_path)
    key = artifact_key(spec, "fp32")
    assert artifact_key(spec, "fp32") == key
    assert artifact_key(spec, "fp16") != key
    path = tmp_path / "lazy_model.py"
    path.write_text(path.read_text() + "\n# an edit that changes no program\n")
    assert artifact_key(_lazy_spec(tmp_path), "fp32") == key
    path.write_text(path.read_text().replace("padding=1)", "padding=1, bias=False)"))
    assert artifact_key(_lazy_spec(tmp_path), "fp32") != key


def test_concurrent_exports_produce_one(tmp_path: Path) -> None:
    """Two processes asking for the same cold entry at once: one exports, the other waits for
    it (and so never imports executorch); both get the same valid, numerics-checked program."""
    model_dir, cache = tmp_path / "model", tmp_path / "cache"
    model_dir.mkdir()
    (model_dir / "lazy_model.py").write_text(LAZY_MODEL)
    procs = [_run_script(model_dir, cache) for _ in range(2)]
    reports = [_report(proc) for proc in procs]
    assert sorted(report["executorch"] for report in reports) == [False, True]
    assert reports[0]["key"] == reports[1]["key"]
    assert all(report["ok"] for report in reports)
    entries = [path.name for path in cache.iterdir() if path.is_dir()]
    assert entries == [f"lazy_model-fp32-{reports[0]['key']}"], "temporary directories left"


def test_export_without_numerics_checks_them_later(export_cache: Path, tmp_path: Path) -> None:
    spec = _lazy_spec(tmp_path)
    spec = ModelSpec("lazy_unchecked", spec.factory, spec.inputs, "")
    unchecked = export_model(spec, "fp32", cache_dir=export_cache, check_numerics=False)
    assert unchecked.program_error is None
    checked = export_model(spec, "fp32", cache_dir=export_cache)
    assert checked.program_error is not None and checked.program_error.ok
    assert checked.pte.stat().st_mtime_ns == unchecked.pte.stat().st_mtime_ns
    assert checked.program_error.max_rel <= TOLERANCES["fp32"].rel


# --- failures -----------------------------------------------------------------------------------


def _branchy() -> object:
    """A module torch.export cannot trace: Python control flow on a tensor's value."""
    import torch

    class Branchy(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.sum() > 0 else x - 1

    return Branchy().eval()


def _one_input(seed: int) -> tuple[object, ...]:
    import torch

    return (torch.randn(1, 8, generator=torch.Generator().manual_seed(seed)),)


def _broken() -> object:
    raise RuntimeError("weights file missing\nsecond line of detail")


def test_untraceable_model_names_model_dtype_and_stage(export_cache: Path) -> None:
    spec = ModelSpec("branchy", _branchy, _one_input, "")
    with pytest.raises(ExportError) as caught:
        export_model(spec, "fp32", cache_dir=export_cache)
    err = caught.value
    assert (err.model, err.dtype, err.stage) == ("branchy", "fp32", "torch.export")
    assert str(err).startswith("export of branchy[fp32] failed at torch.export: ")
    assert "\n" not in str(err)
    assert not artifact_dir(spec, "fp32", export_cache).exists(), "failures are not cached"
    with pytest.raises(ExportError) as again:
        export_model(spec, "fp32", cache_dir=export_cache)
    assert again.value is err, "the same process must not export a failing model twice"


def test_factory_failure_is_a_build_model_error(export_cache: Path) -> None:
    spec = ModelSpec("broken", _broken, _one_input, "")
    with pytest.raises(ExportError) as caught:
        export_model(spec, "int8", cache_dir=export_cache)
    assert str(caught.value) == (
        "export of broken[int8] failed at build model: RuntimeError: weights file missing"
    )


def test_unsupported_dtype_is_a_config_error(export_cache: Path) -> None:
    spec = ModelSpec("fp32_only", _branchy, _one_input, "", ("fp32",))
    with pytest.raises(ConfigError, match="'fp32_only' does not support dtype 'fp16'"):
        export_model(spec, "fp16", cache_dir=export_cache)


def _linear(width: int = 8) -> object:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.ReLU()).eval()


def _eight(seed: int, width: int = 8) -> tuple[object, ...]:
    return _one_input(seed)


SESSION_SCRIPT = """
import os, signal, sys, warnings
import torch

sys.path.insert(0, {repo!r})
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.prefetch import prefetch
from pytest_sme2.export.model_spec import ModelSpec


def linear(width=8):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.ReLU()).eval()


def inputs(seed, width=8):
    return (torch.randn(1, 8, generator=torch.Generator().manual_seed(seed)),)


SESSION = os.getpid()  # the session's process; any other is an export process it forked
"""
"""The head of a script that plays a session exporting side by side, in a process of its own."""


def _session_script(tmp_path: Path, body: str) -> tuple[list[str], dict[str, str]]:
    """The command that runs :data:`SESSION_SCRIPT` + ``body``, and its environment (a cache of
    its own)."""
    script = tmp_path / "session.py"
    script.write_text(SESSION_SCRIPT.format(repo=str(Path(__file__).parents[2])) + body)
    cache = with_host_runner(tmp_path / "cache")
    return [sys.executable, str(script)], {**os.environ, "SME2_CACHE_DIR": str(cache)}


def _run_session_script(tmp_path: Path, body: str) -> str:
    """Run :data:`SESSION_SCRIPT` + ``body`` to its end; its last line of output."""
    command, env = _session_script(tmp_path, body)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


AFTER_PARALLEL_TORCH = """
x = torch.randn(2000, 2000)
for _ in range(3):  # the session's own parallel torch work: GNU OpenMP's thread team exists
    x.clone() @ x
specs = [
    ModelSpec(f"forked_{w}", linear, inputs, "", ("fp32",), (("width", w),)) for w in (8, 16)
]
prefetch([(spec, "fp32") for spec in specs], processes=2)
print("exported")
"""


def test_prefetch_forks_safely_after_the_session_ran_parallel_torch(tmp_path: Path) -> None:
    """A forked export after parallel torch work in the session finishes (it hung for ever in a
    futex before the forked processes were put on one thread: GNU OpenMP is not fork-safe)."""
    assert _run_session_script(tmp_path, AFTER_PARALLEL_TORCH) == "exported"


WORKER_KILLED = """
def killed_inputs(seed, width=8):
    if os.getpid() != SESSION:  # an export process: killed as the OOM killer would
        os.kill(os.getpid(), signal.SIGKILL)
    return inputs(seed)


doomed = ModelSpec("killed_doomed", linear, killed_inputs, "", ("fp32",), (("width", 8),))
fine = ModelSpec("killed_fine", linear, inputs, "", ("fp32",), (("width", 16),))
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    prefetch([(doomed, "fp32"), (fine, "fp32")], processes=2)
for spec in (doomed, fine):
    assert export_model(spec, "fp32").pte.is_file()
print("|".join(str(w.message) for w in seen if "export process died" in str(w.message)))
"""


def test_prefetch_survives_an_export_process_killed(tmp_path: Path) -> None:
    """An export process killed mid-export (the OOM killer) does not hang the session for ever,
    as a ``multiprocessing.Pool`` does: the session says so and exports what is left itself."""
    said = _run_session_script(tmp_path, WORKER_KILLED)
    assert "an export process died" in said and "one at a time" in said, said


INTERRUPTED = """
signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the test runner left
from pytest_sme2.export.key import artifact_key

STARTS = os.path.join(os.environ["SME2_CACHE_DIR"], "starts")


def counted_inputs(seed, width=8):
    if os.getpid() != SESSION:  # an export process starts an export
        with open(STARTS, "a") as starts:
            starts.write("started\\n")
    return inputs(seed)


specs = [
    ModelSpec(f"interrupted_{w}", linear, counted_inputs, "", ("fp32",), (("width", w),))
    for w in range(8, 136, 16)
]
for spec in specs:  # keyed here, as a session keys its cases before exporting them
    artifact_key(spec, "fp32")
print("exporting", flush=True)
try:
    prefetch([(spec, "fp32") for spec in specs], processes=2)
except KeyboardInterrupt:
    exports = os.path.join(os.environ["SME2_CACHE_DIR"], "exports")
    names = os.listdir(exports) if os.path.isdir(exports) else []
    done = [name for name in names if name.endswith(tuple("0123456789abcdef"))]
    started = len(open(STARTS).read().split())
    print(f"interrupted with {len(done)} exported, {started} started", flush=True)
"""


def test_ctrl_c_stops_the_side_by_side_exports_at_once(tmp_path: Path) -> None:
    """Ctrl-C reaches the session and its export processes alike: the processes end there and
    then, instead of taking their next export while the interrupted one still runs on its
    thread (seen: every queued export "failed" at once, two exports sharing one process)."""
    import signal

    command, env = _session_script(tmp_path, INTERRUPTED)
    session = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's Ctrl-C meets it
    )
    assert session.stdout is not None
    assert session.stdout.readline().strip() == "exporting"
    # Ctrl-C once an export process has begun an export, however slowly a busy machine got
    # there (a fixed sleep once struck the session still importing executorch, under CI load)
    starts = tmp_path / "cache" / "starts"
    deadline = time.monotonic() + 180
    while not starts.is_file() and session.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert starts.is_file(), "no export process began an export in 180 s"
    # an export process writes ``starts`` from the thread its export runs on (the inputs are
    # made there): the Ctrl-C meets that export at work, the case this test is about
    os.killpg(session.pid, signal.SIGINT)
    out, err = session.communicate(timeout=60)
    assert "interrupted with" in out, err[-2000:]
    words = out.split("interrupted with ")[1].split()
    exported, started = int(words[0]), int(words[2])
    assert exported < 8, out
    # at most the two exports running when Ctrl-C came were left unfinished: none started after
    assert started <= exported + 2, out


def test_prefetch_exports_side_by_side_in_processes_of_their_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each pair is exported by a forked process (the manifest names its pid), two at once, and
    a failure in one is remembered by the session: its test gets it at once."""
    from pytest_sme2.export.prefetch import prefetch

    monkeypatch.setenv("SME2_CACHE_DIR", str(with_host_runner(tmp_path)))
    calls = tmp_path / "broken-calls"

    def counted_broken() -> object:
        with calls.open("a") as log:
            log.write(f"{os.getpid()}\n")
        return _broken()

    narrow = ModelSpec("side_narrow", _linear, _eight, "", ("fp32",), (("width", 8),))
    wide = ModelSpec("side_wide", _linear, _eight, "", ("fp32",), (("width", 16),))
    broken = ModelSpec("side_broken", counted_broken, _one_input, "", ("fp32",))
    prefetch([(narrow, "fp32"), (wide, "fp32"), (broken, "fp32")], processes=2)
    built = calls.read_text().split()
    assert any(pid != str(os.getpid()) for pid in built)  # a prefetch process built it
    pids = {
        json.loads((export_model(spec, "fp32").directory / MANIFEST_NAME).read_text())[
            "exported_by"
        ]["pid"]
        for spec in (narrow, wide)
    }
    assert os.getpid() not in pids and len(pids) == 2
    with pytest.raises(ExportError, match=r"side_broken\[fp32\] failed at build model"):
        export_model(broken, "fp32")
    # this process was handed the prefetch's failure: the factory did not run again
    assert calls.read_text().split() == built


def test_one_at_a_time_a_pair_another_process_is_exporting_is_left_for_last(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """As an xdist worker exports (one pair at a time): the pair whose entry another process is
    building (its lock held) waits until the rest are exported, instead of holding them up."""
    import threading

    from filelock import FileLock

    from pytest_sme2.export.prefetch import prefetch

    monkeypatch.setenv("SME2_CACHE_DIR", str(with_host_runner(tmp_path)))
    busy = ModelSpec("elsewhere_busy", _linear, _eight, "", ("fp32",), (("width", 8),))
    free = ModelSpec("elsewhere_free", _linear, _eight, "", ("fp32",), (("width", 16),))
    # keyed here, before the thread: keying traces the model, which is no thread's to share
    # (seen: the thread's key of ``free``, traced while the session exported it, was another)
    busy_dir, free_dir = artifact_dir(busy, "fp32"), artifact_dir(free, "fp32")
    busy_dir.parent.mkdir(parents=True)
    holding, free_seen = threading.Event(), []

    def other_process() -> None:  # holds busy's lock until free is exported (or 60 s pass)
        with FileLock(str(busy_dir) + ".lock"):
            holding.set()
            deadline = time.monotonic() + 60
            while not free_dir.is_dir() and time.monotonic() < deadline:
                time.sleep(0.05)
            free_seen.append(free_dir.is_dir())

    other = threading.Thread(target=other_process)
    other.start()
    assert holding.wait(60)
    prefetch([(busy, "fp32"), (free, "fp32")], processes=1)
    other.join()
    assert free_seen == [True], "the held pair was waited for before the free one was exported"
    assert all(export_model(spec, "fp32").pte.is_file() for spec in (busy, free))


def test_an_export_runs_on_a_fresh_stack_without_garbage_collections(
    export_cache: Path,
) -> None:
    """Lowering runs in a thread of its own, at the same shallow depth however deep the caller
    (a pytest fixture; a process forked from one), with Python's garbage collector paused and
    put back as it was after. Deep in a session's stack CPython 3.11 can map and unmap a 16 KiB
    frame chunk on every call: seen, half of a forked export's CPU in the kernel."""
    import gc
    import inspect
    import threading

    seen: list[tuple[str, int, bool]] = []

    def watched_inputs(seed: int) -> tuple[object, ...]:
        seen.append(
            (threading.current_thread().name, len(inspect.stack(context=0)), gc.isenabled())
        )
        return _one_input(seed)

    def deep(levels: int) -> Artifact:
        if levels:
            return deep(levels - 1)
        return export_model(
            ModelSpec("fresh_stack", _linear, watched_inputs, ""),
            "fp32",
            cache_dir=export_cache,
            check_numerics=False,
        )

    assert gc.isenabled()
    assert deep(300).pte.is_file()
    assert gc.isenabled()
    exporting = [(depth, collecting) for name, depth, collecting in seen if name == "sme2-export"]
    assert exporting, seen
    assert all(depth < 60 and not collecting for depth, collecting in exporting), exporting
    keying = [depth for name, depth, _ in seen if name != "sme2-export"]
    assert min(keying) > 300  # the key is computed in the caller's thread, deep down
