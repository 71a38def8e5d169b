"""Print the longest functions and modules of pytest_sme2 against the house's limits.

The limits (docs/architecture.md): no function over 60 lines, no module over 500, in
``pytest_sme2/``. A table-like literal may be longer; its module says so in a comment
``# table-like literal``, which exempts the module (not its functions). Exits 1 when a limit is
exceeded, so CI can hold it (tests/test_architecture.py).

    python scripts/longest.py [--top N]
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_sme2"
FUNCTION_LIMIT, MODULE_LIMIT = 60, 500
EXEMPT = "# table-like literal"


def measure(package: Path = PACKAGE) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(lines, name) of every function and every module, longest first."""
    functions, modules = [], []
    for path in sorted(package.rglob("*.py")):
        source = path.read_text()
        name = str(path.relative_to(package.parent))
        lines = source.count("\n") + (not source.endswith("\n"))
        modules.append((0 if EXEMPT in source else lines, name))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                functions.append((length, f"{name}:{node.lineno} {node.name}"))
    return sorted(functions, reverse=True), sorted(modules, reverse=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10, help="rows of each list (default 10)")
    args = parser.parse_args(argv)
    functions, modules = measure()
    over = 0
    for title, rows, limit in (
        ("functions", functions, FUNCTION_LIMIT),
        ("modules", modules, MODULE_LIMIT),
    ):
        print(f"longest {title} (limit {limit} lines):")
        for length, name in rows[: args.top]:
            mark = "  OVER" if length > limit else ""
            print(f"  {length:5d}  {name}{mark}")
        over += sum(length > limit for length, _ in rows)
    print(f"{over} over the limits")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
