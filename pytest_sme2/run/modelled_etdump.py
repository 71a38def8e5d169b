"""The ETDump the reference kit reads on an emulated device: the counted inference, every profile
event re-timed in guest instructions (1 ns of ETDump time = 1 instruction).

Why: the kit's tools (``analyze_results.py`` → ``etdump_to_csv.py``, Inspector) re-read the
ETDump in each experiment folder and prefer its times to ``metrics.json``. Under emulation those
times are the emulator's clock, which moves with the host's load and JIT, not with the guest's work
(it read a 3.43× instruction ratio as 1.66×). ETDump ticks are nanoseconds to Inspector (its
default ``source_time_scale``), so an ETDump whose ticks are instructions reads as 1 ms =
1,000,000 instructions — the time model of the kit-facing ``*_ms`` values
(:data:`pytest_sme2.report.kit_json.TIME_MODEL`) — and whichever kit tool reads it computes our
instruction ratio.

Only the counted run is written: it is the one inference whose instructions were counted, event
by event (:func:`pytest_sme2.analysis.attribution.instruction_trace`). The kit keeps warm-up runs as
ordinary rows and takes medians and means over all runs, so a warm-up kept in emulated time would
mix clocks, and one given the counted run's instructions would claim counts nobody made. The
set-up block (``Program::load_method``, ``Method::init``) goes for the same reason. One run is what
``metrics.json`` says too (``runs: 1``). Everything but the times (names, delegate ids, debug and
allocation events, the schema version) is the source's, read and written by ExecuTorch's own
ETDump (de)serialisation.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_sme2.analysis.trace import EXECUTE, FILE_IDENTIFIER, Run, Trace, parse_etdump
from pytest_sme2.cache import write_atomic
from pytest_sme2.errors import TraceError

if TYPE_CHECKING:  # importing executorch takes seconds: only where an ETDump is re-timed
    from executorch.devtools.etdump.schema_flatcc import RunData

#: The modelled ETDump's name beside its source (a ``.etdp``: no kit glob, ``**/*.etdump``,
#: reaches the run directories it is written into).
MODELLED_NAME = "modelled.etdp"


def modelled_etdump(etdump: Path, run_index: int, counted: Trace) -> bytes:
    """The ETDump at ``etdump`` cut to its run ``run_index``, each profile event's start and end
    replaced by the instruction count ``counted`` (that run timed in instructions, one run)
    gives it. Raises TraceError when ``counted`` is not that run's events."""
    from executorch.devtools.etdump.schema_flatcc import ETDumpFlatCC
    from executorch.devtools.etdump.serialize import (
        deserialize_from_etdump_flatcc,
        serialize_to_etdump_flatcc,
    )

    data = etdump.read_bytes()
    source = parse_etdump(data, etdump)
    if not 0 <= run_index < len(source.runs) or len(counted.runs) != 1:
        raise TraceError(
            etdump, f"no run {run_index} of {len(source.runs)} to time by one counted run"
        )
    run, timed = source.runs[run_index], counted.runs[0]
    if [e.name for e in run.events] != [e.name for e in timed.events]:
        raise TraceError(etdump, f"run {run_index}'s events are not those of the counted run")
    document = deserialize_from_etdump_flatcc(data)
    block = [b for b in document.run_data if _executes(b)][run_index]
    profiled = [e.profile_event for e in block.events or () if e.profile_event is not None]
    order = _append_order(run)
    if len(profiled) != len(order):
        raise TraceError(etdump, f"run {run_index}'s block holds events outside its run")
    for index, event in zip(order, profiled, strict=True):
        before, after = run.events[index], timed.events[index]
        if (event.start_time, event.end_time) != (before.start_ns, before.end_ns):
            raise TraceError(etdump, f"run {run_index}'s block does not hold the run read from it")
        event.start_time, event.end_time = after.start_ns, after.end_ns
    body = serialize_to_etdump_flatcc(ETDumpFlatCC(version=document.version, run_data=[block]))
    return _size_prefixed(body)


def write_modelled_etdump(counted: Trace) -> Path | None:
    """:func:`modelled_etdump` of the ETDump ``counted`` was cut from, written beside it as
    :data:`MODELLED_NAME` (the source stays as the runner wrote it); None where ``counted`` was
    read from no file."""
    if counted.path is None:
        return None
    target = counted.path.with_name(MODELLED_NAME)
    write_atomic(target, modelled_etdump(counted.path, counted.runs[0].index, counted))
    return target


def _executes(block: RunData) -> bool:
    """Whether a RunData block holds a ``Method::execute``: a run, as
    :mod:`pytest_sme2.analysis.trace` counts runs."""
    return any(
        e.profile_event is not None
        and e.profile_event.name == EXECUTE
        and not e.profile_event.delegate_debug_id_str
        and e.profile_event.delegate_debug_id_int in (None, -1)
        for e in block.events or ()
    )


def _append_order(run: Run) -> list[int]:
    """``run``'s event indices (pre-order, as :class:`pytest_sme2.analysis.trace.Run` holds them) in
    the order ETDumpGen appended the events: when each ended, children before their parent."""
    children: dict[int, list[int]] = {}
    for index, event in enumerate(run.events):
        children.setdefault(event.parent, []).append(index)
    order: list[int] = []
    stack = [(root, False) for root in reversed(children.get(-1, []))]
    while stack:
        index, visited = stack.pop()
        if visited:
            order.append(index)
            continue
        stack.append((index, True))
        stack.extend((child, False) for child in reversed(children.get(index, [])))
    return order


def _size_prefixed(buffer: bytes) -> bytes:
    """A finished flatbuffer (root offset, file identifier, tables) as ETDumpGen writes ETDumps
    and Inspector reads them only: behind its size. ``serialize_to_etdump_flatcc`` writes no
    size; the tables move by 8 bytes, not 4, to keep the 8-byte alignment of the events' times
    (every offset inside them is relative, so only the root offset changes)."""
    (root,) = struct.unpack_from("<I", buffer)
    return struct.pack("<II", len(buffer) + 4, root + 4) + FILE_IDENTIFIER + bytes(4) + buffer[8:]
