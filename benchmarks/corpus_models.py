"""A corpus of real architectures nobody here wrote, registered as a user project would.

Fifteen families from Hugging Face ``transformers`` (the ``corpus`` extra: ``pip install -e
".[corpus]"``), each built from its configuration class — never downloaded: ``HF_HUB_OFFLINE``
is set before transformers is imported, and nothing here names a checkpoint. Ten are vision
models, what the issue that asked for them tried by hand: depthwise convolutions with
squeeze-excite, inverted residuals, a plain ViT, a hierarchical windowed transformer, a
segmentation encoder, a SAM image encoder, a conv/attention hybrid. Five are not: a text encoder
(DistilBERT: token ids and a padding mask), two speech encoders (Whisper's on log-mel frames,
wav2vec2 on raw audio) and a Llama decoder exported as ExecuTorch users export LLMs, through
transformers' own static-cache wrapper, as a prefill and as one decode step from a filled cache.

Weights are the library's own initialisation under a fixed seed (its ``_init_weights``: what a
user training from scratch starts from), except where that initialisation is not a realistic
scale: SAM's vision config defaults to ``initializer_range=1e-10``, which makes its outputs
denormal (~1e-40), so it gets the 0.02 every other family uses; EfficientNet's normal(0.02)
convolutions and BatchNorm scales make its logits ~1e-31, so it gets torchvision's
initialisation. Convnets then have their BatchNorm statistics estimated from a few seeded
batches in train mode (see
:func:`models._seeding.calibrate_batchnorm`): with identity statistics a deep random convnet's
activations shrink or blow up layer after layer, and its outputs would test nothing.

Sizes are each family's small published variant (MobileNetV2 1.0, EfficientNet-B0, ResNet-18,
ViT-Ti, SegFormer-B0, MobileViT-XXS, LeViT-128S) or, where that costs more than tens of seconds
to export, a scaled-down config (ConvNeXt "atto" widths, Swin at half width, SAM's ViT encoder at
ViT-Ti width with 4 blocks). On emulated devices every model runs a smaller image
(``emulation``): under qemu an instruction costs ~100× and what is proven there does not depend
on the image size (EfficientNet also swaps its pooler for an equivalent one: see there). The
text, speech and decoder families are at width 256 (the decoder 384) with 4 blocks, on emulated
devices a shorter sequence (and 2 decoder layers). Width 256 is deliberate: ExecuTorch 1.5.1's
portable fp16 LayerNorm is wrong from width 256 on, so their fp16 cases are expected failures,
as every real encoder's (768 wide and up) would be.

Not imported by the project's own suite: ``benchmarks/corpus.py`` runs it, and
``tests/e2e/test_corpus.py`` registers one small member and runs the corpus's DistilBERT.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # built from configs: nothing may be fetched
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from collections.abc import Callable
from typing import Any

import torch
import transformers
from torch import nn
from transformers.models.whisper import modeling_whisper

from models._seeding import calibrate_batchnorm, seeded_randn, seeded_weights
from pytest_sme2 import register_model

#: Seeds of the batches BatchNorm statistics are estimated from (apart from the inputs' seeds).
BATCHNORM_SEED = 1000
#: The dtypes the corpus is run in: float, and static int8 (PT2E), the case issue 21 was about.
DTYPES = ("fp32", "int8")
#: The text, speech and decoder families in every dtype (the decoder in 8da4w too, as
#: ExecuTorch's LLM exporter quantizes): where one fails, the case is an xfail naming why.
SEQUENCE_DTYPES = ("fp32", "fp16", "int8", "int8-dynamic")
LLAMA_DTYPES = (*SEQUENCE_DTYPES, "8da4w")


class Head(nn.Module):
    """A transformers model called on ``pixel_values``, returning one tensor: exports need
    tensors, not a ``ModelOutput``."""

    def __init__(self, model: nn.Module, output: str) -> None:
        super().__init__()
        self.model = model
        self.output = output

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(pixel_values=pixel_values), self.output)


#: The image side on hardware; each model names a smaller one for emulated devices.
IMAGE = 224
#: Classes of the classification heads: ImageNet's, so the head is a realistic GEMM.
CLASSES = 1000


def image_inputs(seed: int, image: int = IMAGE, **_shape: int) -> tuple[torch.Tensor, ...]:
    """One 1×3×``image``×``image`` image of seeded normal noise (a normalised image's scale).

    Other keyword arguments shape the model, not its input (Swin's window on emulated devices).
    """
    return (seeded_randn(seed, 1, 3, image, image),)


def fan_out_convolutions(model: nn.Module) -> None:
    """Convolutions He fan-out normal, BatchNorm scale 1 and shift 0 (what torchvision gives its
    EfficientNet). transformers draws both the convolutions and the BatchNorm scales from
    normal(0.02): each block then multiplies activations by ~1e-4, below BatchNorm's epsilon so
    no statistics can undo it, and 16 MBConv blocks later the logits are ~1e-31."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out")
        elif isinstance(module, nn.modules.batchnorm._BatchNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


def build(
    model_class: Callable[[Any], nn.Module],
    config: Any,
    output: str,
    image: int,
    initialise: Callable[[nn.Module], None] | None = None,
) -> nn.Module:
    """``model_class(config)`` with the library's initialisation under a fixed seed (then
    ``initialise``, where that is not a realistic scale), BatchNorm statistics (if any)
    estimated at ``image``, in eval mode."""
    with seeded_weights():
        model = Head(model_class(config), output)
        if initialise is not None:
            initialise(model)
        if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
            # seeded too: in train mode dropout and stochastic depth (EfficientNet, MobileViT,
            # SegFormer) draw from the RNG, and statistics that differ between processes
            # would give every session another model, hence another export
            batch = torch.cat([image_inputs(BATCHNORM_SEED + i, image)[0] for i in range(4)])
            calibrate_batchnorm(model, batch)
    return model.eval()


@register_model("hf_mobilenet_v2", inputs=image_inputs, dtypes=DTYPES, emulation={"image": 96})
def hf_mobilenet_v2(image: int = IMAGE) -> nn.Module:
    """MobileNetV2 1.0: inverted residuals, depthwise 3×3 convolutions, ReLU6."""
    config = transformers.MobileNetV2Config(image_size=image, num_labels=CLASSES)
    return build(transformers.MobileNetV2ForImageClassification, config, "logits", image)


@register_model(
    "hf_efficientnet",
    inputs=image_inputs,
    dtypes=DTYPES,
    emulation={"image": 64, "library_pooler": False},
)
def hf_efficientnet(image: int = IMAGE, library_pooler: bool = True) -> nn.Module:
    """EfficientNet-B0: MBConv blocks with squeeze-excite and SiLU, depthwise 3×3 and 5×5.

    The library pools with ``AvgPool2d(1280, ceil_mode=True)`` (its hidden size as the kernel):
    a global mean that XNNPACK does not take, so ExecuTorch's portable ``avg_pool2d`` walks the
    1280×1280 window for each of 1280 channels, and it is the model's bottleneck (72 % of an
    emulated inference, 9.6 of 13.2 s; the corpus shows it on the host as "Other"). On emulated
    devices, where its ~10⁹ instructions made one evidence run take over 10 minutes,
    ``library_pooler=False`` puts the same mean as ``AdaptiveAvgPool2d(1)``, which XNNPACK runs.
    """
    config = transformers.EfficientNetConfig(
        image_size=image,
        width_coefficient=1.0,  # the config's defaults are B7's
        depth_coefficient=1.0,
        hidden_dim=1280,
        num_labels=CLASSES,
    )
    model = build(
        transformers.EfficientNetForImageClassification,
        config,
        "logits",
        image,
        initialise=fan_out_convolutions,
    )
    if not library_pooler:
        trunk = next(m for m in model.modules() if isinstance(m, transformers.EfficientNetModel))
        trunk.pooler = nn.AdaptiveAvgPool2d(1)
    return model


@register_model("hf_resnet18", inputs=image_inputs, dtypes=DTYPES, emulation={"image": 64})
def hf_resnet18(image: int = IMAGE) -> nn.Module:
    """ResNet-18: dense 3×3 convolutions in basic residual blocks (the GEMM-bound convnet)."""
    config = transformers.ResNetConfig(
        layer_type="basic",
        depths=[2, 2, 2, 2],
        hidden_sizes=[64, 128, 256, 512],
        num_labels=CLASSES,
    )
    return build(transformers.ResNetForImageClassification, config, "logits", image)


@register_model("hf_convnext", inputs=image_inputs, dtypes=DTYPES, emulation={"image": 64})
def hf_convnext(image: int = IMAGE) -> nn.Module:
    """ConvNeXt at "atto" widths: depthwise 7×7 convolutions, channel LayerNorm, GELU MLPs."""
    config = transformers.ConvNextConfig(
        depths=[2, 2, 6, 2], hidden_sizes=[40, 80, 160, 320], num_labels=CLASSES
    )
    return build(transformers.ConvNextForImageClassification, config, "logits", image)


@register_model("hf_vit", inputs=image_inputs, dtypes=DTYPES, emulation={"image": 112})
def hf_vit(image: int = IMAGE) -> nn.Module:
    """ViT-Ti/16: 12 pre-norm blocks of width 192, 3 heads, SDPA attention."""
    config = transformers.ViTConfig(
        image_size=image,
        hidden_size=192,
        num_hidden_layers=12,
        num_attention_heads=3,
        intermediate_size=768,
        num_labels=CLASSES,
    )
    return build(transformers.ViTForImageClassification, config, "logits", image)


@register_model(
    "hf_swin", inputs=image_inputs, dtypes=DTYPES, emulation={"image": 128, "window": 4}
)
def hf_swin(image: int = IMAGE, window: int = 7) -> nn.Module:
    """Swin at half Swin-T width: shifted-window attention, patch merging, four stages.

    Each stage's side (image/4 … image/32) must be a multiple of the window: 7 at 224, 4 at 128.
    """
    config = transformers.SwinConfig(
        image_size=image,
        window_size=window,
        embed_dim=48,
        depths=[2, 2, 2, 2],
        num_heads=[3, 6, 12, 24],
        num_labels=CLASSES,
    )
    return build(transformers.SwinForImageClassification, config, "logits", image)


@register_model("hf_segformer", inputs=image_inputs, dtypes=DTYPES, emulation={"image": 128})
def hf_segformer(image: int = IMAGE) -> nn.Module:
    """SegFormer-B0 with its decode head: efficient (spatially reduced) attention, Mix-FFN's
    depthwise convolutions, an all-MLP decoder to 1/4-resolution class logits."""
    config = transformers.SegformerConfig(image_size=image, num_labels=150)  # ADE20k's
    return build(transformers.SegformerForSemanticSegmentation, config, "logits", image)


@register_model("hf_mobilevit", inputs=image_inputs, dtypes=DTYPES, emulation={"image": 128})
def hf_mobilevit(image: int = IMAGE) -> nn.Module:
    """MobileViT-XXS: MobileNetV2 blocks interleaved with transformers over unfolded patches."""
    config = transformers.MobileViTConfig(
        image_size=image,
        hidden_sizes=[64, 80, 96],
        neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320],
        expand_ratio=2.0,
        num_labels=CLASSES,
    )
    return build(transformers.MobileViTForImageClassification, config, "logits", image)


@register_model("hf_levit", inputs=image_inputs, dtypes=DTYPES, emulation={"image": 112})
def hf_levit(image: int = IMAGE) -> nn.Module:
    """LeViT-128S: convolutional stem, attention with learned position biases, BatchNorm
    instead of LayerNorm, Hardswish."""
    config = transformers.LevitConfig(
        image_size=image,
        hidden_sizes=[128, 256, 384],
        num_attention_heads=[4, 6, 8],
        depths=[2, 3, 4],
        key_dim=[16, 16, 16],
        num_labels=CLASSES,
    )
    return build(transformers.LevitForImageClassification, config, "logits", image)


@register_model("hf_sam_encoder", inputs=image_inputs, dtypes=DTYPES, emulation={"image": 128})
def hf_sam_encoder(image: int = IMAGE) -> nn.Module:
    """SAM's image encoder at ViT-Ti width, 4 blocks: windowed and global attention with
    decomposed relative positions, a convolutional neck to 256 channels."""
    config = transformers.SamVisionConfig(
        image_size=image,
        hidden_size=192,
        num_hidden_layers=4,
        num_attention_heads=3,
        window_size=7,
        global_attn_indexes=[1, 3],
        initializer_range=0.02,  # the config's 1e-10 gives denormal outputs
    )
    return build(transformers.SamVisionModel, config, "last_hidden_state", image)


class Call(nn.Module):
    """A transformers model called with its inputs by keyword (``names``, in the program's input
    order), returning one output of its ``ModelOutput``: exports need tensors in and out."""

    def __init__(self, model: nn.Module, names: tuple[str, ...], output: str) -> None:
        super().__init__()
        self.model = model
        self.names = names
        self.output = output

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(**dict(zip(self.names, inputs, strict=True))), self.output)


def seeded(model_class: Callable[[Any], nn.Module], config: Any) -> nn.Module:
    """``model_class(config)`` with the library's initialisation under a fixed seed, in eval
    mode (the text, speech and decoder families have no BatchNorm to estimate)."""
    with seeded_weights():
        return model_class(config).eval()


#: DistilBERT's (BERT's uncased) vocabulary: the embedding gather is a realistic size.
TEXT_VOCAB = 30522
#: The sequence of the text encoder on hardware (emulated: 16).
TEXT_TOKENS = 64


def text_inputs(seed: int, tokens: int = TEXT_TOKENS) -> tuple[torch.Tensor, ...]:
    """Seeded token ids and an attention mask whose last eighth is padding: a batch of one
    padded sentence, so the mask is a real one (an all-ones mask tests no masking)."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, TEXT_VOCAB, (1, tokens), generator=generator)
    mask = torch.ones(1, tokens, dtype=torch.int64)
    mask[:, tokens - tokens // 8 :] = 0
    return ids, mask


@register_model(
    "hf_distilbert",
    inputs=text_inputs,
    dtypes=SEQUENCE_DTYPES,
    emulation={"tokens": 16},
    tokens="tokens",
)
def hf_distilbert(tokens: int = TEXT_TOKENS) -> nn.Module:
    """DistilBERT at width 256, 4 blocks: post-norm BERT blocks, GELU MLPs, learned positions,
    attention over a padding mask; the last hidden state of every token."""
    config = transformers.DistilBertConfig(
        vocab_size=TEXT_VOCAB, dim=256, n_layers=4, n_heads=4, hidden_dim=1024
    )
    return Call(
        seeded(transformers.DistilBertModel, config),
        ("input_ids", "attention_mask"),
        "last_hidden_state",
    )


#: Mel bins of Whisper's log-mel input (Whisper large-v3 has 128).
MELS = 80
#: Log-mel frames on hardware (3 s at Whisper's 10 ms hop; emulated: 1 s).
FRAMES = 300


def mel_inputs(seed: int, frames: int = FRAMES) -> tuple[torch.Tensor, ...]:
    """Seeded normal log-mel frames (Whisper's features are normalised to about that scale)."""
    return (seeded_randn(seed, 1, MELS, frames),)


@register_model(
    "hf_whisper_encoder", inputs=mel_inputs, dtypes=SEQUENCE_DTYPES, emulation={"frames": 100}
)
def hf_whisper_encoder(frames: int = FRAMES) -> nn.Module:
    """Whisper's encoder at width 256, 4 blocks: two 1-D convolutions (the second strided) over
    log-mel frames, sinusoidal positions, pre-norm blocks with GELU MLPs.

    The encoder takes exactly ``2 × max_source_positions`` frames (Whisper pads to 30 s): a
    shorter clip is a smaller ``max_source_positions``.
    """
    config = transformers.WhisperConfig(
        num_mel_bins=MELS,
        d_model=256,
        encoder_layers=4,
        encoder_attention_heads=4,
        encoder_ffn_dim=1024,
        max_source_positions=frames // 2,
    )
    encoder = seeded(modeling_whisper.WhisperEncoder, config)
    return Call(encoder, ("input_features",), "last_hidden_state")


#: Samples of raw audio on hardware: 1 s at 16 kHz (emulated: 0.25 s).
SAMPLES = 16000


def audio_inputs(seed: int, samples: int = SAMPLES) -> tuple[torch.Tensor, ...]:
    """Seeded normal samples (wav2vec2's feature extractor normalises audio to zero mean and unit
    variance)."""
    return (seeded_randn(seed, 1, samples),)


@register_model(
    "hf_wav2vec2", inputs=audio_inputs, dtypes=SEQUENCE_DTYPES, emulation={"samples": 4000}
)
def hf_wav2vec2(samples: int = SAMPLES) -> nn.Module:
    """wav2vec2 at width 256, 4 blocks: a 7-layer 1-D convolutional feature encoder over raw
    audio (GroupNorm, GELU; 256 channels), a grouped positional convolution of kernel 128,
    post-norm transformer blocks."""
    config = transformers.Wav2Vec2Config(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=1024,
        conv_dim=(256,) * 7,
    )
    return Call(seeded(transformers.Wav2Vec2Model, config), ("input_values",), "last_hidden_state")


#: The decoder's vocabulary, prompt and context window on hardware; emulated ones are smaller.
LLAMA_VOCAB = 8192
PROMPT = 64
CONTEXT = 128
LLAMA_EMULATION = {"layers": 2, "prompt": 16, "context": 32}
#: The prompt the decode step's cache holds (a fixed seed: the same cache in every process).
LLAMA_PROMPT_SEED = 1000


class StaticCacheStep(nn.Module):
    """``forward(input_ids, cache_position)`` → logits, through transformers' own ExecuTorch
    wrapper (``TorchExportableModuleWithStaticCache``): the static KV cache is the wrapper's
    buffers, written in place at ``cache_position``."""

    def __init__(self, model: nn.Module, context: int) -> None:
        super().__init__()
        from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

        self.step = TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=context)

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        return self.step(input_ids=input_ids, cache_position=cache_position)


def llama(layers: int, context: int) -> StaticCacheStep:
    """A Llama decoder (RoPE, GQA of 6 query on 2 key/value heads, RMSNorm, SwiGLU; widths
    multiples of 32, so 8da4w quantizes every linear layer) with an empty static cache."""
    config = transformers.LlamaConfig(
        vocab_size=LLAMA_VOCAB,
        hidden_size=384,
        intermediate_size=1024,
        num_hidden_layers=layers,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=context,
        use_cache=True,
    )
    model = seeded(transformers.LlamaForCausalLM, config)
    model.generation_config = transformers.GenerationConfig(
        use_cache=True, cache_implementation="static"
    )
    return StaticCacheStep(model, context).eval()


def llama_tokens(seed: int, count: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, LLAMA_VOCAB, (1, count), generator=generator)


def prefill_inputs(
    seed: int, layers: int = 4, prompt: int = PROMPT, context: int = CONTEXT
) -> tuple[torch.Tensor, ...]:
    """A prompt of ``prompt`` seeded token ids at positions 0…prompt−1."""
    return llama_tokens(seed, prompt), torch.arange(prompt)


def decode_inputs(
    seed: int, layers: int = 4, prompt: int = PROMPT, context: int = CONTEXT
) -> tuple[torch.Tensor, ...]:
    """One seeded token id at position ``prompt``, right after the cached prompt."""
    return llama_tokens(seed, 1), torch.tensor([prompt])


@register_model(
    "hf_llama_prefill",
    inputs=prefill_inputs,
    dtypes=LLAMA_DTYPES,
    emulation=LLAMA_EMULATION,
    tokens="prompt",
)
def hf_llama_prefill(layers: int = 4, prompt: int = PROMPT, context: int = CONTEXT) -> nn.Module:
    """transformers' Llama at 384 wide, 4 layers, prefill: a 64-token prompt into an empty
    128-token static cache (matrix × matrix)."""
    return llama(layers, context)


@register_model(
    "hf_llama_decode",
    inputs=decode_inputs,
    dtypes=LLAMA_DTYPES,
    emulation=LLAMA_EMULATION,
    tokens=1,
)
def hf_llama_decode(layers: int = 4, prompt: int = PROMPT, context: int = CONTEXT) -> nn.Module:
    """transformers' Llama at 384 wide, 4 layers, one decode step at position 64 of a static
    cache holding a seeded prompt's keys and values, filled in eager here (matrix × vector)."""
    model = llama(layers, context)
    with torch.no_grad():
        model(*prefill_inputs(LLAMA_PROMPT_SEED, layers, prompt, context))
    return model
