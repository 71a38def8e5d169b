"""Two calls at once, each free to start runner processes: one on the calling thread, the other
on a thread of its own; raised as one call after the other would raise.

Why: where time means nothing (qemu-sme2) a case's SME2-on and SME2-off variants are two
independent emulations, minutes of them the first time each is counted, whose instruction counts
no neighbour changes (:mod:`pytest_sme2.measure.case` runs them side by side). Not twice as fast:
each counted run's exec log is read by a thread of this process, and the two readers share the
GIL (the decode step with ExecuTorch's LLM kernels, counted beside a sleeping test: 124 → 101 s).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from pytest_sme2.runner import stoppable

_A = TypeVar("_A")
_B = TypeVar("_B")


def side_by_side(first: Callable[[], _A], second: Callable[[], _B]) -> tuple[_A, _B]:
    """``first()`` here and ``second()`` on its own thread, both results once both are done.

    An error of ``first`` (or Ctrl-C, SIGTERM: :mod:`pytest_sme2.interrupt`) stops ``second``
    (its runner's process group killed, its next call refused: :mod:`pytest_sme2.runner.
    stoppable`) and is raised once it has ended, so no runner outlives the call; else an error of
    ``second`` is raised. The first's error wins, as when one ran after the other.
    """
    outcome: list[tuple[bool, object]] = []

    def work() -> None:
        try:
            outcome.append((True, second()))
        except BaseException as err:  # raised on the calling thread, below
            outcome.append((False, err))

    helper = threading.Thread(target=work, name="pytest-sme2 side by side", daemon=True)
    helper.start()
    try:
        done = first()
        helper.join()
    except BaseException:
        stoppable.stop(helper.ident)
        helper.join()
        raise
    finally:
        if not helper.is_alive():  # a second Ctrl-C in the join above: its stop stands
            stoppable.release(helper.ident)
    ((ok, result),) = outcome
    if not ok:
        assert isinstance(result, BaseException)
        raise result
    return done, result  # type: ignore[return-value]
