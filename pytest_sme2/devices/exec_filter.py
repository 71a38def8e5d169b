"""qemu's exec log narrowed to the code a count can reach: libraries a run loads only for their
start-up work are left out of it.

Why: ExecuTorch's aarch64 LLM custom kernels (:mod:`pytest_sme2.devices.qemu_kernels`) come
in a library linked to ``libtorch_cpu.so`` for its registrations with torch, and loading torch
runs its static initialisers: of the 296 million blocks one decode step's run logged (22 GB of
log; 220 s of qemu alone, about 7 min with the counter), 59 % were in ``libtorch_cpu.so`` and 14 %
in ``libc10.so``, and full-log counts of the prefill and the decode, SME2-on and off, found no
instruction of theirs inside any counted call (method init or an inference). Left out of the
log, the same run logged 77 million blocks in 67 s, and its counts are the same to the
instruction (docs/costs.md).

qemu's ``-dfilter`` logs only blocks in given guest address ranges, and those are known only
once the guest has mapped the files. So a probe run of the same command, logging system calls
only (seconds), finds where the code of each file went
(:func:`pytest_sme2.devices.guest_syscalls.code_layout`), and both runs give the guest a
reserved address space of its own (qemu's ``-R``), in which qemu places every mapping itself: by
default it places them where the host's ``mmap`` does, and the exec log's own allocations moved
the libraries of an SME2-off run by up to 128 MB (address randomisation off or not). The counter
still checks that nothing moved (:func:`pytest_sme2.devices.qemu_log.count_calls`'s
``layout``): a count whose code moved is refused, never narrowed wrongly.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from pytest_sme2.devices.guest_syscalls import CodeMapping
from pytest_sme2.errors import RunnerError

LAST_ADDRESS = (1 << 64) - 1
RESERVED_GUEST_SPACE = 64 << 30
"""The guest's address space, reserved at qemu's start (``PROT_NONE``: no memory is committed);
the runner, its libraries (torch's 130 MB) and a program's weights fit many times over."""


def fixed_layout(qemu: Sequence[str]) -> list[str]:
    """A qemu command (the executable first) that maps the guest's files at the same addresses
    in every run of the same program, whatever else qemu allocates."""
    return [qemu[0], "-R", f"{RESERVED_GUEST_SPACE:#x}", *qemu[1:]]


def log_filter(layout: Collection[CodeMapping], unlogged: Collection[str]) -> str:
    """qemu's ``-dfilter`` value: every guest address except the code of the files named in
    ``unlogged`` where ``layout`` says it was mapped."""
    left_out = sorted((m.start, m.end) for m in layout if m.name in unlogged)
    if not left_out:
        raise RunnerError(
            f"none of {', '.join(sorted(unlogged))} was mapped in the probe run: nothing to leave "
            "out of the exec log"
        )
    ranges, start = [], 0
    for begin, end in left_out:
        if begin > start:
            ranges.append(f"{start:#x}..{begin - 1:#x}")
        start = max(start, end)
    ranges.append(f"{start:#x}..{LAST_ADDRESS:#x}")
    return ",".join(ranges)
