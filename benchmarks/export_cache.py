"""What a warm export hit costs now that the cache key is the program, next to the old key.

The key used to be a hash of the factory's source file (and the files it declared); it is now
``program_fingerprint``: the model built, traced and hashed with its weights and inputs, which
sees changes the old key missed (issue 9) and costs what building the model costs. For every
example model × dtype (and the reference workload every session exports), a fresh interpreter
imports the models (hence torch, as a user's model module would) and times, in this order:

- the old key: sha256 of the factory's file, ``models/_seeding.py`` and qualnames, as it was;
- the new key: ``artifact_key``, which builds and traces the model (first key of the process);
- the rest of the warm hit (``export_model`` reading the cached entry), and whether anything
  imported executorch (a warm hit must never lower).

A session pays the new key once per model, not once per dtype (it is kept per process): one more
fresh interpreter computes every case's key in suite order and gives the per-session extra cost.
With ``--suite`` the warm host suite (``pytest tests/test_suite.py -p no:cacheprovider -q``) is
timed too, and its time is divided by that time less the extra cost: the new key must keep the
suite within 1.15× of what it took with the old key.

    python benchmarks/export_cache.py [--models toy_cnn,vit_tiny] [--dtypes fp32,int8]
                                      [--cache DIR] [--suite]

Entries missing from the cache (default: the user's cache, which the suite reads) are exported
first. A failed export is not cached on disk (a fixed environment must be able to retry), so
every fresh process exports it again; it is listed as such. Exits 1 if a warm hit imported
executorch or the suite ratio exceeds 1.15.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import inspect
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import models  # noqa: E402, F401  (registers the examples)
from pytest_sme2.cache import cache_root, content_key  # noqa: E402
from pytest_sme2.errors import ExportError, NumericsError  # noqa: E402
from pytest_sme2.export.exporter import export_model  # noqa: E402
from pytest_sme2.export.key import (  # noqa: E402
    RECIPE_VERSION,
    VERSIONED_PACKAGES,
    artifact_key,
    package_versions,
)
from pytest_sme2.export.model_spec import ModelSpec, get_model, registered_models  # noqa: E402
from pytest_sme2.export.recipes import CALIBRATION_SEEDS, EXAMPLE_SEED  # noqa: E402
from pytest_sme2.export.reference import REFERENCE  # noqa: E402

SUITE_TARGET = 1.15
SUITE = [
    sys.executable, "-m", "pytest", "tests/test_suite.py", "-p", "no:cacheprovider", "-q",
    "--sme2-device=host",
]  # fmt: skip


def old_key(spec: ModelSpec, dtype: str) -> str:
    """The key as it was: the factory's source file and the seeding file the examples declared
    (``extra_files``), qualnames and params — the files read from disk, nothing built."""
    digest = hashlib.sha256(spec.name.encode())
    digest.update(spec.factory.__qualname__.encode())
    digest.update(spec.inputs.__qualname__.encode())
    source = Path(inspect.getsourcefile(spec.factory) or "")
    files = [source] + ([REPO / "models" / "_seeding.py"] if spec is not REFERENCE else [])
    for path in files:
        digest.update(path.read_bytes())
    if spec.params:
        digest.update(repr(spec.params).encode())
    versions = package_versions()
    return content_key(
        RECIPE_VERSION,
        digest.hexdigest(),
        dtype,
        repr((EXAMPLE_SEED, CALIBRATION_SEEDS)),
        *(f"{package}={versions[package]}" for package in VERSIONED_PACKAGES),
    )


def _spec(name: str) -> ModelSpec:
    return REFERENCE if name == REFERENCE.name else get_model(name)


def _executorch_imported() -> bool:
    return any(name.startswith("executorch") for name in sys.modules)


def fresh_hit(name: str, dtype: str, cache: Path) -> dict[str, object]:
    """In this (fresh) process: old key, new key, the rest of the warm hit; seconds each."""
    spec = _spec(name)
    started = time.perf_counter()
    old_key(spec, dtype)
    old_done = time.perf_counter()
    artifact_key(spec, dtype)
    new_done = time.perf_counter()
    outcome = "ok"
    try:
        export_model(spec, dtype, cache_dir=cache)
    except NumericsError:  # cached with its numbers: raised again from the entry
        outcome = "wrong numerics (cached)"
    except ExportError as err:  # failures are not cached on disk: this process tried again
        outcome = f"failed at {err.stage}, not cached: exported again"
    return {
        "old": old_done - started,
        "new": new_done - old_done,
        "rest": time.perf_counter() - new_done,
        "executorch": _executorch_imported(),
        "outcome": outcome,
    }


def session_keys(cases: list[tuple[str, str]]) -> dict[str, float]:
    """In this (fresh) process: every case's old and new key in order, seconds in all."""
    started = time.perf_counter()
    for name, dtype in cases:
        old_key(_spec(name), dtype)
    old_done = time.perf_counter()
    for name, dtype in cases:
        artifact_key(_spec(name), dtype)
    return {"old": old_done - started, "new": time.perf_counter() - old_done}


def _in_fresh_process(*args: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _suite_seconds() -> tuple[float, int]:
    started = time.perf_counter()
    proc = subprocess.run(SUITE, cwd=REPO, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    print(f"  suite: {proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else '?'}")
    return seconds, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    examples = [s.name for s in registered_models() if s.factory.__module__.startswith("models.")]
    parser.add_argument("--models", default=",".join(examples))
    parser.add_argument("--dtypes", default="", help="default: every dtype of each model")
    parser.add_argument("--cache", type=Path, help="export cache (default: the user's)")
    parser.add_argument("--suite", action="store_true", help="also time the warm host suite")
    parser.add_argument("--fresh-hit", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--session-keys", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fresh_hit:
        name, dtype, cache = args.fresh_hit
        print(json.dumps(fresh_hit(name, dtype, Path(cache))))
        return 0
    if args.session_keys:
        pairs = [case.split(":", 1) for case in args.session_keys]
        print(json.dumps(session_keys([(name, dtype) for name, dtype in pairs])))
        return 0

    cache = args.cache or cache_root() / "exports"
    if args.suite and args.cache and args.cache != cache_root() / "exports":
        parser.error("--suite reads the user's cache: leave --cache out")
    wanted = set(args.dtypes.split(",")) if args.dtypes else None
    cases = [
        (spec.name, dtype)
        for spec in (get_model(name) for name in args.models.split(","))
        for dtype in spec.dtypes
        if wanted is None or dtype in wanted
    ] + [(REFERENCE.name, "fp32")]
    for name, dtype in cases:  # warm the cache: the figures are about warm hits
        with contextlib.suppress(ExportError):
            export_model(_spec(name), dtype, cache_dir=cache)

    print(f"cache: {cache}")
    print("fresh process per case; new key = build + trace + hash; rest = reading the entry")
    print(f"{'model-dtype':30} {'old key ms':>10} {'new key ms':>10} {'rest ms':>8}  outcome")
    lowered = []
    for name, dtype in cases:
        hit = _in_fresh_process("--fresh-hit", name, dtype, str(cache))
        label = f"{name}-{dtype}"
        print(
            f"{label:30} {1000 * float(hit['old']):10.1f} {1000 * float(hit['new']):10.1f} "
            f"{1000 * float(hit['rest']):8.1f}  {hit['outcome']}"
        )
        if hit["executorch"] and "not cached" not in str(hit["outcome"]):
            lowered.append(label)
    session = _in_fresh_process("--session-keys", *(f"{n}:{d}" for n, d in cases))
    extra = float(session["new"]) - float(session["old"])
    print(
        f"one session, every key in one process: old {1000 * float(session['old']):.1f} ms, "
        f"new {1000 * float(session['new']):.0f} ms: +{extra:.2f} s per session"
    )
    status = 0
    if lowered:
        print(f"warm hits that imported executorch: {lowered}")
        status = 1
    if args.suite:
        seconds, code = _suite_seconds()
        ratio = seconds / (seconds - extra)
        verdict = "within" if ratio <= SUITE_TARGET else "OVER"
        print(
            f"warm host suite: {seconds:.1f} s with the new key (pytest exit {code}); "
            f"{seconds - extra:.1f} s without its extra {extra:.2f} s: "
            f"ratio {ratio:.3f}× ({verdict} the {SUITE_TARGET}× target)"
        )
        status |= ratio > SUITE_TARGET
    return status


if __name__ == "__main__":
    sys.exit(main())
