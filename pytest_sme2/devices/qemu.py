"""``qemu-sme2``: an emulated Armv9 CPU with SME2 on any x86-64 machine (CI runners included).

The aarch64 runner runs under ``qemu-aarch64 -cpu max``; SME2-off is the *same* binary on the same
CPU with ``getauxval`` denying SME (see :mod:`pytest_sme2.devices.provision`), so the only
variable is what XNNPACK is told. Emulated time is no performance signal, so this device proves
what it can instead: packed operator names on vs off, outputs on vs off, and — from qemu's
execution log — guest instructions per inference and the SME2 kernels that executed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from pytest_sme2.analysis.attribution import instruction_trace, operator_kernels
from pytest_sme2.analysis.kernels import kernels_of_operators
from pytest_sme2.analysis.trace import read_etdump
from pytest_sme2.devices import (
    elf_symbols,
    exec_filter,
    guest_syscalls,
    log_fifo,
    qemu_log,
)
from pytest_sme2.devices.base import CountedRun, Device, OptionGetter
from pytest_sme2.devices.exec_filter import fixed_layout, log_filter
from pytest_sme2.devices.guest_syscalls import CodeMapping, code_layout
from pytest_sme2.devices.host import cpu_model, software_class, software_fingerprint
from pytest_sme2.devices.kernel_log import kernel_evidence
from pytest_sme2.devices.log_fifo import read_while
from pytest_sme2.devices.provision import (
    QemuToolchain,
    provision_qemu,
    qemu_command,
    read_hwcaps,
)
from pytest_sme2.devices.qemu_kernels import aarch64_custom_kernels
from pytest_sme2.devices.qemu_log import (
    EXECUTE_SYMBOL,
    INIT_SYMBOL,
    InstructionCount,
    count_calls,
)
from pytest_sme2.devices.stored_counts import (
    HOST_FILES,
    count_key,
    load_count,
    portable_arguments,
    store_count,
    store_dir,
)
from pytest_sme2.errors import ConfigError, RunnerError
from pytest_sme2.records.device import DeviceInfo, Variant
from pytest_sme2.records.evidence import Sme2Evidence
from pytest_sme2.runner import invoke, staging
from pytest_sme2.runner.build import build_runner, executorch_version
from pytest_sme2.runner.invoke import RunPlan, RunResult, run_runner
from pytest_sme2.runner.kernel_libraries import CustomKernels, custom_operators

SME_VECTOR_LENGTHS = (16, 32, 64)
"""Streaming vector lengths in bytes the wheel's KleidiAI kernels run with (128 crashes them)."""

DEFAULT_SME_VECTOR_LENGTH = 64
"""512-bit, the streaming vector length of Apple M4, rather than qemu's 256-bit default: SME
kernels' instruction counts scale with it, so the ratios should be those of real hardware."""

EVIDENCE_SOURCE = "qemu exec log"
COUNTED_WARMUP = 1
"""Executions before the counted one (at most ``EVIDENCE_EXECUTIONS`` - 1), in every case: the
first execution of every example, dtype and variant differs from the second
(``benchmarks/warmup_effect.py``, 33 cases). It does one-time set-up outside any operator event
(0.15–3.3 M instructions, most of it in XNNPACK's code; 3 M in the convolutional models), and
inside 3–25 operators per case the first calls bind symbols lazily and take first-call paths:
native kernels by 1.5–89 % (vit_tiny's expand_copy 11.3 k → 1.3 k, tiny_llama_decode's index_put
70 k → 54 k), toy_cnn fp32's first fully connected GEMM 2,956 → 774. From the second execution
on, every operator counts the same (the third equals it). A count of the first would gate a
cold inference's one-time work, not the model's steady state that baselines hold."""
EMULATED_TIMEOUT_S = 3600.0
"""A run's deadline under emulation when none is given: every instruction costs ~100x (the exec
log ~5x more), so the native default would cut the largest examples short."""
_NOT_A_SIGNAL = "qemu-sme2 emulates SME2: its time is not a performance signal"


class QemuSme2Device(Device):
    """The runner cross-built for aarch64, run under qemu with SME2 visible or hidden."""

    name = "qemu-sme2"
    emulates_cpu = True

    def __init__(
        self,
        qemu: Path | None = None,
        sme_vector_length: int = DEFAULT_SME_VECTOR_LENGTH,
        *,
        count_store: Path | None = None,
        recount: bool = False,
    ) -> None:
        """``count_store`` keeps every counted run of one thread under its key, and a later run
        of the same key is read back from it unless ``recount``
        (:mod:`pytest_sme2.devices.stored_counts`); the plugin's sessions keep them in the
        cache (``--sme2-recount``: count again and replace)."""
        if sme_vector_length not in SME_VECTOR_LENGTHS:
            raise ConfigError(
                f"--sme2-qemu-vl={sme_vector_length}: the SME vector length must be one of "
                f"{', '.join(map(str, SME_VECTOR_LENGTHS))} (bytes)"
            )
        self.qemu = qemu
        self.sme_vector_length = sme_vector_length
        self.count_store = count_store
        self.recount = recount
        self._toolchain: QemuToolchain | None = None
        self._binary: Path | None = None
        self._kernels: CustomKernels | None = None

    spec_keys: ClassVar[Mapping[str, str]] = {"qemu": "sme2_qemu", "vl": "sme2_qemu_vl"}

    @classmethod
    def add_options(cls, add: Callable[..., None]) -> None:
        add(
            "--sme2-qemu",
            dest="sme2_qemu",
            default=None,
            help="qemu-sme2: a qemu-aarch64 >= 11 to use instead of fetching one (also $SME2_QEMU)",
        )
        add(
            "--sme2-qemu-vl",
            dest="sme2_qemu_vl",
            default=None,
            help="qemu-sme2: SME streaming vector length in bytes, "
            f"{'|'.join(map(str, SME_VECTOR_LENGTHS))} (default: {DEFAULT_SME_VECTOR_LENGTH})",
        )
        add(
            "--sme2-recount",
            dest="sme2_recount",
            action="store_true",
            default=None,
            help="qemu-sme2: count every variant again rather than read back a stored count of "
            "the same program, inputs, runner, wheel, guest libraries and qemu (and replace it)",
        )

    @classmethod
    def from_options(cls, get: OptionGetter) -> QemuSme2Device:
        qemu = get("sme2_qemu")
        vl = get("sme2_qemu_vl")
        try:
            length = int(vl) if vl is not None else DEFAULT_SME_VECTOR_LENGTH
        except ValueError:
            raise ConfigError(f"--sme2-qemu-vl={vl!r}: expected a number of bytes") from None
        return cls(
            qemu=Path(qemu) if qemu else None,
            sme_vector_length=length,
            count_store=store_dir(),
            recount=bool(get("sme2_recount")),
        )

    def prepare(self) -> None:
        if self._binary is not None:
            return
        toolchain = provision_qemu(qemu=self.qemu)
        # provisioning verified this qemu once; this checks the cached toolchain still holds
        on, off = read_hwcaps(toolchain, sme2=True), read_hwcaps(toolchain, sme2=False)
        if not on.sme2 or off.sme or off.sme2:
            raise RunnerError(
                f"{toolchain.qemu}: sme2-on shows HWCAP2={on.hwcap2:#x}, sme2-off "
                f"HWCAP2={off.hwcap2:#x}; expected SME2 on and no SME off (delete "
                f"{toolchain.shim.parent} to rebuild the shim)"
            )
        self._binary = build_runner("aarch64", executorch_dir=toolchain.executorch_dir)
        self._toolchain = toolchain

    def _prepared(self) -> tuple[QemuToolchain, Path]:
        self.prepare()
        assert self._toolchain is not None and self._binary is not None
        return self._toolchain, self._binary

    def info(self) -> DeviceInfo:
        toolchain, binary = self._prepared()
        length = self.sme_vector_length
        # Emulated time is never judged, so this class keys no time record; it names what the
        # portable evidence (instruction counts, kernels) depends on.
        machine_class = {
            "cpu": f"qemu-aarch64 -cpu max (SME2), SVL {length * 8} bits",
            "qemu": toolchain.qemu_version,
            "sme_vector_length": str(length),
            **software_class(),
            "executorch_aarch64": executorch_version(toolchain.executorch_dir),
        }
        fingerprint = {
            **machine_class,
            "host_cpu": cpu_model(),
            **software_fingerprint(),
            "runner": binary.parent.name,
        }
        return DeviceInfo(
            name=self.label,
            fingerprint=fingerprint,
            machine_class=machine_class,
            has_sme2=True,
            variants=(Variant.ON, Variant.OFF),
            time_meaningful=False,
            limits={
                "speedup": f"{_NOT_A_SIGNAL} (see the instruction ratio)",
                "latency": f"{_NOT_A_SIGNAL}; latency gates need real hardware (mac, android)",
            },
        )

    def _libraries(self, model: Path) -> tuple[Path, ...]:
        """ExecuTorch's aarch64 LLM custom kernels where ``model`` calls ``llama::`` operators
        (their torch libraries fetched on first need), else none."""
        if not custom_operators(model):
            return ()
        if self._kernels is None:
            self._kernels = aarch64_custom_kernels(self._prepared()[0].executorch_dir)
        return (self._kernels.library(),)

    def _kernel_files(self, model: Path) -> dict[str, Path]:
        """What a run of ``model`` loads beyond the wheel, for the stored counts' key: the custom
        kernels' library and the torch libraries it loads (nothing for most programs)."""
        libraries = self._libraries(model)
        if not libraries or self._kernels is None:
            return {}
        site = self._kernels.torch_lib.parents[1]  # torch/lib and nvidia/*/lib
        return {"kernel library": libraries[0], "torch libraries": site}

    def _prefix(
        self,
        variant: Variant,
        exec_log: Path | None = None,
        layout: frozenset[CodeMapping] | None = None,
    ) -> list[str]:
        """qemu's command prefix; with a probe run's ``layout``, one that maps the guest's code
        the same way and leaves the torch libraries' code out of the exec log."""
        toolchain, _ = self._prepared()
        command = qemu_command(
            toolchain,
            sme2=variant is Variant.ON,
            exec_log=exec_log,
            sme_vector_length=self.sme_vector_length,
        )
        if layout is None:
            return command
        return fixed_layout([*command, "-dfilter", log_filter(layout, self._unlogged())])

    def _unlogged(self) -> frozenset[str]:
        """The file names of the torch libraries the custom kernels' library loads."""
        assert self._kernels is not None, "only a run that loads the custom kernels narrows"
        site = self._kernels.torch_lib.parents[1]
        return frozenset(path.name for path in site.rglob("*.so*") if path.is_file())

    def _probe_layout(
        self, model: Path, inputs: Path, variant: Variant, plan: RunPlan, workdir: Path
    ) -> frozenset[CodeMapping]:
        """Where a run of ``model`` maps each file's code in a guest address space of its own
        (qemu's ``-R``): the same run logging its system calls only (seconds, where the exec log
        takes minutes)."""
        probe_log = workdir.resolve() / "qemu-probe.log"
        command = fixed_layout([*self._prefix(variant), "-d", "strace", "-D", str(probe_log)])
        try:
            self._run_under(command, model, inputs, plan, workdir)
            return code_layout(probe_log)
        finally:
            probe_log.unlink(missing_ok=True)

    def run(
        self, model: Path, inputs: Path, variant: Variant, plan: RunPlan, workdir: Path
    ) -> RunResult:
        return self._run_under(self._prefix(variant), model, inputs, plan, workdir)

    def _run_under(
        self, qemu: list[str], model: Path, inputs: Path, plan: RunPlan, workdir: Path
    ) -> RunResult:
        """The aarch64 runner run isolated under the ``qemu`` command prefix, with the custom
        kernels where ``model`` calls them."""
        _, binary = self._prepared()
        return run_runner(
            binary,
            model,
            workdir,
            plan,
            inputs=inputs,
            prefix=qemu,
            default_timeout_s=EMULATED_TIMEOUT_S,
            isolated=True,
            libraries=self._libraries(model),
        )

    def evidence(
        self,
        model: Path,
        inputs: Path,
        variant: Variant,
        threads: int,
        workdir: Path,
        *,
        timeout_s: float | None = None,
    ) -> Sme2Evidence:
        """The evidence of :meth:`counted_run`, for callers that need neither its ETDump nor its
        outputs (``measure`` takes the whole counted run)."""
        return self.counted_run(
            model, inputs, variant, threads, workdir, timeout_s=timeout_s
        ).evidence

    def counted_run(
        self,
        model: Path,
        inputs: Path,
        variant: Variant,
        threads: int,
        workdir: Path,
        *,
        timeout_s: float | None = None,
    ) -> CountedRun:
        """One traced run, its last execution counted: instructions split by its ETDump events,
        the kernels it executed, and the instructions of the method's init (where the weights
        are packed); the run's ETDump and outputs are the variant's. :data:`COUNTED_WARMUP`
        executions precede the counted one.
        """
        plan = RunPlan(
            runs=1, warmup=COUNTED_WARMUP, threads=threads, traced=True, timeout_s=timeout_s
        )
        result, executions, init, stored_at = self._stored_or_counted(
            model, inputs, variant, plan, workdir
        )
        assert result.etdump is not None, "a traced run always writes an ETDump"
        inference = executions[-1]
        index = len(executions) - 1
        trace = read_etdump(result.etdump)
        counted = instruction_trace(trace, index, inference.clock_reads)
        operators = operator_kernels(
            trace.runs[index], inference.clock_reads, inference.interval_functions, result.etdump
        )
        evidence = kernel_evidence(
            executed_kernels(inference),
            source=EVIDENCE_SOURCE,
            instructions=counted.runs[0].e2e_ns,
            sme_instructions=inference.sme,
            instruction_trace=counted,
            executed=kernels_of_operators(operators),
            operator_kernels=operators,
        )
        return CountedRun(
            result,
            replace(
                evidence,
                init_instructions=init.total if init is not None else None,
                stored_count_at=stored_at,
            ),
        )

    def _stored_or_counted(
        self, model: Path, inputs: Path, variant: Variant, plan: RunPlan, workdir: Path
    ) -> tuple[RunResult, list[InstructionCount], InstructionCount | None, str]:
        """:meth:`count_executions`, or its stored run of the same key read back (then also
        when that was counted); a count of one thread is stored, never one of a thread pool,
        whose spinning makes it vary."""
        store = self.count_store if plan.threads == 1 else None
        key = self._count_key(model, inputs, variant, plan) if store is not None else ""
        if store is not None and not self.recount:
            stored = load_count(store, key, workdir, plan)
            if stored is not None:
                return stored.result, list(stored.executions), stored.init, stored.counted_at
        result, executions, init = self.count_executions(model, inputs, variant, plan, workdir)
        if store is not None:
            store_count(store, key, result, workdir, executions, init)
        return result, executions, init, ""

    def _count_key(self, model: Path, inputs: Path, variant: Variant, plan: RunPlan) -> str:
        """Everything a counted run is a function of (see
        :mod:`pytest_sme2.devices.stored_counts`): the files the guest reads, qemu's
        arguments and version, the plan, and the counting code."""
        toolchain, binary = self._prepared()
        kernel_files = self._kernel_files(model)
        files = {
            "qemu": toolchain.qemu,
            "shim": toolchain.shim,
            "guest root": toolchain.sysroot,
            "runner": binary,
            "wheel": toolchain.executorch_dir / "lib",
            "program": model,
            "inputs": inputs,
            "counter": Path(qemu_log.__file__),
            "symbols": Path(elf_symbols.__file__),
            "log reading": Path(log_fifo.__file__),
            "system calls": Path(guest_syscalls.__file__),
            "log narrowing": Path(exec_filter.__file__),
            "invocation": Path(invoke.__file__),  # isolation: the names, the empty environment
            "staging": Path(staging.__file__),
            **{f"host {path}": path for path in HOST_FILES},
            **kernel_files,
        }
        arguments = self._prefix(variant, exec_log=Path("exec-log"))
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

    def count_executions(
        self, model: Path, inputs: Path, variant: Variant, plan: RunPlan, workdir: Path
    ) -> tuple[RunResult, list[InstructionCount], InstructionCount | None]:
        """Run ``plan`` with qemu's execution log streamed through a FIFO into the
        counter (the log, 300+ MB per inference, never touches the disk): the run, one count per
        execution in order (their clock reads line up with the ETDump's runs,
        :func:`pytest_sme2.analysis.attribution.instruction_trace`), and the method init's count
        (None unless it ran once).
        """
        toolchain, _ = self._prepared()
        workdir.mkdir(parents=True, exist_ok=True)
        layout = (
            self._probe_layout(model, inputs, variant, plan, workdir)
            if self._libraries(model)
            else None
        )
        fifo = workdir.resolve() / "qemu-exec-log.fifo"  # qemu opens it in the run's directory
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo)
        libraries = sorted((toolchain.executorch_dir / "lib").glob("*.so"))
        try:
            calls, result = read_while(
                fifo,
                lambda: count_calls(fifo, libraries, EXECUTE_SYMBOL, INIT_SYMBOL, layout=layout),
                lambda: self._run_under(
                    self._prefix(variant, exec_log=fifo, layout=layout),
                    model,
                    inputs,
                    plan,
                    workdir,
                ),
            )
        finally:
            fifo.unlink(missing_ok=True)
        inits = [call for call in calls if call.function == INIT_SYMBOL]
        executions = [call for call in calls if call.function == EXECUTE_SYMBOL]
        if len(executions) != plan.warmup + plan.runs:
            raise RunnerError(
                f"{model}: the qemu log shows {len(executions)} inference(s), the runner ran "
                f"{plan.warmup + plan.runs}"
            )
        return result, executions, inits[0] if len(inits) == 1 else None


def executed_kernels(count: InstructionCount) -> list[str]:
    """The executed functions that are compute kernels: KleidiAI's ``kai_kernel_*`` bodies and
    XNNPACK's ``xnn_*_ukernel_*`` (not the ``kai_run_*``/``kai_get_*`` wrappers and getters)."""
    return [
        name
        for name in count.functions
        if name.startswith("kai_kernel_") or (name.startswith("xnn_") and "_ukernel_" in name)
    ]
