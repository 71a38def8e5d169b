"""Exact guest instruction counts from qemu-user's debug log: the evidence that SME2 kernels ran.

Why: emulated time is no performance signal, and op names cannot prove SME2 for every dtype
(dynamically quantized int8 keeps the same name with NEON fallbacks). What the emulated CPU
executed can: how many instructions, how many of them SME, and in which functions.

qemu-aarch64 run with ``-d in_asm,exec,nochain,strace -D <log>`` (:data:`QEMU_LOG_FLAGS`) writes

* for every translated block (TB), once per translation, its guest instructions::

      ----------------
      IN: main                       (qemu's symbol, known for the main binary and ld.so only)
      0x00000000004005d0:  a9bf7bfd  stp      x29, x30, [sp, #-0x10]!

* for every *executed* TB (``nochain`` stops qemu chaining TBs, so none is left out)::

      Trace 0: 0x7fc9b5eb3240 [80081c09311/00007fc9bdf80564/00000001/00000200] main

* every system call, which tells where the dynamic loader mapped each shared library::

      8658 openat(AT_FDCWD,"/tmp/t/libsmeloop.so",O_RDONLY|O_CLOEXEC) = 4
      8658 mmap(0x00007fc9bdf80000,131104,PROT_EXEC|PROT_READ,...,4,0) = 0x00007fc9bdf80000

Executed instructions are the sum, over ``Trace`` lines, of the size of the block at that pc. A
block runs to its end unless it faults part-way (a guest signal), which the runner does not do.
Logs are hundreds of MB, so the file is streamed once; identical ``Trace`` lines are tallied as
they are and parsed only when a pc is re-translated with a different shape, or at the end.
:func:`count_calls` splits the count at each entry into one function (the runner's
``Method::execute``): one count per inference, without start-up and loading.
"""

from __future__ import annotations

import bisect
import os
import re
import stat
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pytest_sme2.analysis.attribution import ClockRead
from pytest_sme2.analysis.kernel_names import unnamed_code
from pytest_sme2.devices.elf_symbols import ElfSymbols
from pytest_sme2.devices.guest_syscalls import CodeMapping, GuestFiles
from pytest_sme2.devices.log_fifo import open_log
from pytest_sme2.devices.qemu_log_lines import pieces
from pytest_sme2.errors import TraceError

QEMU_LOG_FLAGS = "in_asm,exec,nochain,strace"
"""The ``-d`` items :func:`count_instructions` needs (pass ``-D <file>`` too)."""

EXECUTE_SYMBOL = "_ZN10executorch7runtime6Method7executeEv"
"""``executorch::runtime::Method::execute()`` in ``libexecutorch.so``: one call per inference."""

INIT_SYMBOL = (
    "_ZN10executorch7runtime6Method4initEPN21executorch_flatbuffer13ExecutionPlanEPKNS0_12"
    "NamedDataMapEPKNS0_21LoadBackendOptionsMapE"
)
"""``executorch::runtime::Method::init(...)`` in ``libexecutorch.so``: the method's one-time set-up
(memory plan, delegate init: XNNPACK and KleidiAI pack the weights), inside ``load_method``."""

UNMAPPED = ""
"""``InstructionCount.libraries`` key of code not mapped from a file by the guest's own ``mmap``
(the main executable and the dynamic loader, which qemu itself loads)."""


_CLOCK = re.compile(rb"^\d+ clock_gettime\(")
#: what qemu's strace prints ``clock_gettime`` returned: ``= 0 ({tv_sec = 289,tv_nsec = 7663})``
_CLOCK_VALUE = re.compile(rb"= 0 \(\{tv_sec = (\d+),tv_nsec = (\d+)\}\)")


def is_sme(word: int) -> bool:
    """Whether an A64 instruction word is an SME instruction.

    The A64 top-level decode puts every SME instruction (ZA/ZT0 loads, stores and moves, outer
    products, SME2 multi-vector ops) where bit 31 is 1 and bits 28:25 are 0000; SMSTART/SMSTOP
    are ``MSR SVCR*, #imm`` (``0xd503407f`` with CRm<2:0> free). Decoding the word, not the
    disassembly, matters: qemu's disassembler prints SME2 instructions such as ``zero {zt0}`` as
    ``.byte``. SVE instructions executed in streaming mode are not counted.
    """
    return (word >> 31 == 1 and (word >> 25) & 0xF == 0) or (word & 0xFFFFF8FF) == 0xD503407F


@dataclass(frozen=True)
class InstructionCount:
    """What the guest executed, from one log.

    ``functions`` and ``sme_functions`` give instructions (all, and SME only) per function a
    translated block started in, most first: functions of the libraries named to
    :func:`count_instructions` by their ELF symbols, those of the main executable and the loader
    by qemu's own symbol lookup. ``libraries`` gives instructions per mapped file name
    (:data:`UNMAPPED` for the rest). ``blocks`` counts executed translation blocks.
    """

    total: int
    sme: int
    functions: Mapping[str, int]
    sme_functions: Mapping[str, int]
    libraries: Mapping[str, int]
    blocks: int
    #: every clock read of a call counted by :func:`count_calls`, in order (empty otherwise):
    #: what splits the call's count between its ETDump events
    #: (:mod:`pytest_sme2.analysis.attribution`)
    clock_reads: tuple[ClockRead, ...] = ()
    #: per clock read, the instructions per function executed since the read before it (the
    #: first: since the call's entry), code without a symbol under :func:`unnamed_code`: each
    #: sums exactly to the read's ``instructions`` less the previous read's
    interval_functions: tuple[Mapping[str, int], ...] = ()
    #: the marker function whose call this counts (:func:`count_calls`); "" for a whole log
    function: str = ""


@dataclass(frozen=True)
class _Block:
    insns: int
    sme: int
    symbol: str  # qemu's name for the block's start, "" when it has none


class _Segment:
    """Executed instructions per translated-block start, accumulated while streaming."""

    def __init__(self) -> None:
        self.pending: Counter[bytes] = Counter()  # identical Trace lines since the last fold
        self.insns: Counter[int] = Counter()  # executed instructions per pc
        self.sme: Counter[int] = Counter()
        self.executions = 0
        self.instructions = 0  # sum of ``insns``, kept as folded

    def fold(self, blocks: Mapping[int, _Block]) -> None:
        """Count the pending Trace lines with the blocks' current shapes."""
        for line, count in self.pending.items():
            pc = int(line.split(b"/", 2)[1], 16)  # "Trace 0: <host> [<cs_base>/<pc>/..."
            block = blocks.get(pc)
            if block is None:  # never translated in this log: nothing to count it with
                continue
            self.insns[pc] += count * block.insns
            self.instructions += count * block.insns
            if block.sme:
                self.sme[pc] += count * block.sme
            self.executions += count
        self.pending.clear()

    def absorb(self, other: _Segment) -> None:
        """Add ``other``'s folded counts to this segment's."""
        self.insns.update(other.insns)
        self.sme.update(other.sme)
        self.executions += other.executions
        self.instructions += other.instructions


class _Call:
    """One call of the marker function: counts up to its last clock read, and what follows it.

    The caller reads the clock right after the call returns (every benchmark loop does), so the
    instructions after the call's last ``clock_gettime`` are the loop's, not the call's: they are
    dropped when the call ends, unless the call read no clock at all.
    """

    def __init__(self, function: str) -> None:
        self.function = function
        self.counted = _Segment()
        self.tail = _Segment()
        self.reads: list[ClockRead] = []
        self.intervals: list[Counter[int]] = []  # per read: instructions per pc since the last

    def clock_read(self, blocks: Mapping[int, _Block], ns: int | None) -> None:
        self.tail.fold(blocks)
        self.counted.absorb(self.tail)
        # the folded tail is the interval's tally: kept, not copied, so the pass costs no more
        self.intervals.append(self.tail.insns)
        self.tail = _Segment()
        self.reads.append(ClockRead(ns, self.counted.instructions))

    def end(self, blocks: Mapping[int, _Block]) -> _Counted:
        """The call's function, its counted segment, its clock reads and their intervals'
        tallies."""
        self.tail.fold(blocks)
        counted = self.tail if self.counted.executions == 0 else self.counted
        return self.function, counted, tuple(self.reads), tuple(self.intervals)


#: a counted call: its function, its tally, its clock reads, and per read the tally since the
#: previous one
_Counted = tuple[str, _Segment, tuple[ClockRead, ...], tuple[Counter[int], ...]]


def count_instructions(log_path: Path, symbols: Iterable[Path] = ()) -> InstructionCount:
    """Count what the guest executed from a qemu log made with :data:`QEMU_LOG_FLAGS`.

    ``symbols`` are host copies of the guest's shared libraries (e.g. the aarch64 wheel's
    ``libexecutorch_backend_xnnpack.so``); each is matched to a guest mapping by file name, and
    its ELF symbols name the functions executed in it. Raises TraceError if the log is missing or
    has no executed block (qemu ran without ``-d exec``).
    """
    (count,) = _stream(log_path, [ElfSymbols(path) for path in symbols], None)
    return count


def count_calls(
    log_path: Path,
    symbols: Iterable[Path],
    function: str,
    *more: str,
    layout: Collection[CodeMapping] | None = None,
) -> list[InstructionCount]:
    """One count per call of ``function`` (an ELF symbol of one of ``symbols``), in call order;
    with ``more`` functions, of any of them, each count naming its function.

    Why: in a short run, process start-up, program loading and weight packing dwarf one
    inference, and the first inference carries one-time set-up; with ``function`` the runner's
    per-inference call (:data:`EXECUTE_SYMBOL`), the counts are the inferences and nothing else.

    A call is counted from its entry to the last clock read (``clock_gettime``) before the next
    call or before the guest next opens a file: the caller's clock read right after the call
    marks its end (the last call's, too, though the runner goes on to format its results), and
    the runner opens no file inside its inference loop (nor between method init and it). Raises
    TraceError as :func:`count_instructions` does, and when a function is not in ``symbols`` or
    none ran.

    ``layout``: where an earlier run of the same command mapped code (:func:`code_layout`),
    for a log narrowed by address (:mod:`pytest_sme2.devices.exec_filter`); TraceError if
    this run mapped any code elsewhere, since the narrowing then left out the wrong code.
    """
    paths = list(symbols)
    tables = [ElfSymbols(path) for path in paths]
    markers: dict[str, dict[str, int]] = {}
    for name in (function, *more):
        offsets = {
            table.name: offset
            for table in tables
            if (offset := table.file_offset(name)) is not None
        }
        if not offsets:
            names = ", ".join(path.name for path in paths) or "no symbol files"
            raise TraceError(log_path, f"no function {name!r} in {names}")
        markers[name] = offsets
    return _stream(log_path, tables, markers, layout)


def _stream(
    log_path: Path,
    tables: list[ElfSymbols],
    markers: Mapping[str, Mapping[str, int]] | None,
    layout: Collection[CodeMapping] | None = None,
) -> list[InstructionCount]:
    """Stream the log once. Without ``markers`` everything is one segment. With them (functions
    and their file offset per library file name), each entry into one of the functions starts a
    call, found by its pc once the guest maps its library, and the first ``openat`` after the
    first call ends the calls (see :func:`count_calls`)."""
    try:
        handle = open_log(log_path)
    except OSError as err:
        raise TraceError(log_path, f"cannot read the qemu log ({err.strerror})") from err
    files = GuestFiles(markers or {})
    whole = None if markers else _Segment()
    with handle:
        blocks, calls, last = _scan(handle, files, whole)
    if layout is not None and (moved := set(files.mappings.values()) - set(layout)):
        raise TraceError(
            log_path,
            f"the guest mapped {min(moved).name} at {min(moved).start:#x}, not where the probe "
            "run of the same command did: the log, narrowed to the probe's layout, may have left "
            "out counted code (count again)",
        )
    if whole is None:
        if last is None:
            raise TraceError(log_path, f"{' nor '.join(files.markers)} never ran in the logged run")
        calls.append(last.end(blocks))
    else:
        whole.fold(blocks)
        calls.append(("", whole, (), ()))
    if sum(segment.executions for _, segment, _, _ in calls) == 0:
        raise TraceError(
            log_path, f"no executed blocks in the qemu log: run qemu with -d {QEMU_LOG_FLAGS}"
        )
    ordered = sorted(files.mappings.values(), key=lambda m: m.start)
    return [_attribute(call, blocks, ordered, tables) for call in calls]


def _scan(
    handle: BinaryIO, files: GuestFiles, whole: _Segment | None
) -> tuple[dict[int, _Block], list[_Counted], _Call | None]:
    """The loop over the log's pieces (:func:`~pytest_sme2.devices.qemu_log_lines.pieces`): the
    blocks by pc, the calls ended, the call still open. ``whole`` is where every ``Trace`` line
    goes when no call is looked for (None: calls).

    A run of ``Trace`` lines is tallied at once, line by line only when one of them enters a call.
    The lines that come by the hundred thousand (instructions, block ends) are handled inline: a
    method call per line would cost more than the line's work; system calls by ``files``."""
    blocks: dict[int, _Block] = {}
    calls: list[_Counted] = []
    call: _Call | None = None
    segment = whole  # where Trace lines go; None: nowhere
    block_pc: int | None = None
    block_symbol = ""
    block_insns = block_sme = 0
    for piece in pieces(handle):
        if piece.startswith(b"Trace "):
            tally = _run_tally(piece, files)
            if tally is not None:
                if segment is not None:
                    segment.pending.update(tally)
                continue
            for line in piece.split(b"\n")[:-1]:  # a call starts in the run: line by line
                entered = _enters(line, files)
                if entered is not None:
                    if call is not None:
                        calls.append(call.end(blocks))
                    call = _Call(entered)
                    segment = call.tail
                if segment is not None:
                    segment.pending[line] += 1
        elif piece.startswith(b"0x"):
            colon = piece.find(b":")
            word = int(piece[colon + 1 : colon + 13], 16)
            if block_insns == 0:
                block_pc = int(piece[2:colon], 16)
            block_insns += 1
            block_sme += is_sme(word)
        elif piece.startswith(b"IN:"):
            block_symbol = piece[3:].strip().decode(errors="replace")
            block_pc, block_insns, block_sme = None, 0, 0
        elif piece == b"\n":
            if block_pc is not None:
                block = _Block(block_insns, block_sme, block_symbol)
                old = blocks.get(block_pc)
                changed = old is not None and (old.insns, old.sme) != (block.insns, block.sme)
                if changed and segment is not None:
                    segment.fold(blocks)  # executions so far used the old shape
                blocks[block_pc] = block
                block_pc, block_insns, block_sme = None, 0, 0
        elif call is not None and _CLOCK.match(piece):
            value = _CLOCK_VALUE.search(piece)
            call.clock_read(blocks, int(value[1]) * 10**9 + int(value[2]) if value else None)
            segment = call.tail
        elif files.see(piece.rstrip(b"\n"), calling=call is not None):
            _drain(handle)
            break  # the inference loop is over
    return blocks, calls, call


def _run_tally(run: bytes, files: GuestFiles) -> Counter[bytes] | None:
    """How often each line of a run of ``Trace`` lines occurs, or None when one enters a call."""
    tally = Counter(run.split(b"\n"))
    del tally[b""]  # after the run's last newline
    return None if any(_enters(line, files) is not None for line in tally) else tally


def _enters(line: bytes, files: GuestFiles) -> str | None:
    """The marker function a ``Trace`` line enters, if any: :meth:`GuestFiles.entered`, once per
    distinct line."""
    entered = files.entering.get(line, _UNSEEN)
    if entered is _UNSEEN:
        entered = files.entering[line] = files.entered(line)
    return entered


_UNSEEN = "<unseen>"  # not a function name (no ELF symbol has "<")


def _drain(handle: BinaryIO) -> None:
    """Read a pipe to its end: qemu, writing the log into it, must not block or die of SIGPIPE
    because the reader has what it needs (a regular file is left as it is)."""
    if stat.S_ISFIFO(os.fstat(handle.fileno()).st_mode):
        while handle.read(1 << 20):
            pass


def _attribute(
    call: _Counted,
    blocks: Mapping[int, _Block],
    mappings: list[CodeMapping],
    symbol_tables: list[ElfSymbols],
) -> InstructionCount:
    """Sum the per-pc tallies into functions and libraries (and each interval's into functions;
    every pc is looked up once)."""
    function_name, tally, reads, intervals = call
    tables = {table.name: table for table in symbol_tables}
    starts = [m.start for m in mappings]
    functions: Counter[str] = Counter()
    sme_functions: Counter[str] = Counter()
    libraries: Counter[str] = Counter()
    owner: dict[int, str] = {}  # pc -> its function, else its library's unnamed code
    for pc, insns in tally.insns.items():
        i = bisect.bisect_right(starts, pc) - 1
        mapping = mappings[i] if i >= 0 and pc < mappings[i].end else None
        if mapping is None:
            library, function = UNMAPPED, blocks[pc].symbol or None
        else:
            library = mapping.name
            table = tables.get(library)
            function = table.lookup(pc - mapping.start + mapping.offset) if table else None
        libraries[library] += insns
        owner[pc] = function if function is not None else unnamed_code(library)
        if function is not None:
            functions[function] += insns
            if pc in tally.sme:
                sme_functions[function] += tally.sme[pc]
    per_interval = []
    for interval in intervals:
        named: Counter[str] = Counter()
        for pc, insns in interval.items():
            named[owner[pc]] += insns
        per_interval.append(dict(named.most_common()))
    return InstructionCount(
        total=sum(tally.insns.values()),
        sme=sum(tally.sme.values()),
        functions=dict(functions.most_common()),
        sme_functions=dict(sme_functions.most_common()),
        libraries=dict(libraries.most_common()),
        blocks=tally.executions,
        clock_reads=reads,
        interval_functions=tuple(per_interval),
        function=function_name,
    )
