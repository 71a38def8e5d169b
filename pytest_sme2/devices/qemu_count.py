"""What counts ``qemu-sme2``'s guest: a traced run with qemu's execution log streamed into the
counter, its last execution split by the ETDump's events into instructions per operator and the
kernels each ran, and every counted run of one thread kept under the key of everything it is a
function of (:mod:`pytest_sme2.devices.stored_counts`), so an unchanged variant is counted once.

Every boundary of a traced event is a clock read the guest makes, and qemu logs each read with
the value it returned, in order with the instructions (:mod:`pytest_sme2.analysis.attribution`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_sme2.analysis.attribution import instruction_trace, operator_kernels
from pytest_sme2.analysis.kernels import kernels_of_operators
from pytest_sme2.analysis.trace import read_etdump
from pytest_sme2.devices import (
    elf_symbols,
    exec_filter,
    guest_syscalls,
    log_fifo,
    qemu_log,
    qemu_log_lines,
)
from pytest_sme2.devices.base import CountedRun, RunRequest
from pytest_sme2.devices.kernel_log import kernel_evidence
from pytest_sme2.devices.log_fifo import read_while
from pytest_sme2.devices.qemu_guest import QemuGuest
from pytest_sme2.devices.qemu_log import EXECUTE_SYMBOL, INIT_SYMBOL, InstructionCount, count_calls
from pytest_sme2.devices.stored_counts import (
    HOST_FILES,
    Counted,
    count_key,
    load_count,
    portable_arguments,
    store_count,
)
from pytest_sme2.errors import RunnerError
from pytest_sme2.runner import invoke, staging

EVIDENCE_SOURCE = "qemu exec log"


@dataclass(frozen=True)
class CountStore:
    """Where counted runs are kept (None: nowhere), and whether to count again and replace them
    (``--sme2-recount``) rather than read them back."""

    directory: Path | None = None
    recount: bool = False


def counted_run(guest: QemuGuest, request: RunRequest, store: CountStore) -> CountedRun:
    """One traced run, its last execution counted: instructions split by its ETDump events, the
    kernels it executed, and the instructions of the method's init (where the weights are
    packed); the run's ETDump and outputs are the variant's. The executions before the counted
    one are warm-up (:data:`~pytest_sme2.devices.base.EVIDENCE_WARMUP` says why)."""
    counted = stored_or_counted(guest, request, store)
    result = counted.run
    assert result.etdump is not None, "a traced run always writes an ETDump"
    inference = counted.executions[-1]
    index = len(counted.executions) - 1
    trace = read_etdump(result.etdump)
    instructions = instruction_trace(trace, index, inference.clock_reads)
    operators = operator_kernels(
        trace.runs[index], inference.clock_reads, inference.interval_functions, result.etdump
    )
    evidence = kernel_evidence(
        executed_kernels(inference),
        source=EVIDENCE_SOURCE,
        instructions=instructions.runs[0].e2e_ns,
        sme_instructions=inference.sme,
        instruction_trace=instructions,
        executed=kernels_of_operators(operators),
        operator_kernels=operators,
    )
    init = counted.init.total if counted.init is not None else None
    return CountedRun(
        result,
        replace(
            evidence,
            init_instructions=init,
            stored_count_at=counted.counted_at,
            sme_functions=dict(inference.sme_functions),
        ),
    )


def stored_or_counted(guest: QemuGuest, request: RunRequest, store: CountStore) -> Counted:
    """:func:`count_executions`, or its stored run of the same key read back (then also when
    that was counted); a count of one thread is stored, never one of a thread pool, whose
    spinning makes it vary."""
    executions, workdir = request.executions, request.workdir
    directory = store.directory if executions.threads == 1 else None
    key = run_key(guest, request) if directory is not None else ""
    if directory is not None and not store.recount:
        stored = load_count(directory, key, workdir, executions)
        if stored is not None:
            return stored
    counted = count_executions(guest, request)
    if directory is not None:
        store_count(directory, key, counted, workdir)
    return counted


def run_key(guest: QemuGuest, request: RunRequest) -> str:
    """Everything a counted run is a function of (see
    :mod:`pytest_sme2.devices.stored_counts`): the files the guest reads, qemu's arguments and
    version, the executions, and the counting code."""
    toolchain, program, plan = guest.toolchain, request.program, request.executions
    kernel_files = guest.kernel_files(program)
    files = {
        "qemu": toolchain.qemu,
        "shim": toolchain.shim,
        "guest root": toolchain.sysroot,
        "runner": guest.binary,
        "wheel": toolchain.executorch_dir / "lib",
        "program": program,
        "inputs": request.inputs,
        "counter": Path(qemu_log.__file__),
        "log lines": Path(qemu_log_lines.__file__),
        "symbols": Path(elf_symbols.__file__),
        "log reading": Path(log_fifo.__file__),
        "system calls": Path(guest_syscalls.__file__),
        "log narrowing": Path(exec_filter.__file__),
        "invocation": Path(invoke.__file__),  # isolation: the names, the empty environment
        "staging": Path(staging.__file__),
        **{f"host {path}": path for path in HOST_FILES},
        **kernel_files,
    }
    arguments = guest.prefix(request.variant, exec_log=Path("exec-log"))
    return count_key(
        files,
        {
            "qemu arguments": portable_arguments(arguments, files),
            "qemu version": toolchain.qemu_version,
            "plan": f"runs={plan.runs} warmup={plan.warmup} threads={plan.threads} "
            f"traced={plan.traced}",
            "counted calls": f"{EXECUTE_SYMBOL} {INIT_SYMBOL}",
            # the ranges are the probe's: a function of the files and arguments above
            "exec log": "without the torch libraries" if kernel_files else "all",
        },
    )


def count_executions(guest: QemuGuest, request: RunRequest) -> Counted:
    """Run ``request`` with qemu's execution log streamed through a FIFO into the counter (the
    log, 300+ MB per inference, never touches the disk): the run, one count per execution in
    order (their clock reads line up with the ETDump's runs,
    :func:`pytest_sme2.analysis.attribution.instruction_trace`), and the method init's count.
    """
    request.workdir.mkdir(parents=True, exist_ok=True)
    layout = guest.probe_layout(request) if guest.libraries(request.program) else None
    fifo = request.workdir.resolve() / "qemu-exec-log.fifo"  # qemu opens it in the run's dir
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    libraries = sorted((guest.toolchain.executorch_dir / "lib").glob("*.so"))
    prefix = guest.prefix(request.variant, exec_log=fifo, layout=layout)
    try:
        calls, result = read_while(
            fifo,
            lambda: count_calls(fifo, libraries, EXECUTE_SYMBOL, INIT_SYMBOL, layout=layout),
            lambda: guest.run(request, prefix),
        )
    finally:
        fifo.unlink(missing_ok=True)
    inits = [call for call in calls if call.function == INIT_SYMBOL]
    executions = tuple(call for call in calls if call.function == EXECUTE_SYMBOL)
    plan = request.executions
    if len(executions) != plan.warmup + plan.runs:
        raise RunnerError(
            f"{request.program}: the qemu log shows {len(executions)} inference(s), the "
            f"runner ran {plan.warmup + plan.runs}"
        )
    return Counted(result, executions, inits[0] if len(inits) == 1 else None)


def executed_kernels(count: InstructionCount) -> list[str]:
    """The executed functions that are compute kernels: KleidiAI's ``kai_kernel_*`` bodies and
    XNNPACK's ``xnn_*_ukernel_*`` (not the ``kai_run_*``/``kai_get_*`` wrappers and getters)."""
    return [
        name
        for name in count.functions
        if name.startswith("kai_kernel_") or (name.startswith("xnn_") and "_ukernel_" in name)
    ]
