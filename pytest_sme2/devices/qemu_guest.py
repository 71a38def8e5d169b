"""What runs ``qemu-sme2``'s guest: the provisioned toolchain and the cross-built runner, the qemu
command line of a variant, and one isolated run of the runner under it.

SME2-off is the *same* binary on the same CPU with ``getauxval`` denying SME (see
:mod:`pytest_sme2.devices.provision`), so the only variable is what XNNPACK is told. The device
(:mod:`pytest_sme2.devices.qemu`) makes one guest when it is prepared; what counts the guest's
instructions is :mod:`pytest_sme2.devices.qemu_count`.
"""

from __future__ import annotations

from pathlib import Path

from pytest_sme2.devices.base import RunRequest
from pytest_sme2.devices.exec_filter import fixed_layout, log_filter
from pytest_sme2.devices.guest_syscalls import CodeMapping, code_layout
from pytest_sme2.devices.provision import QemuToolchain, qemu_command
from pytest_sme2.devices.qemu_kernels import aarch64_custom_kernels
from pytest_sme2.records.device import Variant
from pytest_sme2.runner.invoke import Launch, RunResult, run_runner
from pytest_sme2.runner.kernel_libraries import CustomKernels, custom_operators

EMULATED_TIMEOUT_S = 3600.0
"""A run's deadline under emulation when none is given: every instruction costs ~100x (the exec
log ~5x more), so the native default would cut the largest examples short."""


class QemuGuest:
    """The aarch64 runner under ``qemu-aarch64 -cpu max`` at one SME vector length, with the
    custom kernels' libraries fetched on the first program that calls them (hence not frozen)."""

    def __init__(self, toolchain: QemuToolchain, binary: Path, sme_vector_length: int) -> None:
        self.toolchain = toolchain
        self.binary = binary
        self.sme_vector_length = sme_vector_length
        self._kernels: CustomKernels | None = None

    def libraries(self, program: Path) -> tuple[Path, ...]:
        """ExecuTorch's aarch64 LLM custom kernels where ``program`` calls ``llama::`` operators
        (their torch libraries fetched on first need), else none."""
        if not custom_operators(program):
            return ()
        if self._kernels is None:
            self._kernels = aarch64_custom_kernels(self.toolchain.executorch_dir)
        return (self._kernels.library(),)

    def kernel_files(self, program: Path) -> dict[str, Path]:
        """What a run of ``program`` loads beyond the wheel, for the stored counts' key: the
        custom kernels' library and the torch libraries it loads (nothing for most programs)."""
        libraries = self.libraries(program)
        if not libraries or self._kernels is None:
            return {}
        site = self._kernels.torch_lib.parents[1]  # torch/lib and nvidia/*/lib
        return {"kernel library": libraries[0], "torch libraries": site}

    def prefix(
        self,
        variant: Variant,
        exec_log: Path | None = None,
        layout: frozenset[CodeMapping] | None = None,
    ) -> list[str]:
        """qemu's command prefix; with a probe run's ``layout``, one that maps the guest's code
        the same way and leaves the torch libraries' code out of the exec log."""
        command = qemu_command(
            self.toolchain,
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

    def run(self, request: RunRequest, prefix: list[str] | None = None) -> RunResult:
        """The runner run isolated under ``prefix`` (else the plain qemu of the request's
        variant), with the custom kernels where the program calls them."""
        launch = Launch(
            prefix=tuple(prefix or self.prefix(request.variant)),
            isolated=True,
            libraries=self.libraries(request.program),
            default_timeout_s=EMULATED_TIMEOUT_S,
        )
        return run_runner(self.binary, request, launch)

    def probe_layout(self, request: RunRequest) -> frozenset[CodeMapping]:
        """Where a run of ``request`` maps each file's code in a guest address space of its own
        (qemu's ``-R``): the same run logging its system calls only (seconds, where the exec log
        takes minutes)."""
        probe_log = request.workdir.resolve() / "qemu-probe.log"
        prefix = self.prefix(request.variant)
        try:
            self.run(request, fixed_layout([*prefix, "-d", "strace", "-D", str(probe_log)]))
            return code_layout(probe_log)
        finally:
            probe_log.unlink(missing_ok=True)
