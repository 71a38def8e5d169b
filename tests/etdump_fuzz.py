"""Structured mutations of real ETDumps: the parser must answer each with a Trace or a one-line
TraceError, quickly, whatever the mutation.

Byte-level fuzzing (tests/analysis/test_trace.py) rarely produces a *valid* flatbuffer that lies:
these mutations change one thing the format allows and the file's meaning forbids, at the places the
reader follows: an offset pointed at another table of its kind (aliasing), a vector or string
length grown or shrunk, a vtable slot moved, an event's times swapped or made extreme, every
event of a run pointed at one. Used by the bounded CI test and by ``benchmarks/fuzz_etdump.py``.
"""

from __future__ import annotations

import random
import re
import struct
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pytest_sme2.analysis.trace import (
    _ETDUMP_FIELDS,
    _EVENT_FIELDS,
    _PROFILE_FIELDS,
    _RUNDATA_FIELDS,
    _reader,
    _root_table,
    _vector,
    parse_etdump,
)
from pytest_sme2.errors import TraceError

REAL = sorted((Path(__file__).parent / "data").glob("*.etdp"))

_U32 = struct.Struct("<I")


@dataclass(frozen=True)
class Layout:
    """Where a real ETDump keeps what the reader follows (byte positions in the file)."""

    run_slots: tuple[int, ...]  # uoffset slots of the run_data vector
    runs: tuple[int, ...]  # RunData tables
    event_vectors: tuple[int, ...]  # length fields of the events vectors
    event_slots: tuple[int, ...]  # uoffset slots of every events vector
    events: tuple[int, ...]  # Event tables
    profiles: tuple[int, ...]  # ProfileEvent tables
    strings: tuple[int, ...]  # length fields of the ProfileEvents' strings
    times: tuple[int, ...]  # start_time / end_time fields (u64)
    vtables: tuple[int, ...]  # vtables of the ProfileEvents
    extra: dict[str, int] = field(default_factory=dict)


def layout(data: bytes) -> Layout:
    """The :class:`Layout` of a valid ETDump, found with the reader's own table walk."""
    root = _root_table(data, "fuzz")
    cache: dict = {}
    run_slots = tuple(_vector(data, root, _ETDUMP_FIELDS, cache))
    runs = tuple(slot + _U32.unpack_from(data, slot)[0] for slot in run_slots)
    event_vectors, event_slots, events, profiles, strings, times, vtables = ([] for _ in range(7))
    for run in runs:
        slots = _vector(data, run, _RUNDATA_FIELDS, cache)
        if not slots:
            continue
        event_vectors.append(slots.start - 4)
        for slot in slots:
            event = slot + _U32.unpack_from(data, slot)[0]
            event_slots.append(slot)
            events.append(event)
            unpack, pick, (offset,) = _reader(data, event, _EVENT_FIELDS, cache)
            ref = pick((*unpack(data, event), 0))
            if not ref:
                continue
            pe = event + offset + ref
            profiles.append(pe)
            vtables.append(pe - struct.unpack_from("<i", data, pe)[0])
            unpack, pick, offsets = _reader(data, pe, _PROFILE_FIELDS, {})
            values = pick((*unpack(data, pe), 0, -1, -1, 0, 0, 0))
            for index in (0, 3):  # name, delegate_debug_id_str
                if values[index]:
                    strings.append(pe + offsets[index] + values[index])
            times += [pe + offsets[i] for i in (4, 5) if offsets[i]]
    return Layout(
        run_slots,
        runs,
        tuple(event_vectors),
        tuple(event_slots),
        tuple(events),
        tuple(profiles),
        tuple(strings),
        tuple(times),
        tuple(sorted(set(vtables))),
    )


Mutation = Callable[[bytearray, Layout, random.Random], str]


def _point(buf: bytearray, slot: int, target: int) -> None:
    _U32.pack_into(buf, slot, (target - slot) % (1 << 32))


def alias_run(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    """Point every run_data slot at one run (or one slot at another)."""
    target = rng.choice(lay.runs)
    for slot in lay.run_slots if rng.random() < 0.5 else [rng.choice(lay.run_slots)]:
        _point(buf, slot, target)
    return "alias run"


def alias_events(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    """Point every event slot (or some) at one event, possibly in another run."""
    target = rng.choice(lay.events)
    slots = lay.event_slots if rng.random() < 0.5 else rng.sample(lay.event_slots, 8)
    for slot in slots:
        _point(buf, slot, target)
    return "alias events"


def point_elsewhere(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    """Point an offset at a table of another kind, or anywhere."""
    slot = rng.choice(lay.event_slots + lay.run_slots)
    target = rng.choice(lay.profiles + lay.runs + lay.strings + (rng.randrange(len(buf)),))
    _point(buf, slot, target)
    return "point elsewhere"


def vector_length(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    at = rng.choice(lay.event_vectors)
    (length,) = _U32.unpack_from(buf, at)
    new = rng.choice([0, 1, length - 1, length + 1, length * 2, len(buf) // 4, 0xFFFFFFFF])
    _U32.pack_into(buf, at, max(0, new) & 0xFFFFFFFF)
    return "vector length"


def string_length(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    at = rng.choice(lay.strings)
    (length,) = _U32.unpack_from(buf, at)
    new = rng.choice([0, length + 1, len(buf) - at - 4, len(buf), 0x7FFFFFFF, 0xFFFFFFFF])
    _U32.pack_into(buf, at, max(0, new) & 0xFFFFFFFF)
    return "string length"


def vtable_slot(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    vtable = rng.choice(lay.vtables)
    (size,) = struct.unpack_from("<H", buf, vtable)  # as an earlier mutation may have left it
    entry = min(vtable + rng.randrange(0, max(2, size), 2), len(buf) - 2)
    struct.pack_into("<H", buf, entry, rng.choice([0, 1, 2, 4, 0xFFFF, rng.randrange(1 << 16)]))
    return "vtable slot"


def times(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    at = rng.choice(lay.times)
    struct.pack_into("<Q", buf, at, rng.choice([0, 1, (1 << 63) - 1, (1 << 64) - 1]))
    return "times"


def table_offset(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    """A table's own vtable offset (soffset) changed."""
    table = rng.choice(lay.events + lay.profiles + lay.runs)
    struct.pack_into("<i", buf, table, rng.choice([0, 4, -4, 1 << 30, -(1 << 30), -table]))
    return "table soffset"


MUTATIONS: tuple[Mutation, ...] = (
    alias_run,
    alias_events,
    point_elsewhere,
    vector_length,
    string_length,
    vtable_slot,
    times,
    table_offset,
)


@dataclass
class Outcome:
    counts: Counter[str] = field(default_factory=Counter)
    slowest_s: float = 0.0
    total_s: float = 0.0


def fuzz(count: int, seed: int = 0) -> Outcome:
    """Mutate real ETDumps ``count`` times (one to three mutations each) and parse each; counts
    ``parsed`` and each TraceError's kind. Anything but a TraceError propagates: a bug."""
    rng = random.Random(seed)
    originals = [(path.read_bytes(), layout(path.read_bytes())) for path in REAL]
    outcome = Outcome()
    for _ in range(count):
        data, lay = rng.choice(originals)
        buf = bytearray(data)
        names = [rng.choice(MUTATIONS)(buf, lay, rng) for _ in range(rng.randint(1, 3))]
        start = time.perf_counter()
        try:
            trace = parse_etdump(bytes(buf))
        except TraceError as err:
            assert "\n" not in str(err)
            kind = re.sub(r"\d+", "N", err.problem)[:72]
        else:
            assert trace.runs
            kind = "parsed"
        took = time.perf_counter() - start
        outcome.slowest_s = max(outcome.slowest_s, took)
        outcome.total_s += took
        outcome.counts[f"{kind} <- {'+'.join(sorted(set(names)))}"] += 1
    return outcome
