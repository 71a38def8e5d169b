"""Synthetic ETDumps for parser edge cases, written with the ``flatbuffers`` Builder.

The tables, field slots and defaults follow ExecuTorch's ``etdump_schema_flatcc.fbs`` (executorch
1.5.1), and files are finished like ``ETDumpGen`` finishes them: size-prefixed, file identifier
``ED00``. Events are given as trees and written in post-order, because ``ETDumpGen`` appends an
event when it ends (children before parents, delegate events before their ``DELEGATE_CALL``).
Real traces (``tests/data``) cover the normal shapes; these cover the shapes no model produces.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import flatbuffers

FILE_IDENTIFIER = b"ED00"

# Number of fields per table and the slot of each field, in .fbs declaration order.
_ETDUMP = {"version": 0, "run_data": 1, "_n": 2}
_RUN_DATA = {"name": 0, "bundled_input_index": 1, "allocators": 2, "events": 3, "_n": 4}
_EVENT = {"profile_event": 0, "allocation_event": 1, "debug_event": 2, "_n": 3}
_PROFILE = {
    "name": 0,
    "chain_index": 1,
    "instruction_id": 2,
    "delegate_debug_id_int": 3,
    "delegate_debug_id_str": 4,
    "delegate_debug_metadata": 5,
    "start_time": 6,
    "end_time": 7,
    "_n": 8,
}
_ALLOCATION = {"allocator_id": 0, "allocation_size": 1, "_n": 2}
_DEBUG = {
    "chain_index": 0,
    "instruction_id": 1,
    "debug_entry": 2,
    "delegate_debug_id_int": 3,
    "delegate_debug_id_str": 4,
    "name": 5,
    "_n": 6,
}
_VALUE = {"val": 0, "int_value": 3, "_n": 8}
_INT = {"int_val": 0, "_n": 1}
_ALLOCATOR = {"name": 0, "_n": 1}
_VALUE_TYPE_INT = 1


@dataclass(frozen=True)
class Prof:
    """A profile event and the events that ran inside it (written before it, as ETDumpGen does).

    Leave ``name`` None and set ``delegate_str`` or ``delegate_int`` for a delegate event.
    """

    name: str | None
    start: int
    end: int
    children: Sequence[Prof | Alloc | Debug] = ()
    instruction_id: int = -1
    delegate_str: str | None = None
    delegate_int: int = -1
    metadata: bytes = b""


@dataclass(frozen=True)
class Alloc:
    """An allocation event (the reader must skip it)."""

    allocator_id: int
    size: int


@dataclass(frozen=True)
class Debug:
    """A debug event holding one logged int (the reader must skip it)."""

    name: str
    value: int = 0
    instruction_id: int = -1


@dataclass(frozen=True)
class Block:
    """A RunData block; ``events`` None writes no events vector at all."""

    name: str
    events: Sequence[Prof | Alloc | Debug] | None = ()
    allocators: Sequence[str] = field(default=())


def post_order(events: Sequence[Prof | Alloc | Debug]) -> Iterator[Prof | Alloc | Debug]:
    """The order ETDumpGen appends events in: each event after everything logged inside it."""
    for event in events:
        if isinstance(event, Prof):
            yield from post_order(event.children)
        yield event


def build_etdump(
    blocks: Sequence[Block],
    *,
    size_prefixed: bool = True,
    version: int = 0,
    share_strings: bool = False,
) -> bytes:
    """Serialise ``blocks`` into ETDump bytes (size-prefixed with identifier, like ETDumpGen).

    ``share_strings`` writes each distinct string once, every use pointing at it (the Builder's
    deduplication; ETDumpGen writes a string per use)."""
    b = (_SharingBuilder if share_strings else flatbuffers.Builder)(1024)
    runs = [_run_data(b, block) for block in blocks]
    run_vector = _table_vector(b, runs)
    b.StartObject(_ETDUMP["_n"])
    b.PrependUint32Slot(_ETDUMP["version"], version, 0)
    b.PrependUOffsetTRelativeSlot(_ETDUMP["run_data"], run_vector, 0)
    root = b.EndObject()
    if size_prefixed:
        b.FinishSizePrefixed(root, FILE_IDENTIFIER)
    else:
        b.Finish(root, FILE_IDENTIFIER)
    return bytes(b.Output())


class _SharingBuilder(flatbuffers.Builder):
    """A Builder that writes each distinct string once (flatbuffers' own deduplication)."""

    def CreateString(self, s: str, *args: object) -> int:
        shared: dict[str, int] = self.__dict__.setdefault("shared", {})
        if s not in shared:
            shared[s] = super().CreateString(s, *args)
        return shared[s]


def execute_block(
    *events: Prof | Alloc | Debug, start: int = 1_000, end: int | None = None
) -> Block:
    """An "Execute" block: one ``Method::execute`` around ``events``."""
    stop = end if end is not None else max([start + 1, *(_end(e) for e in events)]) + 10
    return Block("Execute", [Prof("Method::execute", start, stop, events)])


def default_block(start: int = 0) -> Block:
    """A "Default" block as ``Program::load_method`` writes it (``Method::init`` inside)."""
    init = Prof("Method::init", start + 10, start + 90)
    return Block("Default", [Prof("Program::load_method", start, start + 100, [init])])


def _end(event: Prof | Alloc | Debug) -> int:
    return event.end if isinstance(event, Prof) else 0


def _table_vector(b: flatbuffers.Builder, tables: Sequence[int]) -> int:
    b.StartVector(4, len(tables), 4)
    for table in reversed(tables):
        b.PrependUOffsetTRelative(table)
    return b.EndVector()


def _run_data(b: flatbuffers.Builder, block: Block) -> int:
    events = None
    if block.events is not None:
        events = _table_vector(b, [_event(b, e) for e in post_order(block.events)])
    allocators = None
    if block.allocators:
        names = [b.CreateString(n) for n in block.allocators]
        tables = []
        for name in names:
            b.StartObject(_ALLOCATOR["_n"])
            b.PrependUOffsetTRelativeSlot(_ALLOCATOR["name"], name, 0)
            tables.append(b.EndObject())
        allocators = _table_vector(b, tables)
    name = b.CreateString(block.name)
    b.StartObject(_RUN_DATA["_n"])
    b.PrependUOffsetTRelativeSlot(_RUN_DATA["name"], name, 0)
    if allocators is not None:
        b.PrependUOffsetTRelativeSlot(_RUN_DATA["allocators"], allocators, 0)
    if events is not None:
        b.PrependUOffsetTRelativeSlot(_RUN_DATA["events"], events, 0)
    return b.EndObject()


def _event(b: flatbuffers.Builder, event: Prof | Alloc | Debug) -> int:
    if isinstance(event, Prof):
        slot, table = _EVENT["profile_event"], _profile(b, event)
    elif isinstance(event, Alloc):
        b.StartObject(_ALLOCATION["_n"])
        b.PrependInt32Slot(_ALLOCATION["allocator_id"], event.allocator_id, 0)
        b.PrependUint64Slot(_ALLOCATION["allocation_size"], event.size, 0)
        slot, table = _EVENT["allocation_event"], b.EndObject()
    else:
        slot, table = _EVENT["debug_event"], _debug(b, event)
    b.StartObject(_EVENT["_n"])
    b.PrependUOffsetTRelativeSlot(slot, table, 0)
    return b.EndObject()


def _profile(b: flatbuffers.Builder, event: Prof) -> int:
    name = b.CreateString(event.name) if event.name is not None else None
    debug_id = b.CreateString(event.delegate_str) if event.delegate_str is not None else None
    metadata = b.CreateByteVector(event.metadata)
    b.StartObject(_PROFILE["_n"])
    b.PrependUint64Slot(_PROFILE["start_time"], event.start, 0)
    b.PrependUint64Slot(_PROFILE["end_time"], event.end, 0)
    b.PrependInt32Slot(_PROFILE["chain_index"], 0, 0)
    b.PrependInt32Slot(_PROFILE["instruction_id"], event.instruction_id, -1)
    b.PrependInt32Slot(_PROFILE["delegate_debug_id_int"], event.delegate_int, -1)
    if debug_id is not None:
        b.PrependUOffsetTRelativeSlot(_PROFILE["delegate_debug_id_str"], debug_id, 0)
    b.PrependUOffsetTRelativeSlot(_PROFILE["delegate_debug_metadata"], metadata, 0)
    if name is not None:
        b.PrependUOffsetTRelativeSlot(_PROFILE["name"], name, 0)
    return b.EndObject()


def _debug(b: flatbuffers.Builder, event: Debug) -> int:
    b.StartObject(_INT["_n"])
    b.PrependInt64Slot(_INT["int_val"], event.value, 0)
    int_value = b.EndObject()
    b.StartObject(_VALUE["_n"])
    b.PrependInt8Slot(_VALUE["val"], _VALUE_TYPE_INT, 0)
    b.PrependUOffsetTRelativeSlot(_VALUE["int_value"], int_value, 0)
    value = b.EndObject()
    name = b.CreateString(event.name)
    b.StartObject(_DEBUG["_n"])
    b.PrependUint64Slot(_DEBUG["chain_index"], 0, 0)
    b.PrependInt32Slot(_DEBUG["instruction_id"], event.instruction_id, -1)
    b.PrependUOffsetTRelativeSlot(_DEBUG["debug_entry"], value, 0)
    b.PrependUOffsetTRelativeSlot(_DEBUG["name"], name, 0)
    return b.EndObject()


def aliased_etdump(runs: int, events: int, name: str = "Method::execute") -> bytes:
    """A valid ETDump whose ``run_data`` vector holds ``runs`` offsets to one RunData, whose
    ``events`` vector holds ``events`` offsets to one event: ``runs × events`` events to a reader
    that follows every offset, in a file of ``4 × (runs + events)`` bytes and a few more.

    Flatbuffers allow offsets to share a table (builders deduplicate), so nothing in the format
    itself forbids this; ``ETDumpGen`` never writes it.
    """
    b = flatbuffers.Builder(1024)
    event = _event(b, Prof(name, 1_000, 2_000))
    b.StartVector(4, events, 4)
    for _ in range(events):
        b.PrependUOffsetTRelative(event)
    event_vector = b.EndVector()
    block_name = b.CreateString("Execute")
    b.StartObject(_RUN_DATA["_n"])
    b.PrependUOffsetTRelativeSlot(_RUN_DATA["name"], block_name, 0)
    b.PrependUOffsetTRelativeSlot(_RUN_DATA["events"], event_vector, 0)
    run = b.EndObject()
    b.StartVector(4, runs, 4)
    for _ in range(runs):
        b.PrependUOffsetTRelative(run)
    run_vector = b.EndVector()
    b.StartObject(_ETDUMP["_n"])
    b.PrependUOffsetTRelativeSlot(_ETDUMP["run_data"], run_vector, 0)
    b.FinishSizePrefixed(b.EndObject(), FILE_IDENTIFIER)
    return bytes(b.Output())
