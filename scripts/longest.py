"""Print the longest functions, classes and modules of pytest_sme2, and the functions with the
most parameters, against the house's limits.

The limits (docs/architecture.md): no function over 60 lines, no class over 300, no module over
500, no function with more than 8 parameters (``self`` and ``cls`` not counted: pass a value
instead of a bundle of arguments), in ``pytest_sme2/``. A table-like literal may be longer; its
module says so in a comment ``# table-like literal``, which exempts the module (not its functions).
Exits 1 when a limit is exceeded, so CI can hold it (tests/harness/test_architecture.py).

    python scripts/longest.py [--top N]
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_sme2"
FUNCTION_LIMIT, CLASS_LIMIT, MODULE_LIMIT, PARAMETER_LIMIT = 60, 300, 500, 8
EXEMPT = "# table-like literal"

Rows = list[tuple[int, str]]


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The parameters a caller passes: positional, keyword-only, ``*args`` and ``**kwargs``, less
    the ``self`` or ``cls`` of a method."""
    args = node.args
    named = [*args.posonlyargs, *args.args]
    if named and named[0].arg in ("self", "cls"):
        named = named[1:]
    return len(named) + len(args.kwonlyargs) + (args.vararg is not None) + (args.kwarg is not None)


def measure(package: Path = PACKAGE) -> dict[str, Rows]:
    """(size, name) of every function, class and module, and every function's parameter count,
    largest first."""
    found: dict[str, Rows] = {"functions": [], "classes": [], "modules": [], "parameters": []}
    for path in sorted(package.rglob("*.py")):
        source = path.read_text()
        name = str(path.relative_to(package.parent))
        lines = source.count("\n") + (not source.endswith("\n"))
        found["modules"].append((0 if EXEMPT in source else lines, name))
        for node in ast.walk(ast.parse(source)):
            where = f"{name}:{getattr(node, 'lineno', 0)} {getattr(node, 'name', '')}"
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found["functions"].append((node.end_lineno - node.lineno + 1, where))
                found["parameters"].append((_parameters(node), where))
            elif isinstance(node, ast.ClassDef):
                found["classes"].append((node.end_lineno - node.lineno + 1, where))
    return {title: sorted(rows, reverse=True) for title, rows in found.items()}


LIMITS = {
    "functions": (FUNCTION_LIMIT, "lines"),
    "classes": (CLASS_LIMIT, "lines"),
    "modules": (MODULE_LIMIT, "lines"),
    "parameters": (PARAMETER_LIMIT, "parameters"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10, help="rows of each list (default 10)")
    args = parser.parse_args(argv)
    found = measure()
    over = 0
    for title, (limit, unit) in LIMITS.items():
        rows = found[title]
        heading = "most parameters" if title == "parameters" else f"longest {title}"
        print(f"{heading} (limit {limit} {unit}):")
        for size, name in rows[: args.top]:
            mark = "  OVER" if size > limit else ""
            print(f"  {size:5d}  {name}{mark}")
        over += sum(size > limit for size, _ in rows)
    print(f"{over} over the limits")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
