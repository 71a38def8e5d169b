"""``sme2``: analyse ETDumps made anywhere (our runner, ExecuTorch's executor_runner, the bindings).

``analyze`` prints one trace's profile; ``report`` and ``compare`` build pytest-sme2's reports
(report.md, the reference workflow's CSV/JSON, charts, Perfetto traces) from a run directory or
a pair of traces. They import pandas and matplotlib only when they run: ``analyze`` stays fast.

Every user-caused problem (missing file, not an ETDump, bad option) ends as one ``error:`` line and
exit status 2; a traceback means a bug in pytest-sme2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_sme2.analysis.categories import CATEGORIES
from pytest_sme2.analysis.etrecord import delegate_backends
from pytest_sme2.analysis.profile import Profile, profile
from pytest_sme2.analysis.trace import read_etdump
from pytest_sme2.errors import Sme2Error


def format_profile(prof: Profile, *, top: int, title: str) -> str:
    """Human-readable E2E statistics, category table and top operators."""
    import pandas as pd  # deferred: only the text output needs tables

    lat = prof.latency
    lines = [
        f"{title}: {prof.runs} run(s) analysed, {prof.warmup} warm-up run(s) dropped",
        f"E2E ms: median {lat.median_ms:.3f}  mean {lat.mean_ms:.3f}  min {lat.min_ms:.3f}  "
        f"max {lat.max_ms:.3f}  std {lat.std_ms:.3f}  p95 {lat.p95_ms:.3f}",
        f"delegated {prof.delegated_ms:.3f} ms/run, "
        f"non-delegated {prof.non_delegated_ms:.3f} ms/run",
        "",
    ]
    shares = prof.shares
    categories = pd.DataFrame(
        {
            "ms/run": [prof.categories_ms[c] for c in CATEGORIES],
            "share %": [100 * shares[c] for c in CATEGORIES],
        },
        index=pd.Index(CATEGORIES, name="category"),
    )
    lines += [categories.to_string(float_format=lambda v: f"{v:.3f}"), ""]
    ops = pd.DataFrame(
        [
            {
                "operator": op.name,
                "category": op.category,
                "count": op.count,
                "ms/run": op.per_run_ms,
                "share %": 100 * op.share,
                "backend": op.backend,
            }
            for op in prof.top_operators(top)
        ]
    )
    if not ops.empty:
        lines += [
            f"top {len(ops)} operators by share of E2E:",
            ops.to_string(index=False, float_format=lambda v: f"{v:.3f}"),
        ]
    return "\n".join(lines)


def _analyze(args: argparse.Namespace) -> int:
    backends = delegate_backends(args.etrecord) if args.etrecord else None
    prof = profile(read_etdump(args.etdump), warmup=args.warmup, backends=backends)
    if args.json:
        json.dump(prof.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_profile(prof, top=args.top, title=str(args.etdump)))
    return 0


#: Warm-up runs dropped from traces made elsewhere by ``report``/``compare``: the first run is cold.
REPORT_WARMUP = 1


def default_report_dir(run_dir: Path) -> Path:
    """``<RUN_DIR>-sme2-report`` beside the run directory, never inside it: the reference kit's
    tools sum every ETDump below a run directory, the report's copies included."""
    run_dir = run_dir.resolve()
    return run_dir.with_name(f"{run_dir.name}-sme2-report")


def _report(args: argparse.Namespace) -> int:
    from pytest_sme2.report.from_files import report_run_dir

    out = args.out or default_report_dir(args.run_dir)
    sys.stdout.write(report_run_dir(args.run_dir, out, warmup=args.warmup))
    print(f"sme2: wrote {out / 'report.md'} and per-test artifacts under {out}", file=sys.stderr)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from pytest_sme2.report.artifacts import REPORT_NAME
    from pytest_sme2.report.from_files import compare_etdumps, compare_run_dirs

    if args.off.is_dir() and args.on.is_dir():
        sys.stdout.write(compare_run_dirs(args.off, args.on, warmup=args.warmup))
        return 0
    sys.stdout.write(compare_etdumps(args.off, args.on, warmup=args.warmup, out=args.out))
    if args.out:
        print(f"sme2: wrote {args.out / REPORT_NAME} and the artifacts", file=sys.stderr)
    return 0


def _history(args: argparse.Namespace) -> int:
    from pytest_sme2.report.history_page import history_markdown, write_history
    from pytest_sme2.report.trends import trends

    found = trends(args.history_dir, args.repo)
    for problem in found.problems:
        print(f"sme2: {problem}", file=sys.stderr)
    write_history(found, args.html, args.markdown)
    sys.stdout.write(history_markdown(found))
    for what, path in (("page", args.html), ("summary", args.markdown)):
        if path is not None:
            print(f"sme2: wrote the history {what} {path}", file=sys.stderr)
    return 0


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {value}")
    return value


def _add_history(sub: argparse._SubParsersAction) -> None:
    """``sme2 history``: its own function, as its options share nothing with the others'."""
    history = sub.add_parser(
        "history",
        help="trends over commits and the steps in them, from --sme2-history records",
        description="Read every history record under HISTORY_DIR (files copied in from any "
        "number of runs and runners), order them by the commits of REPO, find where each "
        "quantity stepped, and print the markdown summary. Unreadable files and unknown commits "
        "are named, one line each, and left out.",
    )
    history.add_argument("history_dir", type=Path, help="directory of *.jsonl history records")
    history.add_argument("--html", type=Path, help="write the self-contained HTML page here")
    history.add_argument("--markdown", type=Path, help="write the markdown summary here too")
    history.add_argument(
        "--repo",
        type=Path,
        default=Path.cwd(),
        help="the git repository whose commits order the records (default: the current directory)",
    )
    history.set_defaults(handler=_history)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sme2", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    analyze = sub.add_parser("analyze", help="E2E statistics, categories and top operators")
    analyze.add_argument("etdump", type=Path, help="an ETDump file (.etdump / .etdp)")
    analyze.add_argument(
        "--etrecord",
        type=Path,
        help="the model's ETRecord: names each delegated operator's backend",
    )
    analyze.add_argument(
        "--warmup", type=_non_negative, default=0, help="drop the first N runs (default 0)"
    )
    analyze.add_argument("--top", type=_non_negative, default=10, help="operators to list")
    analyze.add_argument("--json", action="store_true", help="print one JSON object")
    analyze.set_defaults(handler=_analyze)

    warmup_help = (
        f"drop the first N runs of each trace made elsewhere (default {REPORT_WARMUP}: the cold "
        "run; one run is always kept; pytest-sme2 manifests keep their own warm-up)"
    )
    report = sub.add_parser(
        "report",
        help="report.md, CSV/JSON artifacts, charts and Perfetto traces for a run directory",
        description="Build pytest-sme2's reports from a pytest-sme2 artifact directory or from "
        "ETDumps made anywhere, paired SME2-off/on by the sme2_off/sme2_on in their paths. "
        "Prints the session report.md.",
    )
    report.add_argument("run_dir", type=Path, help="directory searched for ETDumps and manifests")
    report.add_argument(
        "--out", type=Path, help="output directory (default: RUN_DIR-sme2-report, beside it)"
    )
    report.add_argument("--warmup", type=_non_negative, default=REPORT_WARMUP, help=warmup_help)
    report.set_defaults(handler=_report)
    compare = sub.add_parser(
        "compare",
        help="an SME2-off against an SME2-on ETDump (speedup = OFF ÷ ON), or two run directories "
        "of different devices side by side",
        description="Print the report.md of OFF (reference) against ON (candidate); given two "
        "run directories (e.g. two devices' --sme2-artifacts), print the across-devices table.",
    )
    compare.add_argument("off", type=Path, help="ETDump of the SME2-off run, or a run directory")
    compare.add_argument("on", type=Path, help="ETDump of the SME2-on run, or a run directory")
    compare.add_argument("--out", type=Path, help="also write every artifact into this directory")
    compare.add_argument("--warmup", type=_non_negative, default=REPORT_WARMUP, help=warmup_help)
    compare.set_defaults(handler=_compare)
    _add_history(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except Sme2Error as err:
        print(f"sme2: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
