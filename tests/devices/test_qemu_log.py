"""Instruction counting from qemu's exec log: a real log of a real SME program, then edge cases.

The real program runs a loop whose body holds a known set of SME instructions (emitted as raw
words, so the bookworm cross assembler need not know SME) in a shared library, under the
provisioned qemu-aarch64 with the log flags the device uses.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

from pytest_sme2.devices.exec_filter import fixed_layout, log_filter
from pytest_sme2.devices.guest_syscalls import CodeMapping, code_layout
from pytest_sme2.devices.log_fifo import BUFFER, open_log, read_while
from pytest_sme2.devices.provision import QemuToolchain, provision_qemu, qemu_command
from pytest_sme2.devices.qemu_log import UNMAPPED, count_calls, count_instructions, is_sme
from pytest_sme2.errors import RunnerError, TraceError

SMSTART, SMSTOP = 0xD503477F, 0xD503467F
ZERO_ZA, FMOPA, ZERO_ZT0 = 0xC00800FF, 0x80810000, 0xC0480001  # zero {za}; fmopa za0.s, ...; SME2
LOOP_SME_WORDS = (SMSTART, ZERO_ZA, FMOPA, ZERO_ZT0, SMSTOP)

_INSTS = " ".join(f'".inst {word:#010x}\\n\\t"' for word in LOOP_SME_WORDS)
_LIBRARY = f"""\
void sme_loop(long n) {{
    for (long i = 0; i < n; i++) {{
        __asm__ volatile({_INSTS} ::: "memory");
    }}
}}
"""

_MAIN = """\
#include <stdlib.h>
void sme_loop(long n);
int main(int argc, char **argv) { sme_loop(atol(argv[1])); return 0; }
"""


@pytest.fixture(scope="module")
def toolchain() -> QemuToolchain:
    return provision_qemu(log=lambda _: None)


@pytest.fixture(scope="module")
def sme_program(toolchain: QemuToolchain, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``main N`` calls ``sme_loop(N)`` in ``libsmeloop.so``; returns the main binary."""
    out = tmp_path_factory.mktemp("smeloop")
    (out / "smeloop.c").write_text(_LIBRARY)
    (out / "main.c").write_text(_MAIN)
    cc = str(toolchain.cc)
    library = [cc, "-O1", "-shared", "-fPIC", "-o", str(out / "libsmeloop.so")]
    subprocess.run([*library, str(out / "smeloop.c")], check=True)
    main = [cc, "-O1", "-o", str(out / "main"), str(out / "main.c"), f"-L{out}", "-lsmeloop"]
    subprocess.run([*main, f"-Wl,-rpath,{out}"], check=True)
    return out / "main"


def _logged_run(toolchain: QemuToolchain, program: Path, n: int, log: Path) -> None:
    command = [*qemu_command(toolchain, sme2=True, exec_log=log), str(program), str(n)]
    subprocess.run(command, check=True, timeout=300)


def test_real_log_counts_sme_instructions_exactly(
    toolchain: QemuToolchain, sme_program: Path, tmp_path: Path
) -> None:
    library = sme_program.with_name("libsmeloop.so")
    counts = {}
    for n in (1000, 3000):
        _logged_run(toolchain, sme_program, n, tmp_path / f"{n}.log")
        counts[n] = count_instructions(tmp_path / f"{n}.log", [library])
    small, large = counts[1000], counts[3000]
    # Nothing else in the process executes SME: every SME instruction is in the loop.
    assert small.sme == len(LOOP_SME_WORDS) * 1000
    assert large.sme == len(LOOP_SME_WORDS) * 3000
    assert large.sme_functions == {"sme_loop": large.sme}
    # Only the loop depends on n, so everything mapped from files grew by exactly 2000 loop
    # bodies, all in sme_loop. (The loader, unmapped, varies by a few instructions run to run.)
    per_iteration, remainder = divmod(
        large.functions["sme_loop"] - small.functions["sme_loop"], 2000
    )
    assert remainder == 0 and per_iteration > len(LOOP_SME_WORDS)
    mapped = {n: c.total - c.libraries[UNMAPPED] for n, c in counts.items()}
    assert mapped[3000] - mapped[1000] == 2000 * per_iteration
    grown = large.libraries["libsmeloop.so"] - small.libraries["libsmeloop.so"]
    assert grown == 2000 * per_iteration
    # The main executable is loaded by qemu, not mmap'ed by the guest: named by qemu's symbols.
    assert large.libraries[UNMAPPED] > 0 and "main" in large.functions
    assert large.blocks > 3000


def _layout(toolchain: QemuToolchain, program: Path, n: int, log: Path) -> frozenset[CodeMapping]:
    """A probe run's layout: system calls only, a reserved guest address space."""
    probe = [*qemu_command(toolchain, sme2=True), "-d", "strace", "-D", str(log)]
    subprocess.run(fixed_layout([*probe, str(program), str(n)]), check=True, timeout=300)
    return code_layout(log)


def test_a_library_left_out_of_the_log_is_not_counted_and_every_other_file_is(
    toolchain: QemuToolchain, sme_program: Path, tmp_path: Path
) -> None:
    """The probe's layout narrows the exec log: no block of the left-out library is logged,
    and every other file counts what it counts in the whole log."""
    library = sme_program.with_name("libsmeloop.so")
    layout = _layout(toolchain, sme_program, 1000, tmp_path / "probe.log")
    assert "libsmeloop.so" in {mapping.name for mapping in layout}
    narrowing = ["-dfilter", log_filter(layout, {"libsmeloop.so"})]
    counts = {}
    for name, extra in (("whole", []), ("narrowed", narrowing)):
        logged = [*qemu_command(toolchain, sme2=True, exec_log=tmp_path / name), *extra]
        subprocess.run(fixed_layout([*logged, str(sme_program), "1000"]), check=True, timeout=300)
        counts[name] = count_instructions(tmp_path / name, [library])
    whole, narrowed = counts["whole"], counts["narrowed"]
    assert whole.sme == len(LOOP_SME_WORDS) * 1000 and whole.libraries["libsmeloop.so"] > 0
    assert narrowed.sme == 0 and "sme_loop" not in narrowed.functions
    others = {name: n for name, n in whole.libraries.items() if name != "libsmeloop.so"}
    assert narrowed.libraries == others


def test_a_count_whose_code_moved_since_the_probe_is_refused(
    toolchain: QemuToolchain, sme_program: Path, tmp_path: Path
) -> None:
    """A narrowed log is only right where the code lies where the probe found it."""
    library = sme_program.with_name("libsmeloop.so")
    layout = _layout(toolchain, sme_program, 10, tmp_path / "probe.log")
    logged = [*qemu_command(toolchain, sme2=True, exec_log=tmp_path / "run.log")]
    subprocess.run(fixed_layout([*logged, str(sme_program), "10"]), check=True, timeout=300)
    (call,) = count_calls(tmp_path / "run.log", [library], "sme_loop", layout=layout)
    assert call.sme == len(LOOP_SME_WORDS) * 10
    moved = {
        CodeMapping(m.start + 0x10000, m.end + 0x10000, m.name, m.offset)
        if m.name == "libsmeloop.so"
        else m
        for m in layout
    }
    with pytest.raises(TraceError, match=r"libsmeloop\.so at 0x.*not where the probe"):
        count_calls(tmp_path / "run.log", [library], "sme_loop", layout=moved)


def test_the_filter_is_every_address_but_the_left_out_code() -> None:
    layout = {
        CodeMapping(0x1000, 0x3000, "a.so", 0),
        CodeMapping(0x5000, 0x6000, "b.so", 0),
        CodeMapping(0x7000, 0x8000, "a.so", 0x10000),
    }
    assert log_filter(layout, {"a.so"}) == "0x0..0xfff,0x3000..0x6fff,0x8000..0xffffffffffffffff"
    with pytest.raises(RunnerError, match=r"none of c\.so was mapped"):
        log_filter(layout, {"c.so"})


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        (SMSTART, True),
        (SMSTOP, True),
        (0xD503437F, True),  # smstart sm
        (0xD503447F, True),  # smstop za
        (ZERO_ZA, True),
        (FMOPA, True),
        (ZERO_ZT0, True),  # SME2; qemu's disassembler prints it as .byte
        (0xC1342000, True),  # SME2 multi-vector fmla za.s[w9, 0, vgx4]
        (0xA540A000, False),  # SVE ld1w {z0.s}, p0/z, [x0]
        (0x4E20CC00, False),  # NEON fmla v0.4s
        (0xD503201F, False),  # nop
        (0xD50342DF, False),  # msr daifset, #2 (another MSR-immediate)
        (0x00000000, False),  # udf
    ],
)
def test_is_sme_decodes_the_sme_encoding_space(word: int, expected: bool) -> None:
    assert is_sme(word) is expected


def _block(pc: int, words: list[int], symbol: str = "") -> str:
    lines = [f"0x{pc + 4 * i:016x}:  {word:08x}  insn" for i, word in enumerate(words)]
    return "----------------\nIN: " + symbol + "\n" + "\n".join(lines) + "\n\n"


def _trace(pc: int, symbol: str = "") -> str:
    return f"Trace 0: 0x7f0000001000 [80081009331/{pc:016x}/00000001/00000200] {symbol}\n"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "qemu.log"
    path.write_text(text)
    return path


def _address_of(function: str, library: Path, toolchain: QemuToolchain) -> int:
    """``function``'s address in ``library``, by the cross toolchain's own ``nm``."""
    nm = str(toolchain.cc).removesuffix("gcc") + "nm"
    symbols = subprocess.run([nm, str(library)], capture_output=True, text=True, check=True)
    lines = symbols.stdout.splitlines()
    return next(int(line.split()[0], 16) for line in lines if line.endswith(f" {function}"))


def test_retranslated_block_counts_each_shape_for_its_own_executions(tmp_path: Path) -> None:
    nop = 0xD503201F
    text = _block(0x1000, [nop] * 4) + _trace(0x1000) * 3
    text += _block(0x1000, [nop, SMSTART]) + _trace(0x1000) * 2  # smaller, now with SME
    text += _block(0x1000, [nop] * 4) + _trace(0x1000)
    result = count_instructions(_write(tmp_path, text))
    assert result.total == 3 * 4 + 2 * 2 + 4
    assert result.sme == 2
    assert result.blocks == 6


def test_same_shape_retranslation_keeps_counting(tmp_path: Path) -> None:
    text = _block(0x2000, [ZERO_ZA, 0xD503201F]) + _trace(0x2000) * 5
    text += _block(0x2000, [ZERO_ZA, 0xD503201F]) + _trace(0x2000) * 5
    result = count_instructions(_write(tmp_path, text))
    assert (result.total, result.sme, result.blocks) == (20, 10, 10)


def test_runs_of_trace_lines_count_across_reads_and_an_unended_last_line_counts(
    tmp_path: Path,
) -> None:
    """Runs of ``Trace`` lines are tallied a read at a time (1 MiB): a run split between two
    reads, a block translated between runs, and a last line qemu left without its newline."""
    nop = 0xD503201F
    text = _block(0x1000, [nop] * 3) + _trace(0x1000) * 20_000  # 1.4 MB: crosses a read
    text += _block(0x2000, [ZERO_ZA]) + _trace(0x2000) * 7 + _trace(0x1000)
    result = count_instructions(_write(tmp_path, text.removesuffix("\n")))
    assert len(text) > 1 << 20
    assert (result.total, result.sme, result.blocks) == (20_001 * 3 + 7, 7, 20_008)


def test_blocks_outside_mappings_take_qemus_symbol(tmp_path: Path) -> None:
    text = _block(0x400000, [0xD503201F] * 3, "main") + _trace(0x400000, "main") * 2
    result = count_instructions(_write(tmp_path, text))
    assert result.functions == {"main": 6}
    assert result.libraries == {UNMAPPED: 6}


def test_mapped_library_blocks_are_named_by_its_elf_symbols(
    sme_program: Path, toolchain: QemuToolchain, tmp_path: Path
) -> None:
    library = sme_program.with_name("libsmeloop.so")
    address = _address_of("sme_loop", library, toolchain)
    base = 0x5500000000
    strace = (
        f'77 openat(AT_FDCWD,"/somewhere/{library.name}",O_RDONLY|O_CLOEXEC) = 3\n'
        f"77 mmap(0x{base:016x},65536,PROT_EXEC|PROT_READ,MAP_PRIVATE|MAP_FIXED,3,0)"
        f" = 0x{base:016x}\n"
        "77 close(3) = 0\n"
        # fd 3 reused for something else executable: must not inherit the library's name
        f"77 mmap(NULL,4096,PROT_EXEC|PROT_READ,MAP_PRIVATE,3,0) = 0x{0x6600000000:016x}\n"
    )
    text = strace + _block(base + address, [SMSTART, 0xD503201F]) + _trace(base + address) * 7
    text += _block(0x6600000000, [0xD503201F]) + _trace(0x6600000000)
    result = count_instructions(_write(tmp_path, text), [library])
    assert result.functions == {"sme_loop": 14}
    assert result.sme_functions == {"sme_loop": 7}
    assert result.libraries == {library.name: 14, UNMAPPED: 1}


def test_a_thread_pools_system_calls_printed_apart_count_whole(
    sme_program: Path, toolchain: QemuToolchain, tmp_path: Path
) -> None:
    """With two guest threads, qemu prints a system call's entry, then the other thread's
    ``Trace`` lines glued to it, then the return alone (seen in a real two-thread log: 19 futex
    waits so). The glued block counts, and a clock read keeps the value it returned."""
    library = sme_program.with_name("libsmeloop.so")
    entry = _address_of("sme_loop", library, toolchain)
    base, nop, worker = 0x5500000000, 0xD503201F, 0x6600000000
    text = (
        f'77 openat(AT_FDCWD,"/somewhere/{library.name}",O_RDONLY|O_CLOEXEC) = 3\n'
        f"77 mmap(0x{base:016x},65536,PROT_EXEC|PROT_READ,MAP_PRIVATE|MAP_FIXED,3,0)"
        f" = 0x{base:016x}\n"
        + _block(base + entry, [nop] * 2)
        + _block(base + entry + 8, [nop] * 2)
        + _block(worker, [nop] * 5)
        + _trace(base + entry)  # the call starts
        + "78 futex(0x00007fc525a42bc0,FUTEX_PRIVATE_FLAG|FUTEX_WAIT,0,NULL,NULL,0)"
        + _trace(worker)  # glued to the waiting thread's entry
        + "77 clock_gettime(CLOCK_MONOTONIC,0x00007f00000010a0)"
        + _trace(worker) * 2  # glued again: the clock's value comes later
        + " = 0 ({tv_sec = 1,tv_nsec = 500})\n"
        + _trace(base + entry + 8)
        + " = 0\n"  # the futex returns
        + "77 clock_gettime(CLOCK_MONOTONIC,0x00007f00000010a0) = 0 ({tv_sec = 1,tv_nsec = 900})\n"
    )
    (call,) = count_calls(_write(tmp_path, text), [library], "sme_loop")
    assert [read.ns for read in call.clock_reads] == [1_000_000_500, 1_000_000_900]
    assert [read.instructions for read in call.clock_reads] == [2 + 5 + 5 * 2, 2 + 5 * 3 + 2]
    assert call.total == 2 + 5 * 3 + 2


def test_log_without_exec_lines_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, _block(0x1000, [0xD503201F]))
    with pytest.raises(TraceError, match=r"no executed blocks.*-d in_asm,exec,nochain,strace"):
        count_instructions(path)


def test_missing_log_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read the qemu log"):
        count_instructions(tmp_path / "absent.log")


def test_a_log_written_a_line_per_write_is_read_whole_through_an_enlarged_pipe(
    tmp_path: Path,
) -> None:
    """qemu writes its log a line per ``write(2)``; the lazy reader must still get every byte
    in order, and the pipe it reads holds :data:`BUFFER` bytes where Linux lets it."""
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    lines = [
        b"Trace 0: 0x7f%010x [00000000/%016x/00000001/00000200] \n" % (i, i) for i in range(50_000)
    ]

    def write() -> None:
        with fifo.open("wb", buffering=0) as log:
            for line in lines:
                log.write(line)

    def read() -> tuple[int, bytes]:
        with open_log(fifo) as log:
            return fcntl.fcntl(log.fileno(), fcntl.F_GETPIPE_SZ), log.read()

    (pipe_size, data), _ = read_while(fifo, read, write)
    assert data == b"".join(lines)
    assert pipe_size == BUFFER or int(Path("/proc/sys/fs/pipe-max-size").read_text()) < BUFFER


def test_a_regular_log_file_reads_as_its_bytes(tmp_path: Path) -> None:
    log = tmp_path / "qemu.log"
    log.write_bytes(b"IN: main\n" * 10_000 + b"no newline at the end")
    with open_log(log) as handle:
        assert list(handle) == log.read_bytes().splitlines(keepends=True)
