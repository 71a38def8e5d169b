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
``metrics.json`` says too (``runs: 1``).

Everything but the times (names, delegate ids, debug and allocation events, the schema version)
is the source's own bytes: the writer copies the source and patches it in place — each profile
event's ``start_time`` and ``end_time`` overwritten, the ``run_data`` vector cut to the counted
block (its length 1, its first uoffset pointing at that block). The other blocks stay in the
buffer, unreferenced: a flatbuffer reader follows offsets only. The layout does not move, so the
size prefix and the 8-byte alignment of the times are the source's (ETDumpGen's), and the file
reads as ETDumpGen's does — to Inspector's ``deserialize_from_etdump_flatcc`` as well as ours.
"""

from __future__ import annotations

import struct
from pathlib import Path

from pytest_sme2.analysis.trace import (
    FILE_IDENTIFIER,
    Run,
    RunSlots,
    Trace,
    parse_etdump,
    run_slots,
)
from pytest_sme2.cache import write_atomic
from pytest_sme2.errors import TraceError

#: The modelled ETDump's name beside its source (a ``.etdp``: no kit glob, ``**/*.etdump``,
#: reaches the run directories it is written into).
MODELLED_NAME = "modelled.etdp"

_U64 = struct.Struct("<Q")

# Why our own writer, not ExecuTorch's (de)serialisation (``deserialize_from_etdump_flatcc``,
# ``serialize_to_etdump_flatcc``, which this module used before): importing it pulls
# executorch.devtools → exir → torch → torchao, 4.6–9.4 s a process, and in a warm qemu-sme2
# session nothing else imports executorch, so it was the session's biggest single cost (9.7 s of
# a 17.6 s inner session). Measured: write_modelled_etdump of a real counted ETDump (50 KB, 331
# events of the counted run) in a fresh process, 2 shared vCPUs at load 6–8: 13.4–14.3 s before
# (0.17 s of it the two flatc calls once imported), 0.003–0.007 s now; ExecuTorch reads the same
# document from both (tests/measure/test_modelled_etdump.py; all 328 counted ETDumps in the cache).


def modelled_etdump(etdump: Path, run_index: int, counted: Trace) -> bytes:
    """The ETDump at ``etdump`` cut to its run ``run_index``, each profile event's start and end
    replaced by the instruction count ``counted`` (that run timed in instructions, one run)
    gives it. Raises TraceError when ``counted`` is not that run's events."""
    data = etdump.read_bytes()
    source = parse_etdump(data, etdump)
    if not 0 <= run_index < len(source.runs) or len(counted.runs) != 1:
        raise TraceError(
            etdump, f"no run {run_index} of {len(source.runs)} to time by one counted run"
        )
    run, timed = source.runs[run_index], counted.runs[0]
    if [e.name for e in run.events] != [e.name for e in timed.events]:
        raise TraceError(etdump, f"run {run_index}'s events are not those of the counted run")
    slots = run_slots(data, run_index, etdump)
    order = _append_order(run)
    if len(slots.times) != len(order):
        raise TraceError(etdump, f"run {run_index}'s block holds events outside its run")
    patched = bytearray(data)
    for index, (start_at, end_at) in zip(order, slots.times, strict=True):
        before, after = run.events[index], timed.events[index]
        _put(patched, start_at, before.start_ns, after.start_ns, etdump)
        _put(patched, end_at, before.end_ns, after.end_ns, etdump)
    _cut_to(patched, slots)
    # ETDumpGen writes its size before the buffer; a source without it (which our reader also
    # takes) gets it, as Inspector reads ETDumps only size-prefixed
    return bytes(patched) if data[8:12] == FILE_IDENTIFIER else _size_prefixed(bytes(patched))


def write_modelled_etdump(counted: Trace) -> Path | None:
    """:func:`modelled_etdump` of the ETDump ``counted`` was cut from, written beside it as
    :data:`MODELLED_NAME` (the source stays as the runner wrote it); None where ``counted`` was
    read from no file."""
    if counted.path is None:
        return None
    target = counted.path.with_name(MODELLED_NAME)
    write_atomic(target, modelled_etdump(counted.path, counted.runs[0].index, counted))
    return target


def _put(buffer: bytearray, at: int | None, was: int, now: int, etdump: Path) -> None:
    """Overwrite the time at ``at`` (which must hold ``was``: the run read from the block) with
    ``now``.

    A time flatbuffers left out (``at`` None: its value was the default, 0) has no slot to write
    a non-zero ``now`` into; that is a TraceError naming the file, not a fall back to ExecuTorch's
    serialiser. ETDumpGen's ticks are a monotonic clock's since boot (the host's, under qemu), so
    no event of a real run reads 0; a second writer kept for a file no runner writes would keep
    the import this module exists to avoid, on a path no real run takes.
    """
    if (0 if at is None else _U64.unpack_from(buffer, at)[0]) != was:
        raise TraceError(etdump, "the run's block does not hold the run read from it")
    if at is not None:
        _U64.pack_into(buffer, at, now)
    elif now != 0:
        raise TraceError(etdump, "an event's time was left out (0): no slot to write it into")


def _cut_to(buffer: bytearray, slots: RunSlots) -> None:
    """Cut the ``run_data`` vector to the run's block: its length 1, its first uoffset that
    block's (uoffsets are relative to their own position, so moved by the slots between)."""
    (offset,) = struct.unpack_from("<I", buffer, slots.slot)
    first = slots.vector.start
    struct.pack_into("<II", buffer, first - 4, 1, offset + slots.slot - first)


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
    """A finished flatbuffer written without its size (root offset, file identifier, tables) as
    ETDumpGen writes ETDumps and Inspector reads them only: behind its size. The tables move by
    8 bytes, not 4, to keep the 8-byte alignment of the events' times (every offset inside them
    is relative, so only the root offset changes)."""
    (root,) = struct.unpack_from("<I", buffer)
    return struct.pack("<II", len(buffer) + 4, root + 4) + FILE_IDENTIFIER + bytes(4) + buffer[8:]
