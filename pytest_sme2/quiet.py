"""Library noise off in the plugin's own calls: torch, executorch and torchao's warnings and log
records, while it keys, exports, checks and measures a user's programs.

Why a module of its own, shared by every stage: every stage that runs those libraries (keying a
model, exporting it, quantizing it, re-timing an ETDump, checking a program) needs the same
silence, and what counts as theirs is subtle enough (a warning is attributed by its issuing
frame, not its module pattern) to want one home. What is kept out of the user's warnings summary
is not lost: each such warning is logged once per block on :data:`LOG` (``pytest_sme2.libraries``,
INFO), which pytest captures into the test's log.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

#: Whose warnings and log records an export silences: theirs, about themselves (see
#: :func:`quiet_libraries`).
QUIET_LIBRARIES: tuple[str, ...] = ("torch", "executorch", "torchao")
#: Whose log records below ERROR an export drops (see :func:`quiet_log_records`): those
#: libraries', and the file locks' that keep concurrent exports apart.
QUIET_LOGGERS: tuple[str, ...] = (*QUIET_LIBRARIES, "filelock")
#: Where a library warning kept out of the user's summary is recorded instead.
LOG = logging.getLogger("pytest_sme2.libraries")


@contextmanager
def quiet_libraries() -> Iterator[None]:
    """Silence the warnings and log records torch, executorch and torchao raise while exporting.

    A cold export of toy_cnn's four dtypes printed 40 warnings (the libraries' deprecations of
    their own internals) and torchao logged that it found no triton: nothing a user can act on,
    and it buries what they can. A warning is the libraries' when the code that issued it is
    theirs — found by walking the stack from the ``warnings.warn`` call outward past the
    standard library and typing_extensions, which issue deprecations on their behalf (half of a
    toy_cnn export's are attributed to ``copyreg``, inside a deepcopy, and so escape a
    ``filterwarnings`` module pattern). The rest — the model's own warnings — are issued again,
    in order and once each, when the block ends, through the caller's filters (an ``error``
    filter raises them then). Inside the block every warning is collected rather than filtered,
    so a caller's ``error`` filter cannot turn a library's deprecation into a failed export.

    Log records below ERROR from those libraries are dropped for the block's duration
    (:func:`quiet_log_records`).
    """
    kept: dict[tuple[Any, ...], tuple[warnings.WarningMessage, str | None]] = {}
    logged: set[tuple[Any, ...]] = set()

    def collect(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        issuer = sys._getframe(1)
        if _issued_by_libraries(issuer):
            key = (category, str(message), filename, lineno)
            if key not in logged:
                logged.add(key)
                LOG.info("%s: %s (%s:%d)", category.__name__, message, filename, lineno)
        else:
            warning = warnings.WarningMessage(message, category, filename, lineno, file, line)
            # The module it is attributed to, for the caller's module-pattern filters.
            frames = (f for f in _frames(issuer) if f.f_code.co_filename == filename)
            module = next((f.f_globals.get("__name__") for f in frames), None)
            kept.setdefault((category, str(message), filename, lineno), (warning, module))

    loggers = [logging.getLogger(name) for name in QUIET_LIBRARIES]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings(), quiet_log_records():
        warnings.simplefilter("always")
        warnings.showwarning = collect
        for logger in loggers:
            logger.setLevel(max(logger.level, logging.ERROR))
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)
    for warning, module in kept.values():
        warnings.warn_explicit(
            warning.message, warning.category, warning.filename, warning.lineno, module
        )


class LibraryRecords(logging.Filter):
    """Drops log records below ERROR that :data:`QUIET_LOGGERS` log: on their own loggers
    (``torch.__trace``, ``filelock``), or on the root logger from their files — executorch's
    lowering calls ``logging.debug`` itself (its partitioner printed whole graph modules)."""

    def __init__(self) -> None:
        super().__init__()
        self.files = tuple(_package_dirs(QUIET_LOGGERS))

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        if record.name.partition(".")[0] in QUIET_LOGGERS:
            return False
        return not (record.name == "root" and record.pathname.startswith(self.files))


def _package_dirs(packages: Iterable[str]) -> Iterator[str]:
    """The directories (with a trailing separator) of the installed ``packages``, unimported."""
    for package in packages:
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec else []:
            yield os.path.join(location, "")


@contextmanager
def quiet_log_records() -> Iterator[None]:
    """Drop the libraries' log records below ERROR (:class:`LibraryRecords`) for the block.

    A filter on every handler of the root logger, not a change of levels or of pytest's log
    capture: a cold export under pytest's DEBUG capture put 444 lines of
    ``DEBUG torch.__trace`` into a test's report, which a logger level cannot stop when the
    logger sets its own level, and executorch logs on the root logger. The user's own records —
    their loggers, and the root logger from their files — are kept. The handlers are those at the
    block's start: pytest installs its capture handlers for a whole test phase.
    """
    handlers = list(logging.getLogger().handlers)
    quiet = LibraryRecords()
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)


def _frames(frame: FrameType | None) -> Iterator[FrameType]:
    """``frame`` and its callers, innermost first."""
    while frame is not None:
        yield frame
        frame = frame.f_back


def _issued_by_libraries(frame: FrameType) -> bool:
    """Whether the first frame from ``frame`` outward that is not the standard library's (nor
    typing_extensions', a backport of it) belongs to one of :data:`QUIET_LIBRARIES`."""
    for caller in _frames(frame):
        package = caller.f_globals.get("__name__", "").partition(".")[0]
        if package not in sys.stdlib_module_names and package != "typing_extensions":
            return package in QUIET_LIBRARIES
    return False
