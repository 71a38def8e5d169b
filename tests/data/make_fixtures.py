"""Re-create the real ETDump fixtures in this directory (needs torch and executorch).

    python tests/data/make_fixtures.py

Each model is exported with ``to_edge_transform_and_lower(..., XnnpackPartitioner())`` and run
with ExecuTorch's Python bindings in its own subprocess (one ``write_etdump_result_to_file`` per
process: a second one crashes). Timings differ on every run; the test assertions only use
structure and relations (nesting, sums, Inspector agreement), never these files' numbers.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

HERE = Path(__file__).parent


class Cnn(nn.Module):
    """Convolutions (regular, depthwise, transposed), pooling, resize, concat, pad, mean, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = nn.Conv2d(16, 32, 1)
        self.de = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.fc = nn.Linear(48, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.hardswish(self.bn(self.c1(x)))
        x = self.pw(F.relu(self.dw(x)))
        y = F.avg_pool2d(F.max_pool2d(x, 2), 2)
        y = F.interpolate(y, scale_factor=4, mode="bilinear", align_corners=False)
        z = torch.sigmoid(self.de(y))[:, :, ::2, ::2]
        x = torch.clamp(F.pad(torch.cat([x, z], dim=1), (1, 1, 1, 1)), -1.0, 1.0)
        return self.fc(x.mean(dim=(2, 3)))


class Attention(nn.Module):
    """One transformer block: LayerNorm (never delegated), linears, batch matmuls, softmax."""

    def __init__(self, d: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln(x)).split(d, dim=-1)
        q, k, v = (m.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for m in (q, k, v))
        a = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * 0.25, dim=-1)
        return x + self.proj(torch.matmul(a, v).transpose(1, 2).reshape(b, t, d))


# file name → (module, example input, dtype, forwards)
FIXTURES = {
    "xnnpack_cnn_fp32_3runs.etdp": (Cnn, (1, 3, 32, 32), torch.float32, 3),
    "xnnpack_attention_fp16_2runs.etdp": (Attention, (1, 16, 64), torch.float16, 2),
}

RUN = """
import sys, torch
from executorch.extension.pybindings.portable_lib import _load_for_executorch
module = _load_for_executorch(sys.argv[1], enable_etdump=True, debug_buffer_size=0)
inputs = torch.load(sys.argv[2])
for _ in range(int(sys.argv[4])):
    module.forward(inputs)
module.write_etdump_result_to_file(sys.argv[3])
"""


def main() -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (cls, shape, dtype, forwards) in FIXTURES.items():
            model = cls().eval().to(dtype)
            inputs = (torch.randn(shape, dtype=dtype),)
            program = to_edge_transform_and_lower(
                torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()]
            ).to_executorch()
            pte, saved = Path(tmp, "model.pte"), Path(tmp, "inputs.pt")
            pte.write_bytes(program.buffer)
            torch.save(inputs, saved)
            command = [sys.executable, "-c", RUN, str(pte), str(saved), str(HERE / name)]
            subprocess.run([*command, str(forwards)], check=True)
            print(f"{name}: {(HERE / name).stat().st_size} bytes")


if __name__ == "__main__":
    main()
