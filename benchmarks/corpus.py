"""Run the corpus of real architectures (``benchmarks/corpus_models.py``) as a user project would.

For each device, a throw-away project whose conftest imports the corpus module runs the suite's
four-line test twice per model: once recording baselines (``--sme2-update-baselines`` into the
project), then unchanged, judged against what it just recorded. An architecture the pipeline
handles passes both; one it does not says why in one line. A model at a time, so its rows print
as soon as they are known (a cold corpus takes an hour or more on a busy 2-core machine). One
row per case and device:

- exported, or the one-line reason why not (the ``ExportError`` the session reported);
- quantization error (int8 eager against fp32: what the weights lose, never judged) and
  program error (the program against the eager model it was lowered from: judged), from the
  export's manifest (see :func:`numerics`);
- the verdict of the recording run and of the re-run;
- export seconds (the manifest's stage timings, numerics included);
- on devices that count instructions (qemu-sme2): whether the recorded baseline holds
  instructions per operator for both SME2-on and SME2-off.

and the wall time. Not part of CI: a cold run exports 2 × 2 × 10 programs and emulates 20 cases.

    python benchmarks/corpus.py [--devices host,qemu-sme2] [--models hf_vit,hf_swin]
                                [--dtypes fp32,int8] [--work DIR]

Needs the ``corpus`` extra (``pip install -e ".[corpus]"``). Exports go to the user's cache, so
a second run reuses them (its export seconds are those recorded when they were made).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_sme2.cache import write_atomic  # noqa: E402
from pytest_sme2.devices.kinds import BUILT_IN_KINDS  # noqa: E402
from pytest_sme2.export.exporter import Artifact, load_cached  # noqa: E402
from pytest_sme2.export.model_spec import ModelSpec, registered_models  # noqa: E402

CONFTEST = "import benchmarks.corpus_models  # noqa: F401  (registers the corpus)\n"
#: The suite's own test: what a user's project runs.
TEST = """import pytest


@pytest.mark.sme2(require_sme2_kernels=True)
def test_model(sme2_measurement, sme2_judge):
    sme2_judge(sme2_measurement)
"""
#: A session's deadline: 40 programs exported cold on 2 busy cores stay well within it.
SESSION_TIMEOUT_S = 3 * 3600


@dataclass(frozen=True)
class Row:
    """One case on one device, as printed."""

    case: str
    device: str
    exported: str
    quantization_error: str
    program_error: str
    verdict: str
    export_s: str
    per_operator: str


def portable_only(baselines: Path) -> None:
    """Drop the time records the recording run wrote, keeping the portable part: what the
    project commits for host (README, Machine classes), so the re-run judges what a 2-core VM
    shared with other work can judge. ``--judge-time`` keeps them."""
    for path in baselines.rglob("*.json"):
        stored = json.loads(path.read_text())
        stored["machines"] = {}
        write_atomic(path, json.dumps(stored, indent=2) + "\n")


def project(root: Path, conftest: str = CONFTEST) -> Path:
    """A user project: ``conftest`` (by default, one registering the corpus) and the suite's
    test."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "conftest.py").write_text(conftest)
    (root / "test_corpus.py").write_text(TEST)
    return root


def session(root: Path, device: str, options: Sequence[str], name: str) -> dict[str, str]:
    """Run the project's suite on ``device``; each case's outcome, by case id (``model-dtype``)."""
    junit = root / f"{name}.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--sme2-device={device}",
        f"--sme2-baseline-dir={root / 'baselines'}",
        f"--sme2-artifacts={root / name}",
        f"--junitxml={junit}",
        *options,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    with (root / f"{name}.log").open("w") as log:
        subprocess.run(
            command,
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=SESSION_TIMEOUT_S,
            check=False,
        )
    if not junit.is_file():
        raise SystemExit(f"the {name} session on {device} wrote no {junit}; see {root / name}.log")
    return outcomes(junit)


def outcomes(junit: Path) -> dict[str, str]:
    """``passed``, ``xfailed: …`` (an export the plugin refused), ``skipped: …`` or
    ``failed: <first line>`` per case id, from a JUnit XML."""
    found: dict[str, str] = {}
    for case in ET.parse(junit).iter("testcase"):
        case_id = case.get("name", "").partition("[")[2].rstrip("]")
        problems = [child for child in case if child.tag in ("failure", "error", "skipped")]
        if not problems:
            found[case_id] = "passed"
            continue
        child = problems[0]
        word = {"failure": "failed", "error": "error"}.get(child.tag, "skipped")
        if child.get("type") == "pytest.xfail":
            word = "xfailed"
        found[case_id] = f"{word}: {first_line(child.get('message', '') or child.text or '')}"
    return found


def first_line(message: str) -> str:
    """The line of ``message`` that says what happened: an export's own sentence if there is one
    (pytest prefixes setup errors with the fixture's traceback), else the first non-empty one."""
    lines = [
        line.strip().removeprefix("E").strip().removeprefix("Failed: ")
        for line in message.splitlines()
    ]
    lines = [line for line in lines if line]
    chosen = next((line for line in lines if "export of " in line), lines[0] if lines else "")
    chosen = chosen[chosen.find("export of ") :] if "export of " in chosen else chosen
    return chosen if len(chosen) <= 200 else chosen[:197] + "..."


def numerics(artifact: Artifact) -> tuple[str, str]:
    """(quantization error, program error) of an export, from its manifest.

    The quantization error (the converted int8 eager model against eager fp32) is recorded,
    never judged: it is what the user's weights lose to int8. The program error (the program
    against the eager model it was lowered from) is judged: "REFUSED" means ExecuTorch/XNNPACK
    computed that model wrongly. Degenerate eager outputs make both vacuous, and say so.
    """
    quantization = artifact.quantization_error
    quantized = "—" if quantization is None else f"rel {quantization.max_rel:.2g}"
    program = artifact.program_error
    if program is None:
        return quantized, "not checked"
    verdict = "ok" if program.ok else "REFUSED"
    degenerate = f", vacuous: {artifact.degenerate}" if artifact.degenerate else ""
    return quantized, f"{program.headline()} {verdict}{degenerate}"


def per_operator(baselines: Path, device: str, case_id: str) -> str:
    """Whether the recorded baseline counts instructions per operator, SME2-on and SME2-off."""
    paths = sorted(baselines.rglob(f"{case_id}.json"))
    if not paths:
        return "no baseline"
    variants = json.loads(paths[0].read_text())["variants"]
    counted = [
        v for v in ("sme2-on", "sme2-off") if variants.get(v, {}).get("operator_instructions")
    ]
    return "yes (on, off)" if len(counted) == 2 else f"only {counted}" if counted else "NO"


def rows(
    specs: Sequence[ModelSpec],
    dtypes: Sequence[str],
    device: str,
    root: Path,
    recorded: Mapping[str, str],
    rerun: Mapping[str, str],
) -> list[Row]:
    """One row per case: what the two sessions said and what the export cache holds."""
    emulated = BUILT_IN_KINDS[device].emulates_cpu
    table = []
    for spec in specs:
        built = spec.for_emulation() if emulated else spec
        for dtype in dtypes:
            case_id = f"{spec.name}-{dtype}"
            artifact = load_cached(built, dtype)
            outcome, again = recorded.get(case_id, "not run"), rerun.get(case_id, "not run")
            if artifact is None:
                exported = outcome.partition(": ")[2] if "export of" in outcome else "no"
                quantization, program, seconds = "—", "—", "—"
            else:
                ok = artifact.program_error is not None and artifact.program_error.ok
                exported = "yes" if ok else "refused: program error"
                quantization, program = numerics(artifact)
                seconds = f"{sum(artifact.timings_s.values()):.0f}"
            # an export's reason is in the exported column: the verdicts say only what they were
            outcome, again = (
                o.partition(": ")[0] if "export of" in o else o for o in (outcome, again)
            )
            verdict = outcome if outcome == again else f"{outcome} / re-run {again}"
            table.append(
                Row(
                    case=case_id,
                    device=device,
                    exported=exported,
                    quantization_error=quantization,
                    program_error=program,
                    verdict=verdict,
                    export_s=seconds,
                    per_operator=per_operator(root / "baselines", device, case_id)
                    if emulated
                    else "n/a",
                )
            )
    return table


def markdown(table: Sequence[Row], *, header: bool = True) -> str:
    """The rows as a Markdown table (``header=False``: the rows alone, to print as they come)."""
    columns = (
        "case",
        "device",
        "exported",
        "quantization error",
        "program error",
        "record and re-run",
        "export s",
        "instructions per operator",
    )
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)] if header else []
    for row in table:
        cells = (
            row.case,
            row.device,
            row.exported,
            row.quantization_error,
            row.program_error,
            row.verdict,
            row.export_s,
            row.per_operator,
        )
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", default="host,qemu-sme2")
    parser.add_argument("--models", default=",".join(s.name for s in corpus_specs()))
    parser.add_argument("--dtypes", default=",".join(_corpus().DTYPES))
    parser.add_argument("--work", type=Path, default=None, help="keep the projects here")
    parser.add_argument(
        "--judge-time", action="store_true", help="re-run judges this machine's time records too"
    )
    parser.add_argument(
        "--table-only",
        action="store_true",
        help="run nothing: the table of the sessions already in --work (an interrupted run's)",
    )
    args = parser.parse_args(argv)
    if args.table_only and args.work is None:
        parser.error("--table-only reads the sessions in --work DIR")
    known = {spec.name: spec for spec in corpus_specs()}
    unknown = sorted(set(args.models.split(",")) - set(known))
    if unknown:
        parser.error(f"not in the corpus: {', '.join(unknown)}; it has {', '.join(known)}")
    specs = [known[name] for name in args.models.split(",")]  # in the order given
    dtypes = args.dtypes.split(",")
    work = args.work or Path(tempfile.mkdtemp(prefix="sme2-corpus-"))
    started = time.perf_counter()
    table: list[Row] = []
    if not args.table_only:
        print(markdown(()), flush=True)
    for device in args.devices.split(","):
        root = work / device if args.table_only else project(work / device)
        spread = ["-n", "2"] if BUILT_IN_KINDS[device].emulates_cpu else []
        for spec in specs:  # a model at a time: its rows print as soon as they are known
            if args.table_only:
                done = [root / f"{spec.name}-{name}.xml" for name in ("record", "rerun")]
                if all(path.is_file() for path in done):
                    table += rows([spec], dtypes, device, root, *map(outcomes, done))
                continue
            select = [f"--sme2-models={spec.name}", f"--sme2-dtypes={','.join(dtypes)}"]
            record = [*select, *spread, "--sme2-update-baselines"]
            recorded = session(root, device, record, f"{spec.name}-record")
            if not args.judge_time:
                portable_only(root / "baselines")
            rerun = session(root, device, [*select, *spread], f"{spec.name}-rerun")
            found = rows([spec], dtypes, device, root, recorded, rerun)
            print(markdown(found, header=False), flush=True)
            table += found
    print(f"\nprojects in {work}\n")
    print(markdown(table))
    if not args.table_only:
        print(f"\nwall time {time.perf_counter() - started:.0f} s")
    return 0


def _corpus() -> ModuleType:
    """The corpus module, imported (which registers its models) only when asked for: importing
    this script, as tests/e2e/test_corpus.py does, must not put the corpus into the registry of the
    process, where a suite parametrized over every registered model would export it all."""
    return importlib.import_module("benchmarks.corpus_models")


def corpus_specs() -> list[ModelSpec]:
    """The models ``benchmarks/corpus_models.py`` registers, in its order."""
    name = _corpus().__name__
    return [s for s in registered_models() if s.factory.__module__ == name]


if __name__ == "__main__":
    raise SystemExit(main())
