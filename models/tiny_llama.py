"""A tiny Llama-style decoder in its two phases, the way ExecuTorch users ship LLMs.

Llama's blocks at toy width: RMSNorm, rotary position embeddings, grouped-query attention (6
query heads sharing 2 key/value heads), a SwiGLU MLP, untied embedding and LM head; 2 blocks,
9.4 M parameters at the defaults (4 blocks showed nothing more — the same kernels, categories
and prefill/decode contrast — and an LLM's lowering costs by the block: its six exports were
40 % of the README main job's export CPU). The KV cache is static and lives in the module as
mutable buffers (``k_cache``/``v_cache``, the whole context window), written in place at the
positions given, as ExecuTorch's ``-kv`` export does without its custom SDPA operator. One
module, two programs:

- ``tiny_llama_prefill``: the prompt's tokens in one call (positions 0…N−1) into an empty cache —
  matrix × matrix work, GEMM-bound.
- ``tiny_llama_decode``: one token at position N of a cache holding a real prompt's keys and
  values (filled in eager when the model is built) — matrix × vector work, GEMV-bound.

Both return the last position's logits. Every width is a multiple of 32, so 8da4w quantizes
every linear layer. On emulated devices a 16-token prompt and a 32-token window keep an
inference to a few seconds of qemu; the kernels chosen do not depend on those sizes.
"""

from __future__ import annotations

import torch
from torch import nn

from models._seeding import seeded_weights
from pytest_sme2.export.model_spec import register_model

VOCAB = 8192
DIM = 384
HEADS = 6
KV_HEADS = 2
HIDDEN = 1024
#: the prompt the decode step's cache holds (a fixed seed: the same cache in every process)
PROMPT_SEED = 1000
EMULATION = {"layers": 2, "prompt": 16, "context": 32}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of ``x`` (batch, heads, tokens, head_dim) by its halves."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)


class Attention(nn.Module):
    """Grouped-query attention over a static KV cache written at ``positions``."""

    def __init__(self, context: int) -> None:
        super().__init__()
        self.head_dim = DIM // HEADS
        self.q = nn.Linear(DIM, HEADS * self.head_dim, bias=False)
        self.k = nn.Linear(DIM, KV_HEADS * self.head_dim, bias=False)
        self.v = nn.Linear(DIM, KV_HEADS * self.head_dim, bias=False)
        self.o = nn.Linear(HEADS * self.head_dim, DIM, bias=False)
        cache = torch.zeros(1, KV_HEADS, context, self.head_dim)
        self.register_buffer("k_cache", cache.clone())
        self.register_buffer("v_cache", cache.clone())

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> torch.Tensor:
        tokens = x.shape[1]
        q = self.q(x).view(1, tokens, HEADS, self.head_dim).transpose(1, 2)
        k = self.k(x).view(1, tokens, KV_HEADS, self.head_dim).transpose(1, 2)
        v = self.v(x).view(1, tokens, KV_HEADS, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        self.k_cache[:, :, positions] = k
        self.v_cache[:, :, positions] = v
        keys = self.k_cache.repeat_interleave(HEADS // KV_HEADS, dim=1)
        values = self.v_cache.repeat_interleave(HEADS // KV_HEADS, dim=1)
        scores = q @ keys.transpose(2, 3) / self.head_dim**0.5
        window = torch.arange(self.k_cache.shape[2])
        visible = window[None, :] <= positions[:, None]  # causal, and nothing past the cache
        scores = torch.where(visible, scores, torch.full_like(scores, float("-inf")))
        attended = torch.softmax(scores, dim=-1) @ values
        return self.o(attended.transpose(1, 2).reshape(1, tokens, DIM))


class Block(nn.Module):
    def __init__(self, context: int) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(DIM)
        self.attention = Attention(context)
        self.mlp_norm = RMSNorm(DIM)
        self.gate = nn.Linear(DIM, HIDDEN, bias=False)
        self.up = nn.Linear(DIM, HIDDEN, bias=False)
        self.down = nn.Linear(HIDDEN, DIM, bias=False)

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), positions, cos, sin)
        h = self.mlp_norm(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class TinyLlama(nn.Module):
    """``forward(tokens, start)``: ``tokens`` (1, T) int64 at positions ``start``…``start+T−1``
    (``start`` a 1-element int64 tensor) → the last position's logits (1, VOCAB)."""

    def __init__(self, layers: int, context: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block(context) for _ in range(layers))
        self.norm = RMSNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        half = DIM // HEADS // 2
        angles = torch.outer(
            torch.arange(context, dtype=torch.float32),
            1.0 / (10000.0 ** (torch.arange(half, dtype=torch.float32) / half)),
        )
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, tokens: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        positions = start + torch.arange(tokens.shape[1])
        cos, sin = self.cos[positions], self.sin[positions]
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x, positions, cos, sin)
        return self.head(self.norm(x[:, -1, :]))


def _tokens(seed: int, count: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, count), generator=torch.Generator().manual_seed(seed))


def prefill_inputs(
    seed: int, layers: int = 2, prompt: int = 64, context: int = 128
) -> tuple[torch.Tensor, ...]:
    """A prompt of ``prompt`` seeded token ids at position 0."""
    return _tokens(seed, prompt), torch.zeros(1, dtype=torch.int64)


def decode_inputs(
    seed: int, layers: int = 2, prompt: int = 64, context: int = 128
) -> tuple[torch.Tensor, ...]:
    """One seeded token id at position ``prompt``, right after the cached prompt."""
    return _tokens(seed, 1), torch.tensor([prompt], dtype=torch.int64)


DTYPES = ("fp32", "8da4w", "int8-dynamic")
#: ExecuTorch 1.5.1 runs 8da4w's QB4W linear layers on KleidiAI's NEON i8mm kernels with SME2 on
#: as off (measured on qemu-sme2: 1.00–1.02×): there is no SME2 kernel to require there yet.
NO_SME2_KERNEL_YET = {"require_sme2_kernels": False}


@register_model(
    "tiny_llama_prefill",
    inputs=prefill_inputs,
    dtypes=DTYPES,
    emulation=EMULATION,
    tokens="prompt",
    # instruction ratios measured on qemu-sme2: fp32 3.93×, int8-dynamic 1.48×
    expect={
        "fp32": {"instruction_ratio_floor": 3.0},
        "int8-dynamic": {"instruction_ratio_floor": 1.3},
        "8da4w": NO_SME2_KERNEL_YET,
    },
)
def tiny_llama_prefill(layers: int = 2, prompt: int = 64, context: int = 128) -> nn.Module:
    """Llama-style decoder, prefill: a 64-token prompt in one call (GEMM-bound).

    RoPE, GQA, RMSNorm, SwiGLU and a static KV cache as mutable buffers, written at positions
    0…63 of an empty 128-token window.
    """
    with seeded_weights():
        return TinyLlama(layers, context).eval()


@register_model(
    "tiny_llama_decode",
    inputs=decode_inputs,
    dtypes=DTYPES,
    emulation=EMULATION,
    tokens=1,
    # instruction ratios measured on qemu-sme2: fp32 1.97×, int8-dynamic 1.50× (matrix × vector
    # gains less from SME2's outer products than the prefill's matrix × matrix)
    expect={
        "fp32": {"instruction_ratio_floor": 1.5},
        "int8-dynamic": {"instruction_ratio_floor": 1.3},
        "8da4w": NO_SME2_KERNEL_YET,
    },
)
def tiny_llama_decode(layers: int = 2, prompt: int = 64, context: int = 128) -> nn.Module:
    """Llama-style decoder, decode: one token after a cached 64-token prompt (GEMV-bound).

    The same model as the prefill; its KV cache holds a seeded prompt's keys and values, filled
    in eager when the model is built, and the step writes position 64 and attends to 0…64.
    """
    with seeded_weights():
        model = TinyLlama(layers, context).eval()
    with torch.no_grad():
        model(*prefill_inputs(PROMPT_SEED, layers, prompt, context))
    return model
