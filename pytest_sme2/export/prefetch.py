"""Every case of a session exported before its first measurement, side by side in processes.

A session calls :func:`prefetch` with every (model, dtype) pair it collected; a pair's failure is
remembered by :mod:`pytest_sme2.export.exporter` and raised again when its own test asks for it. The
export itself (cache, numerics, stages) is :func:`pytest_sme2.export.exporter.export_model`'s; this
module keeps the processes: forked so they inherit the session's registry, one torch thread each,
ended at once by an interrupt.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import threading
import warnings
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, suppress
from typing import Any

from pytest_sme2.cache import being_built
from pytest_sme2.errors import ExportError, NumericsError
from pytest_sme2.export.exporter import _FAILURES, artifact_dir, export_model, settled
from pytest_sme2.export.key import traced_size
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.quiet import quiet_libraries, quiet_log_records


def prefetch(pairs: Iterable[tuple[ModelSpec, str]], *, processes: int = 1) -> None:
    """Export every (model, dtype) pair now, ``processes`` at a time.

    A session calls this before its first measurement: an export keeps both cores busy for up to
    ~80 s and leaves the caches cold, and a model measured straight after one moved its shares
    by ~6 points. So exports run first, side by side, and measuring starts when all are done. A
    failure is not raised here: it is remembered and raised again, at once, when its own test
    asks for the pair.

    Side by side means processes, not threads (the GIL; torch's global state), forked so that
    each inherits the registry the session's conftest filled — a spawned process could not
    rebuild a model registered in a conftest. The cache's file locks keep two processes from
    building one entry. Where fork is not offered (macOS, Windows), one at a time.
    """
    global _PENDING
    every = list(pairs)
    # only what must be lowered goes to the processes: a warm session forks nothing
    _PENDING = [(spec, dtype) for spec, dtype in every if not settled(artifact_dir(spec, dtype))]
    forking = "fork" in multiprocessing.get_all_start_methods()
    if processes > 1 and len(_PENDING) > 1 and forking:
        _PENDING = biggest_first(_PENDING)
        with _host_runner_built_meanwhile():
            _import_lowering()
        context = multiprocessing.get_context("fork")
        # The session's objects (every model built for its key) out of the children's garbage
        # collections: a child's full collection walks every object it inherited and writes
        # their headers, copying the parent's pages (Python's gc.freeze advice for fork).
        gc.collect()
        gc.freeze()
        try:
            _export_in_processes(min(processes, len(_PENDING)), context)
        finally:
            gc.unfreeze()
    for spec, dtype in _elsewhere_last(every):
        try:
            export_model(spec, dtype)  # a warm hit, or where a process exported it
        except ExportError:
            continue  # remembered in _FAILURES
    _PENDING = []


def _elsewhere_last(pairs: Iterable[tuple[ModelSpec, str]]) -> Iterator[tuple[ModelSpec, str]]:
    """``pairs`` in order, but each that another process is exporting when its turn comes after
    all the rest.

    Why: xdist's workers export one pair at a time, each from its own offset of one order; the
    one that got through its share first went on through the other's, waiting on each pair's
    lock while the other exported it, one core idle (the emulated suite from an empty cache:
    7–16 s per case, six times over). Left for last, such a pair is exported meanwhile, and the
    wait at the end is for the other's last export only.
    """
    later = []
    for spec, dtype in pairs:
        directory = artifact_dir(spec, dtype)
        if not settled(directory) and being_built(directory):
            later.append((spec, dtype))
        else:
            yield spec, dtype
    yield from later


def biggest_first(pairs: Iterable[tuple[ModelSpec, str]]) -> list[tuple[ModelSpec, str]]:
    """``pairs`` by the size of the graph their key traced, biggest first: side by side, the
    phase then ends on small exports, not on one long one with a core idle (vit_tiny int8's
    ~10 s alone, before)."""
    return sorted(pairs, key=lambda pair: -traced_size(pair[0]))


_PENDING: list[tuple[ModelSpec, str]] = []
"""The pairs :func:`prefetch` hands its forked processes, by index: nothing to pickle."""


def _export_in_processes(processes: int, context: Any) -> None:
    """Export the pending pairs in ``processes`` forked processes; a pair's failure remembered
    here, as if this process had failed it.

    A ``ProcessPoolExecutor``, not a ``multiprocessing.Pool``: when a process dies (the kernel's
    out-of-memory killer, a crash in native code) the Pool waits for its task for ever, the
    executor says so. Then the pairs not exported yet are left to the caller, one at a time.
    """
    with ProcessPoolExecutor(processes, mp_context=context, initializer=_exporter) as pool:
        futures = [pool.submit(_export_pending, index) for index in range(len(_PENDING))]
        for (spec, dtype), future in zip(_PENDING, futures, strict=True):
            try:
                failure = future.result()
            except BrokenProcessPool:
                warnings.warn(
                    "an export process died while exporting side by side (killed without a "
                    "word: out of memory?); the exports not finished then, from "
                    f"{spec.name}[{dtype}] on, run one at a time in the session's own process",
                    stacklevel=4,
                )
                return
            except BaseException:  # Ctrl-C, SIGTERM: no export starts after it
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            if failure is not None:
                _FAILURES[(artifact_dir(spec, dtype), True)] = ExportError(*failure)


@contextmanager
def _host_runner_built_meanwhile() -> Iterator[None]:
    """Build the host runner on a thread of its own while the block runs; wait for it after.

    Why: every export's numerics check runs the program in the host runner, so on a fresh
    machine the first export of each process waited for its build (CMake and a compiler, 2.8 s
    in a cold main job), while the import before the fork (:func:`_import_lowering`, 4 s of
    one core) left the other core idle. Joined before the session forks, so no thread of ours
    runs across the fork; not waited for when the block is interrupted. A failed build is left
    to the numerics check, which builds again and says why.
    """
    from pytest_sme2.runner import build_runner

    def build() -> None:
        with suppress(Exception):
            build_runner("host")

    thread = threading.Thread(target=build, name="sme2-runner-build", daemon=True)
    thread.start()
    yield
    thread.join()


def _import_lowering() -> None:
    """Import ExecuTorch's XNNPACK partitioner once, before forking: its import traces the
    pattern graphs it matches (bilinear resize, SDPA), 5 s of CPU that every forked process
    would otherwise spend again (mobilenet_v3_small fp32's lowering: 31.6 s, 4.9 s of it this
    import, profiled). Quietly, as an export runs: the import warns about torchao's CUDA
    kernels."""
    with quiet_log_records(), quiet_libraries():
        from executorch.backends.xnnpack.partition import xnnpack_partitioner  # noqa: F401


def _exporter() -> None:
    """In a forked export process, before anything else: an interrupt ends the process at once,
    and torch runs on one thread.

    An interrupt (Ctrl-C reaches the whole process group; SIGTERM arrives as ``Terminated``,
    :mod:`pytest_sme2.interrupt`) would otherwise stop only the wait for the export's thread:
    the process would take its next export while the first still ran, two exports sharing
    torch's global state in one process (seen: every queued export "failed" within a second,
    the session ending 7 s after Ctrl-C). Exiting leaves no entry half-published: an entry is
    renamed into place whole, and the next builder clears a killed one's temporary directory.

    One thread: GNU OpenMP is not fork-safe. Once the session has run a parallel torch op
    (building and tracing models for their keys does), a forked child's first parallel op
    waits for a thread team that was not forked with it, for ever (seen: torch.export's
    ``clone_input`` stuck in a futex). On one thread torch never enters the team; with a
    process per core, one thread each is what the cores take anyway.
    """
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _exit_now)
    import torch

    torch.set_num_threads(1)


def _exit_now(signum: int, frame: object) -> None:
    os._exit(128 + signum)


def _export_pending(index: int) -> tuple[str, str, str, str] | None:
    """In a forked process: export pending pair ``index``; its failure as ExportError's
    arguments (an exception with its own ``__init__`` does not survive pickling)."""
    spec, dtype = _PENDING[index]
    try:
        export_model(spec, dtype)
    except NumericsError:
        return None  # the entry is cached with its errors: the caller's own look raises it
    except ExportError as err:
        return err.model, err.dtype, err.stage, err.cause
    return None
