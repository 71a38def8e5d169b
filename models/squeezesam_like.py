"""A SqueezeSAM-shaped network: conv U-Net encoder, one attention block, upsampling decoder.

SqueezeSAM (Varadarajan et al., 2023) replaces SAM's ViT with a small U-Net: the image and a
point prompt are fused early as input channels, a convolutional encoder downsamples, a
transformer block mixes the coarsest features, and a decoder upsamples bilinearly with skip
connections to mask logits, plus a small head scoring each mask. This model keeps that shape at
256×256 with random (seeded) weights. It is the case study where, after SME2 shrinks the
convolutions, data movement — the permutes and reshapes around attention and around the
channels-last pointwise layers of the decoder, the concatenations and the bilinear resizes —
becomes the largest share of end-to-end time.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from models._seeding import calibrate_batchnorm, seeded_randn, seeded_weights
from pytest_sme2.export.model_spec import register_model

IMAGE = 256
#: The image side on emulated devices: a quarter of the pixels, the same operators and kernels
#: (the attention block then sees 8×8 positions instead of 16×16).
EMULATION_IMAGE = 128
#: Encoder widths at 1/2, 1/4, 1/8 and 1/16 of the image; the attention block runs at the last.
WIDTHS = (24, 48, 96, 192)
HEADS = 4
MASKS = 3
PROMPT_SIGMA = 8.0  # pixels: the spread of the Gaussian a point prompt is drawn as


def conv_bn_relu(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    """3×3 convolution (no bias), BatchNorm, ReLU."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()
    )


class TokenAttention(nn.Module):
    """A pre-norm transformer block over the H×W positions of a feature map, in NCHW out."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, heads, N, head_dim)
        weights = torch.softmax((q * self.head_dim**-0.5) @ k.transpose(-2, -1), dim=-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(batch, tokens, dim))

    def forward(self, fmap: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = fmap.shape
        x = fmap.flatten(2).transpose(1, 2)  # (B, H·W, C)
        x = x + self.attend(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return x.transpose(1, 2).reshape(batch, channels, height, width)


class UpBlock(nn.Module):
    """Bilinear ×2, 1×1 to the skip's width, concat with the skip, 3×3 fuse, channels-last mix.

    The last step is a per-pixel linear applied in channels-last layout (permute → linear →
    permute back), as ConvNeXt-style decoders do: cheap arithmetic, two full transposes.
    """

    def __init__(self, cin: int, cskip: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(cin, cskip, 1)
        self.fuse = conv_bn_relu(2 * cskip, cskip)
        self.mix = nn.Linear(cskip, cskip)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
        x = self.fuse(torch.cat([self.reduce(x), skip], dim=1))
        return x + self.mix(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class SqueezeSAMLike(nn.Module):
    """(image, prompt heatmap) → (mask logits B×3×H×W at the image's size, mask scores B×3)."""

    def __init__(self) -> None:
        super().__init__()
        stages: list[nn.Module] = []
        cin = 4  # RGB + the prompt heatmap, fused early as in SqueezeSAM
        for width in WIDTHS:
            stages.append(nn.Sequential(conv_bn_relu(cin, width, 2), conv_bn_relu(width, width)))
            cin = width
        self.encoder = nn.ModuleList(stages)
        self.bottleneck = TokenAttention(WIDTHS[-1], HEADS)
        self.decoder = nn.ModuleList(
            UpBlock(WIDTHS[i + 1], WIDTHS[i]) for i in reversed(range(len(WIDTHS) - 1))
        )
        self.mask_head = nn.Conv2d(WIDTHS[0], MASKS, 1)
        self.score_head = nn.Linear(WIDTHS[-1], MASKS)

    def forward(self, image: torch.Tensor, prompt: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = torch.cat([image, prompt], dim=1)
        skips = []
        for stage in self.encoder:
            x = stage(x)
            skips.append(x)
        x = self.bottleneck(x)
        scores = self.score_head(x.mean(dim=(2, 3)))
        for block, skip in zip(self.decoder, reversed(skips[:-1]), strict=True):
            x = block(x, skip)
        masks = F.interpolate(
            self.mask_head(x), scale_factor=2.0, mode="bilinear", align_corners=False
        )
        return masks, scores


def point_prompt(seed: int, image: int = IMAGE) -> torch.Tensor:
    """A 1×1×``image``×``image`` Gaussian blob at a seeded random point (how SqueezeSAM feeds
    clicks)."""
    generator = torch.Generator().manual_seed(seed)
    y, x = (torch.rand(2, generator=generator) * image).tolist()
    rows = torch.arange(image, dtype=torch.float32).reshape(-1, 1)
    cols = torch.arange(image, dtype=torch.float32).reshape(1, -1)
    heat = torch.exp(-((rows - y) ** 2 + (cols - x) ** 2) / (2 * PROMPT_SIGMA**2))
    return heat.reshape(1, 1, image, image)


def squeezesam_like_inputs(seed: int, image: int = IMAGE) -> tuple[torch.Tensor, ...]:
    """A seeded-noise ``image``×``image`` image and a seeded point prompt."""
    return seeded_randn(seed, 1, 3, image, image), point_prompt(seed, image)


class _CalibrationWrapper(nn.Module):
    """Lets ``calibrate_batchnorm`` (one input) drive the two-input model."""

    def __init__(self, model: SqueezeSAMLike) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.model(batch[:, :3], batch[:, 3:])


@register_model(
    "squeezesam_like",
    inputs=squeezesam_like_inputs,
    emulation={"image": EMULATION_IMAGE},
)
def squeezesam_like(image: int = IMAGE) -> nn.Module:
    """SqueezeSAM-like U-Net (256×256, image + point prompt): convs, one attention block, decoder.

    Stresses convolution first; with SME2 the data movement (permutes, reshapes, concats,
    bilinear resizes between layouts) becomes the bottleneck, as in the SqueezeSAM case study.
    """
    with seeded_weights():
        model = SqueezeSAMLike()
        batch = torch.cat(
            [torch.cat(squeezesam_like_inputs(10_000 + i, image), dim=1) for i in range(4)], dim=0
        )
        calibrate_batchnorm(_CalibrationWrapper(model), batch)
        return model.eval()
