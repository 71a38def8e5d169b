"""The fixed names an isolated runner process sees its files under (``isolated`` of
:func:`~pytest_sme2.runner.invoke.run_runner`): the runner's heap and stack hold its paths, so
under fixed names the same program counts the same instructions in any run directory,
checkout or machine."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

#: the names an isolated run gives its binary, model and inputs in its run directory (and its
#: kernel libraries: ``kernel-library-<i>.so``)
STAGED_BINARY, STAGED_MODEL, STAGED_INPUTS = (
    Path("sme2_runner"),
    Path("model.pte"),
    Path("inputs.tensors"),
)


def staged_files(
    binary: Path, model: Path, inputs: Path | None, libraries: Sequence[Path]
) -> dict[Path, Path]:
    """What an isolated run links into its directory: fixed name -> file."""
    staged = {STAGED_BINARY: binary, STAGED_MODEL: model}
    if inputs is not None:
        staged[STAGED_INPUTS] = inputs
    staged.update(zip(staged_libraries(len(libraries)), libraries, strict=True))
    return staged


def staged_libraries(count: int) -> list[Path]:
    return [Path(f"kernel-library-{i}.so") for i in range(count)]


#: the staged names a process would look up by search path, so given as ``./name``
SEARCHED = frozenset([str(STAGED_BINARY), *map(str, staged_libraries(8))])


@contextlib.contextmanager
def linked(workdir: Path, staged: Mapping[Path, Path]) -> Iterator[None]:
    """Symbolic links ``workdir / name`` to each target of ``staged`` while the block runs,
    removed after it: a run directory keeps what the run wrote, not links into caches that may
    be pruned."""
    links = [(workdir / name, target.resolve()) for name, target in staged.items()]
    try:
        for link, target in links:
            link.unlink(missing_ok=True)
            link.symlink_to(target)
        yield
    finally:
        for link, _ in links:
            link.unlink(missing_ok=True)
