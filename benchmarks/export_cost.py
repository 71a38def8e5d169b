"""What our export costs next to a bare ExecuTorch export of the same model (issue 21).

For every example model × dtype (all of them by default), one process times, interleaved per
model and repeated (the minimum of the repeats counts: a shared machine only ever slows a run):

- **ours**: ``export_model`` cold — an empty temporary export cache, the in-process key and
  failure memories cleared — so it pays what a cold session pays: the traced-program key
  (build, trace and hash the model), build + eager reference outputs, ``torch.export``, PT2E
  quantization (int8), lowering with ETRecord generation, ``to_executorch``, writing the
  ``.pte``, ETRecord, inputs and outputs, and the numerics run in the native host runner (built
  once per machine and cached like in a session: not counted). The key builds the model (the
  factory) and the export lowers that very model: our "build model" is the eager reference run;
- **bare**: ``to_edge_transform_and_lower(torch.export.export(model, inputs),
  partitioner=[XnnpackPartitioner()]).to_executorch()`` of the same model under
  ``torch.no_grad()``, prepared for its dtype as a bare ExecuTorch user would: ``.half()`` for
  fp16, the same PT2E quantizer configuration for int8 and int8-dynamic (XNNPACK quantizer,
  symmetric per-channel, calibrated on the same four seeds), torchao's
  ``Int8DynamicActivationIntxWeightConfig`` (int4, groups of 32) for 8da4w, and the ``.pte``
  buffer taken.

Both pipelines are warmed up once on toy_cnn first (torch.export's one-time start-up is no
cost of either). One row per model × dtype: both times, their ratio, and ours per stage, with
``etrecord`` = our lowering minus the bare lowering (ETRecord generation happens inside
``to_edge_transform_and_lower``) plus saving it. The table's last line says whether every ratio
is within the target (1.2×) and, when not, which of our stages holds the difference.

    python benchmarks/export_cost.py [--models toy_cnn,vit_tiny] [--dtypes fp32,int8]
                                     [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import models  # noqa: E402, F401  (registers the examples)
from pytest_sme2.errors import STAGES, ExportError  # noqa: E402
from pytest_sme2.export import exporter, key, recipes  # noqa: E402
from pytest_sme2.export.model_spec import ModelSpec, get_model, registered_models  # noqa: E402

TARGET = 1.2
#: Our stages as the table shows them, in pipeline order ("key" is the traced-program key).
OUR_STAGES = ("key", *STAGES)
BARE_STAGES = ("build model", "torch.export", "quantize", "lower", "to_executorch")


def ours(spec: ModelSpec, dtype: str) -> dict[str, float]:
    """Seconds of a cold ``export_model``, in all and per stage."""
    key._FINGERPRINTS.clear()
    exporter._FAILURES.clear()
    with tempfile.TemporaryDirectory(prefix="sme2-export-cost-") as cache:
        started = time.perf_counter()
        key.artifact_key(spec, dtype)
        keyed = time.perf_counter()
        artifact = exporter.export_model(spec, dtype, cache_dir=Path(cache))
        total = time.perf_counter() - started
        manifest = json.loads((artifact.directory / exporter.MANIFEST_NAME).read_text())
    stages = {"key": keyed - started, **artifact.timings_s}
    stages["numerics"] = manifest["numerics"]["seconds"]
    return {"total": total, **stages}


def bare(spec: ModelSpec, dtype: str) -> dict[str, float]:
    """Seconds of the bare ExecuTorch export (no cache, no checks), in all and per stage: the
    model prepared for its dtype as ExecuTorch's and torchao's docs show it, exported and lowered
    under ``torch.no_grad()`` (a model's parameters require grad; the in-place write of a KV
    cache then fails in torch.export: "a leaf Variable that requires grad…")."""
    import torch

    stages: dict[str, float] = {}

    def timed(name: str, step: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        value = step()
        stages[name] = stages.get(name, 0.0) + time.perf_counter() - started
        return value

    warnings.simplefilter("ignore")  # the libraries' deprecations: ours silences them too
    started = time.perf_counter()
    with torch.no_grad():
        model = timed("build model", spec.build)
        inputs = spec.example_inputs(recipes.EXAMPLE_SEED)
        if dtype == "fp16":
            model = model.half()
            inputs = tuple(t.half() if t.is_floating_point() else t for t in inputs)
        if dtype == "8da4w":
            timed("quantize", lambda: _torchao_8da4w(model))
        exported = timed("torch.export", lambda: torch.export.export(model, inputs))
        if dtype in ("int8", "int8-dynamic"):
            quantized = timed("quantize", lambda: _pt2e(spec, exported, dtype == "int8-dynamic"))
            exported = timed("torch.export", lambda: torch.export.export(quantized, inputs))
        _lower(exported, timed)
    return {"total": time.perf_counter() - started, **stages}


def _pt2e(spec: ModelSpec, exported: Any, dynamic: bool) -> Any:
    """PT2E with the XNNPACK quantizer (symmetric, per-channel), calibrated on our seeds."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic)
    )
    prepared = prepare_pt2e(exported.module(), quantizer)
    for seed in recipes.CALIBRATION_SEEDS:
        prepared(*spec.example_inputs(seed))
    return convert_pt2e(prepared)


def _torchao_8da4w(model: Any) -> None:
    """torchao's 8da4w on every linear layer its group divides (as ExecuTorch's LLM exporter)."""
    import torch
    from torchao.quantization import quantize_
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

    config = Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4, weight_granularity=PerGroup(recipes.GROUP_SIZE)
    )
    quantize_(
        model,
        config,
        filter_fn=lambda module, _: (
            isinstance(module, torch.nn.Linear) and module.in_features % recipes.GROUP_SIZE == 0
        ),
    )


def _lower(exported: Any, timed: Callable[[str, Callable[[], Any]], Any]) -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    edge = timed(
        "lower",
        lambda: to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]),
    )
    timed("to_executorch", lambda: edge.to_executorch().buffer)


def _min(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the fastest of the runs."""
    return {key: min(run.get(key, 0.0) for run in runs) for key in runs[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(s.name for s in registered_models()))
    parser.add_argument("--dtypes", default="", help="default: every dtype of each model")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    cases = [
        (get_model(name), dtype)
        for name in args.models.split(",")
        for dtype in (args.dtypes.split(",") if args.dtypes else get_model(name).dtypes)
        if dtype in get_model(name).dtypes
    ]

    warm = get_model("toy_cnn")
    print("warming up both pipelines on toy_cnn fp32...", flush=True)
    ours(warm, "fp32")
    bare(warm, "fp32")

    results: dict[tuple[str, str], tuple[list[dict[str, float]], list[dict[str, float]]]] = {}
    failed: dict[tuple[str, str], str] = {}
    for repeat in range(args.repeat):
        for spec, dtype in cases:
            case = (spec.name, dtype)
            if case in failed:
                continue
            print(f"[{repeat + 1}/{args.repeat}] {spec.name} {dtype}", flush=True)
            try:
                mine = ours(spec, dtype)
            except ExportError as err:
                failed[case] = str(err)
                continue
            theirs = bare(spec, dtype)
            runs = results.setdefault(case, ([], []))
            runs[0].append(mine)
            runs[1].append(theirs)

    header = f"{'model':<20}{'dtype':<13}{'ours s':>8}{'bare s':>8}{'ratio':>7}  " + " ".join(
        f"{stage:>13}" for stage in OUR_STAGES
    )
    print()
    print(f"ours per stage, seconds (min of {args.repeat}); etrecord = our lower - bare lower")
    print("+ its save (serialize is the rest of writing the entry)")
    print(header)
    worst: tuple[float, str] = (0.0, "")
    for (name, dtype), (mine_runs, bare_runs) in results.items():
        mine, theirs = _min(mine_runs), _min(bare_runs)
        stages = dict(mine)
        stages["etrecord"] = stages.get("etrecord", 0.0) + max(
            0.0, stages["lower"] - theirs["lower"]
        )
        stages["lower"] = min(stages["lower"], theirs["lower"])
        ratio = mine["total"] / theirs["total"]
        extra = {
            stage: stages.get(stage, 0.0) - (theirs.get(stage, 0.0) if stage in BARE_STAGES else 0)
            for stage in OUR_STAGES
        }
        biggest = max(extra, key=lambda stage: extra[stage])
        worst = max(
            worst, (ratio, f"{name} {dtype}: most of it is {biggest} (+{extra[biggest]:.2f} s)")
        )
        print(
            f"{name:<20}{dtype:<13}{mine['total']:>8.2f}{theirs['total']:>8.2f}{ratio:>6.2f}×  "
            + " ".join(f"{stages.get(stage, 0.0):>13.2f}" for stage in OUR_STAGES)
        )
    for (name, dtype), reason in failed.items():
        print(f"{name:<20}{dtype:<13}not exported: {reason}")
    verdict = "within" if worst[0] <= TARGET else "beyond"
    print(f"worst ratio {worst[0]:.2f}× ({verdict} the {TARGET}× target): {worst[1]}")
    return 0 if worst[0] <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
