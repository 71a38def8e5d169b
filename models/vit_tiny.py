"""A small Vision Transformer: 16×16 patches of a 224×224 image, 6 blocks of width 256, 4 heads.

Attention is written out — separate q/k/v linears, reshape and permute into heads, ``q @ kᵀ``,
softmax, ``@ v``, permute back — rather than through ``nn.MultiheadAttention`` or
``scaled_dot_product_attention``, so the exported graph shows what a profile should separate:
GEMM time (linears and batched matmuls, what SME2 accelerates) and data-movement time (the
transposes and copies between them, which SME2 does not). LayerNorm (width 256) and GELU run
outside XNNPACK in some dtypes, which makes this model the check that non-delegated ops are
found and that their numerics are right.
"""

from __future__ import annotations

import torch
from torch import nn

from models._seeding import seeded_randn, seeded_weights
from pytest_sme2.export.model_spec import register_model

IMAGE = 224
#: The image side on emulated devices: 49 patches instead of 196, the same operators and kernels.
EMULATION_IMAGE = 112
PATCH = 16
DIM = 256
DEPTH = 6
HEADS = 4
MLP_RATIO = 4
NUM_CLASSES = 1000


def tokens(image: int) -> int:
    """Sequence length for an ``image``×``image`` input: its patches plus the class token."""
    return (image // PATCH) ** 2 + 1


class Attention(nn.Module):
    """Multi-head self-attention with explicit projections and head reshapes."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim**-0.5
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, D) → (B, heads, N, D/heads)."""
        batch, tokens, _ = x.shape
        return x.reshape(batch, tokens, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        q = self.split_heads(self.q(x)) * self.scale
        k = self.split_heads(self.k(x))
        v = self.split_heads(self.v(x))
        weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        mixed = (weights @ v).permute(0, 2, 1, 3).reshape(batch, tokens, dim)
        return self.proj(mixed)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(LN(x)), then x + MLP(LN(x)) with GELU."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, dim * mlp_ratio), nn.GELU(), nn.Linear(dim * mlp_ratio, dim)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """Patch embedding (conv 16×16/16) + class token + positions → blocks → LN → class head."""

    def __init__(self, image: int = IMAGE) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, DIM, PATCH, stride=PATCH)
        self.cls_token = nn.Parameter(torch.randn(1, 1, DIM) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens(image), DIM) * 0.02)
        self.blocks = nn.Sequential(*(Block(DIM, HEADS, MLP_RATIO) for _ in range(DEPTH)))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        patches = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, patches, DIM)
        cls = self.cls_token.expand(patches.shape[0], -1, -1)
        tokens = torch.cat([cls, patches], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(tokens))[:, 0])


def vit_tiny_inputs(seed: int, image: int = IMAGE) -> tuple[torch.Tensor, ...]:
    """One 1×3×``image``×``image`` image of seeded normal noise."""
    return (seeded_randn(seed, 1, 3, image, image),)


@register_model(
    "vit_tiny",
    inputs=vit_tiny_inputs,
    emulation={"image": EMULATION_IMAGE},
)
def vit_tiny(image: int = IMAGE) -> nn.Module:
    """ViT (6 blocks × 256, 4 heads, 197 tokens): GEMM-heavy, with transposes between GEMMs.

    Stresses linears and batched matmuls (the SME2 case), data movement from head
    reshapes/permutes, and non-delegated LayerNorm (whose fp16 kernel is wrong at width 256).
    """
    with seeded_weights():
        return ViT(image).eval()
