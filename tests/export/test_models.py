"""The example models: they build, are identical every time, and compute the right shapes.

Export caching keys on what the factory builds, so a model that differed between two builds (an
unseeded initialiser, inputs drawn from the global RNG) would be exported afresh in every session
and would break the comparison of SME2-on with SME2-off; these tests pin that down.
"""

from __future__ import annotations

import pytest
import torch

import models  # noqa: F401  (registers the examples; needs torch)
from models.mobilenet_v3_small import mobilenet_v3_small
from models.vit_tiny import DEPTH, DIM, MLP_RATIO, NUM_CLASSES, PATCH, tokens, vit_tiny
from pytest_sme2.errors import ConfigError
from pytest_sme2.export.key import program_fingerprint
from pytest_sme2.export.model_spec import ModelSpec, get_model, register_model

#: What each example model returns for its example inputs (batch 1).
OUTPUT_SHAPES: dict[str, list[tuple[int, ...]]] = {
    "toy_cnn": [(1, 10)],
    "mobilenet_v3_small": [(1, 1000)],
    "vit_tiny": [(1, 1000)],
    "squeezesam_like": [(1, 3, 256, 256), (1, 3)],
    "tiny_llama_prefill": [(1, 8192)],
    "tiny_llama_decode": [(1, 8192)],
}
#: The same, built with the emulation params of the models that have them.
EMULATION_OUTPUT_SHAPES: dict[str, list[tuple[int, ...]]] = {
    "vit_tiny": [(1, 1000)],
    "squeezesam_like": [(1, 3, 128, 128), (1, 3)],
    "tiny_llama_prefill": [(1, 8192)],
    "tiny_llama_decode": [(1, 8192)],
}
EXAMPLES = [get_model(name) for name in sorted(OUTPUT_SHAPES)]
#: Every example spec as hardware runs it and, where it differs, as an emulator runs it.
BUILDS = EXAMPLES + [s.for_emulation() for s in EXAMPLES if s.emulation_params]


def _build_id(spec: ModelSpec) -> str:
    return "@".join([spec.name, *(f"{key}={value}" for key, value in spec.params)])


def _outputs(spec: ModelSpec, seed: int = 0) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        out = spec.build()(*spec.example_inputs(seed))
    return out if isinstance(out, tuple) else (out,)


def test_every_example_model_is_registered_and_described() -> None:
    from pytest_sme2.export.model_spec import registered_models

    assert sorted(OUTPUT_SHAPES) == sorted(spec.name for spec in registered_models())
    for spec in EXAMPLES:
        assert spec.description, f"{spec.name}: the factory needs a docstring"


@pytest.mark.parametrize("spec", BUILDS, ids=_build_id)
def test_model_builds_in_eval_mode(spec: ModelSpec) -> None:
    model = spec.build()
    assert isinstance(model, torch.nn.Module)
    assert not any(module.training for module in model.modules())


@pytest.mark.parametrize("spec", BUILDS, ids=_build_id)
def test_weights_are_identical_on_every_build(spec: ModelSpec) -> None:
    first, second = spec.build().state_dict(), spec.build().state_dict()
    assert first.keys() == second.keys()
    for name, tensor in first.items():
        assert torch.equal(tensor, second[name]), f"{spec.name}.{name} differs between builds"


@pytest.mark.parametrize("spec", BUILDS, ids=_build_id)
def test_building_does_not_disturb_the_global_rng(spec: ModelSpec) -> None:
    torch.manual_seed(1234)
    expected = torch.rand(4)
    torch.manual_seed(1234)
    spec.build()
    spec.example_inputs(0)
    assert torch.equal(torch.rand(4), expected)


@pytest.mark.parametrize("spec", BUILDS, ids=_build_id)
def test_inputs_are_seeded_and_real_looking(spec: ModelSpec) -> None:
    zero, again, one = spec.example_inputs(0), spec.example_inputs(0), spec.example_inputs(1)
    assert all(torch.equal(a, b) for a, b in zip(zero, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(zero, one, strict=True))
    for tensor in zero:
        if not tensor.is_floating_point():  # token ids and positions
            assert tensor.dtype == torch.int64 and tensor.min() >= 0
            continue
        assert tensor.dtype == torch.float32
        assert tensor.unique().numel() > 100, "inputs must not be (nearly) constant"


@pytest.mark.parametrize("spec", BUILDS, ids=_build_id)
def test_eager_outputs_have_the_right_shapes_and_are_finite(spec: ModelSpec) -> None:
    outputs = _outputs(spec)
    shapes = EMULATION_OUTPUT_SHAPES if spec.params else OUTPUT_SHAPES
    assert [tuple(out.shape) for out in outputs] == shapes[spec.name]
    for out in outputs:
        assert torch.isfinite(out).all()
        assert out.std() > 0, "an output that ignores its input hides numerics bugs"


@pytest.mark.parametrize("spec", BUILDS, ids=_build_id)
def test_eager_outputs_are_deterministic(spec: ModelSpec) -> None:
    for a, b in zip(_outputs(spec), _outputs(spec), strict=True):
        assert torch.equal(a, b)


def test_mobilenet_v3_small_has_the_reference_parameter_count() -> None:
    # torchvision's MobileNet_V3_Small_Weights.IMAGENET1K_V1 documents num_params = 2,542,856:
    # equal counts mean the same layer table (widths, kernels, SE placement, classifier).
    assert sum(p.numel() for p in mobilenet_v3_small().parameters()) == 2_542_856


def test_mobilenet_v3_small_batchnorm_is_calibrated() -> None:
    """Running statistics come from a seeded batch, so activations have trained-network scale."""
    norms = [m for m in mobilenet_v3_small().modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms
    for norm in norms:
        assert not torch.equal(norm.running_var, torch.ones_like(norm.running_var))


def test_vit_tiny_matches_its_configuration() -> None:
    model = vit_tiny()
    linear = DIM * DIM + DIM
    block = 2 * 2 * DIM + 4 * linear + 2 * DIM * DIM * MLP_RATIO + DIM * MLP_RATIO + DIM
    expected = (
        3 * PATCH * PATCH * DIM + DIM  # patch embedding
        + DIM + tokens(224) * DIM  # class token, positions
        + DEPTH * block
        + 2 * DIM  # final LayerNorm
        + DIM * NUM_CLASSES + NUM_CLASSES  # head
    )  # fmt: skip
    assert sum(p.numel() for p in model.parameters()) == expected
    assert tokens(224) == (224 // PATCH) ** 2 + 1 == 197


def test_emulation_builds_are_the_models_with_smaller_inputs() -> None:
    """An emulated device runs the same kinds of layers on fewer pixels or tokens (a decoder:
    a shorter prompt and KV cache window), and caches them apart."""
    assert sorted(spec.name for spec in EXAMPLES if spec.emulation_params) == sorted(
        EMULATION_OUTPUT_SHAPES
    )
    for spec in EXAMPLES:
        emulated = spec.for_emulation()
        if not spec.emulation_params:
            assert emulated is spec
            continue
        assert emulated.params == spec.emulation_params
        assert program_fingerprint(emulated) != program_fingerprint(spec)
        full, small = spec.build(), emulated.build()
        assert {type(m) for m in full.modules()} == {type(m) for m in small.modules()}
        # weights and state (a decode step's KV cache window) × inputs
        full_cost = sum(t.numel() for t in full.state_dict().values()) * sum(
            t.numel() for t in spec.example_inputs(0)
        )
        small_cost = sum(t.numel() for t in small.state_dict().values()) * sum(
            t.numel() for t in emulated.example_inputs(0)
        )
        assert small_cost < full_cost, spec.name


def test_a_name_registered_from_another_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same file may register again (a module imported under two names); another may not."""
    from pytest_sme2.export import model_spec as registry

    monkeypatch.setattr(registry, "_REGISTRY", {})
    monkeypatch.setattr(registry, "_ORIGINS", {})
    register = register_model("twice", inputs=tokens)
    register(vit_tiny)
    register(vit_tiny)
    with pytest.raises(
        ConfigError,
        match=r"'twice' is registered twice \(\S*vit_tiny.py and \S*mobilenet_v3_small.py\)",
    ):
        register(mobilenet_v3_small)


def test_a_phase_says_how_many_tokens_an_inference_processes() -> None:
    prefill, decode = get_model("tiny_llama_prefill"), get_model("tiny_llama_decode")
    assert prefill.tokens_per_inference == 64 and decode.tokens_per_inference == 1
    assert prefill.for_emulation().tokens_per_inference == 16
    assert get_model("toy_cnn").tokens_per_inference is None


def test_the_decode_step_starts_from_a_filled_cache() -> None:
    """Its cache holds the prompt's keys up to its position and nothing after; the prefill's is
    empty. The decode step's logits are not those of the same token without the prompt."""
    prefill = get_model("tiny_llama_prefill").build()
    decode = get_model("tiny_llama_decode").build()
    cache = decode.layers[0].attention.k_cache
    assert cache[:, :, :64].abs().sum() > 0 and cache[:, :, 64:].abs().sum() == 0
    assert prefill.layers[0].attention.k_cache.abs().sum() == 0
    token, position = get_model("tiny_llama_decode").example_inputs(0)
    with torch.no_grad():
        alone = prefill(token, torch.zeros(1, dtype=torch.int64))
        after_prompt = decode(token, position)
    assert not torch.allclose(alone, after_prompt)


def test_tokens_must_name_a_parameter_and_expect_a_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_sme2.export import model_spec as registry

    monkeypatch.setattr(registry, "_REGISTRY", {})
    monkeypatch.setattr(registry, "_ORIGINS", {})
    with pytest.raises(ConfigError, match=r"tokens='prompt' names no parameter of vit_tiny"):
        register_model("bad_tokens", inputs=tokens, tokens="prompt")(vit_tiny)
    with pytest.raises(ConfigError, match=r"expect names \['int4'\], which are not its dtypes"):
        register_model("bad_expect", inputs=tokens, expect={"int4": {"speedup_floor": 2}})
    register_model("floors", inputs=tokens, dtypes=("fp32",), expect={"*": {"speedup_floor": 2}})(
        vit_tiny
    )
    assert get_model("floors").expectations("fp32") == {"speedup_floor": 2}
