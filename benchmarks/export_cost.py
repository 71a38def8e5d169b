"""What our export costs next to a bare ExecuTorch export of the same model (issue 21).

For every example model × dtype (fp32 and int8 by default), one process times, interleaved per
model and repeated (the minimum of the repeats counts: a shared machine only ever slows a run):

- **ours**: ``export_model`` cold — an empty temporary export cache, the in-process key and
  failure memories cleared — so it pays what a cold session pays: the traced-program key
  (build, trace and hash the model), build + eager reference outputs, ``torch.export``, PT2E
  quantization (int8), lowering with ETRecord generation, ``to_executorch``, writing the
  ``.pte``, ETRecord, inputs and outputs, and the numerics run in the native host runner (built
  once per machine and cached like in a session: not counted). The key builds the model (the
  factory) and the export lowers that very model: our "build model" is the eager reference run;
- **bare**: ``to_edge_transform_and_lower(torch.export.export(model, inputs),
  partitioner=[XnnpackPartitioner()]).to_executorch()`` of the same model, with the same PT2E
  quantizer configuration for int8 (XNNPACK quantizer, symmetric per-channel, static,
  calibrated on the same four seeds) and the ``.pte`` buffer taken.

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
from pytest_sme2.export.registry import ModelSpec, get_model, registered_models  # noqa: E402

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
    """Seconds of the bare ExecuTorch export (no cache, no checks), in all and per stage."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    stages: dict[str, float] = {}

    def timed(name: str, step: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        value = step()
        stages[name] = stages.get(name, 0.0) + time.perf_counter() - started
        return value

    warnings.simplefilter("ignore")  # the libraries' deprecations: ours silences them too
    started = time.perf_counter()
    model = timed("build model", spec.build)
    inputs = spec.example_inputs(recipes.EXAMPLE_SEED)
    exported = timed("torch.export", lambda: torch.export.export(model, inputs))
    if dtype == "int8":

        def quantize() -> Any:
            from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
                XNNPACKQuantizer,
                get_symmetric_quantization_config,
            )
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

            quantizer = XNNPACKQuantizer().set_global(
                get_symmetric_quantization_config(is_per_channel=True)
            )
            prepared = prepare_pt2e(exported.module(), quantizer)
            with torch.no_grad():
                for seed in recipes.CALIBRATION_SEEDS:
                    prepared(*spec.example_inputs(seed))
            return convert_pt2e(prepared)

        quantized = timed("quantize", quantize)
        exported = timed("torch.export", lambda: torch.export.export(quantized, inputs))
    edge = timed(
        "lower",
        lambda: to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]),
    )
    timed("to_executorch", lambda: edge.to_executorch().buffer)
    return {"total": time.perf_counter() - started, **stages}


def _min(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the fastest of the runs."""
    return {key: min(run.get(key, 0.0) for run in runs) for key in runs[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(s.name for s in registered_models()))
    parser.add_argument("--dtypes", default="fp32,int8")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    cases = [
        (get_model(name), dtype)
        for name in args.models.split(",")
        for dtype in args.dtypes.split(",")
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

    header = f"{'model':<20}{'dtype':<6}{'ours s':>8}{'bare s':>8}{'ratio':>7}  " + " ".join(
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
            f"{name:<20}{dtype:<6}{mine['total']:>8.2f}{theirs['total']:>8.2f}{ratio:>6.2f}×  "
            + " ".join(f"{stages.get(stage, 0.0):>13.2f}" for stage in OUR_STAGES)
        )
    for (name, dtype), reason in failed.items():
        print(f"{name:<20}{dtype:<6}not exported: {reason}")
    if worst[0] <= TARGET:
        print(f"every ratio within {TARGET}×")
        return 0
    print(f"worst ratio {worst[0]:.2f}× > {TARGET}×: {worst[1]}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
