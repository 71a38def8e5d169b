"""Provisioning of the emulated SME2 device, for real: qemu-aarch64 from trixie-backports, the
cross toolchain, the aarch64 wheel and the hide-SME shim, then a cross-built runner on real
programs with SME2 on and hidden.

The first run on a fresh machine downloads ~90 MB and installs the cross toolchain (about 20 s
here); later runs hit the cache (``cache_root()/qemu-sme2``).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pytest_sme2 import progress
from pytest_sme2.analysis.trace import read_etdump
from pytest_sme2.devices import provision
from pytest_sme2.devices.guest_root import CPU_VIEW
from pytest_sme2.devices.provision import (
    HWCAP2_SME,
    HWCAP2_SME2,
    MIN_QEMU_MAJOR,
    QEMU_ENV,
    Hwcaps,
    QemuToolchain,
    provision_qemu,
    qemu_command,
    read_hwcaps,
)
from pytest_sme2.devices.qemu_log import QEMU_LOG_FLAGS, count_instructions
from pytest_sme2.errors import ConfigError
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.model_spec import get_model
from pytest_sme2.runner.build import build_runner
from pytest_sme2.runner.invoke import Executions, Launch, RunnerCall, run_runner
from pytest_sme2.runner.tensors import read_tensors

# The SME bits of Linux arch/arm64/include/uapi/asm/hwcap.h that qemu's -cpu max sets.
SME_HWCAP_BITS = set(range(42, 48))
SME_HWCAP2_BITS = set(range(23, 31)) | set(range(37, 43)) | set(range(57, 63))


def _bits(value: int) -> set[int]:
    return {bit for bit in range(64) if value >> bit & 1}


@pytest.fixture(scope="module")
def toolchain() -> QemuToolchain:
    return provision_qemu(log=lambda _: None)


def _probe(command: list[str]) -> Hwcaps:
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()
    return Hwcaps(int(out[0], 16), int(out[1], 16))


def test_toolchain_is_complete(toolchain: QemuToolchain) -> None:
    assert int(toolchain.qemu_version.split(".")[0]) >= MIN_QEMU_MAJOR
    for tool in (toolchain.qemu, toolchain.cc, toolchain.cxx):
        assert os.access(tool, os.X_OK), tool
    assert (toolchain.sysroot / "lib/libstdc++.so.6").is_file()
    assert (toolchain.executorch_dir / "share/cmake/executorch-config.cmake").is_file()
    # The wheel's XNNPACK carries the KleidiAI SME2 kernels the sme2-on variant is about.
    xnnpack = (toolchain.executorch_dir / "lib/libexecutorch_backend_xnnpack.so").read_bytes()
    assert b"kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa" in xnnpack


def test_sme2_on_reports_sme_and_sme2(toolchain: QemuToolchain) -> None:
    on = read_hwcaps(toolchain, sme2=True)
    assert on.sme and on.sme2


def test_shim_hides_exactly_what_a_cpu_without_sme_lacks(toolchain: QemuToolchain) -> None:
    on = read_hwcaps(toolchain, sme2=True)
    off = read_hwcaps(toolchain, sme2=False)
    base = [str(toolchain.qemu), "-L", str(toolchain.sysroot)]
    no_sme = _probe([*base, "-cpu", "max,sme=off", str(toolchain.hwcap_probe)])
    assert not (off.sme or off.sme2)
    assert off == no_sme
    # what disappeared is SME and its sub-features, by the kernel's names; nothing else
    assert _bits(on.hwcap & ~off.hwcap) == SME_HWCAP_BITS & _bits(on.hwcap)
    assert _bits(on.hwcap2 & ~off.hwcap2) == SME_HWCAP2_BITS
    assert {HWCAP2_SME.bit_length() - 1, HWCAP2_SME2.bit_length() - 1} <= SME_HWCAP2_BITS


def test_variants_differ_only_in_what_getauxval_says(toolchain: QemuToolchain) -> None:
    on = qemu_command(toolchain, sme2=True)
    off = qemu_command(toolchain, sme2=False)
    assert on[:5] == off[:5] == [str(toolchain.qemu), "-cpu", "max", "-L", str(toolchain.sysroot)]
    assert on[5:] == ["-U", "LD_PRELOAD"]
    assert off[5:] == ["-E", f"LD_PRELOAD={toolchain.shim}"]
    logged = qemu_command(toolchain, sme2=True, exec_log=Path("/tmp/x.log"))
    assert logged[len(on) :] == ["-d", QEMU_LOG_FLAGS, "-D", "/tmp/x.log"]


def test_provisioning_is_idempotent(toolchain: QemuToolchain) -> None:
    entries = sorted(toolchain.qemu.parent.parent.iterdir())
    assert provision_qemu(log=lambda _: None) == toolchain
    assert sorted(toolchain.qemu.parent.parent.iterdir()) == entries


def test_provisioning_that_takes_long_says_its_steps(
    toolchain: QemuToolchain, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh machine spends minutes on apt and downloads: provisioning says which step it is
    at (here with the quiet period at zero, as if the cached steps had taken long); a cached
    one says nothing."""
    sink = io.StringIO()
    monkeypatch.setattr(progress, "_SINK", None)
    monkeypatch.setattr(progress, "_FINISHED", [])
    progress.configure(sink)
    assert provision_qemu(log=lambda _: None) == toolchain
    assert sink.getvalue() == "" and progress.take_finished() == []
    monkeypatch.setattr(provision, "PROVISION_QUIET_S", 0.0)
    assert provision_qemu(log=lambda _: None) == toolchain
    (done,) = progress.take_finished()
    assert done.what == "provision qemu-sme2"
    assert [stage for stage, _ in done.stages] == [
        "cross compilers",
        "probe tools",
        "qemu-user",
        "aarch64 executorch wheel",
    ]
    assert sink.getvalue().splitlines()[-1].endswith(done.describe())


def test_user_supplied_qemu_is_verified_and_used(
    toolchain: QemuToolchain, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The user's qemu (a wrapper of the real one, which it is not) is the one verified and
    chosen: a provisioning that ignored the variable would return the cached qemu."""
    called = tmp_path / "called"
    users = tmp_path / "users-qemu-aarch64"
    users.write_text(f'#!/bin/sh\necho "$@" >> {called}\nexec {toolchain.qemu} "$@"\n')
    users.chmod(0o755)
    monkeypatch.setenv(QEMU_ENV, str(users))
    chosen = provision_qemu(log=lambda _: None)
    assert chosen.qemu == users != toolchain.qemu
    assert chosen.qemu_version == toolchain.qemu_version
    assert "--version" in called.read_text()  # verified by asking it


def test_missing_user_qemu_names_the_path_and_the_fix(tmp_path: Path) -> None:
    bogus = tmp_path / "no-such-qemu"
    with pytest.raises(ConfigError, match=rf"{QEMU_ENV}={bogus}: no such qemu-aarch64.*unset"):
        provision_qemu(qemu=bogus, log=lambda _: None)


def test_user_qemu_that_is_not_qemu_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"true: not qemu-aarch64 .*unset SME2_QEMU"):
        provision_qemu(qemu=Path("/bin/true"), log=lambda _: None)


def test_user_qemu_without_sme2_is_refused(tmp_path: Path) -> None:
    old = tmp_path / "qemu-aarch64"
    old.write_text("#!/bin/sh\necho 'qemu-aarch64 version 7.2.0 (Debian 1:7.2+dfsg-7)'\n")
    old.chmod(0o755)
    with pytest.raises(ConfigError, match=r"qemu-aarch64 7\.2\.0 has no SME2, need >= 11"):
        provision_qemu(qemu=old, log=lambda _: None)


# --- the cross-built runner on real programs ---------------------------------------------------


@pytest.fixture(scope="module")
def aarch64_runner(toolchain: QemuToolchain) -> Path:
    return build_runner(target="aarch64", executorch_dir=toolchain.executorch_dir)


def _run(
    runner: Path, dtype: str, prefix: list[str], workdir: Path
) -> tuple[list[str], list[np.ndarray]]:
    """Run toy_cnn × ``dtype`` once, traced: its delegated event names and its outputs."""
    artifact = export_model(get_model("toy_cnn"), dtype)
    plan = Executions(runs=1, warmup=0, traced=True)
    result = run_runner(
        runner,
        RunnerCall(artifact.pte, artifact.inputs, plan, workdir),
        Launch(prefix=prefix, default_timeout_s=900),
    )
    assert result.etdump is not None and result.outputs is not None
    trace = read_etdump(result.etdump)
    names = sorted({event.name for run in trace.runs for event in run.events if event.delegated})
    return names, read_tensors(result.outputs)


def test_the_guest_reads_its_cpus_from_the_fixed_view_not_the_host(
    toolchain: QemuToolchain, aarch64_runner: Path, tmp_path: Path
) -> None:
    """Every file of ``/sys/devices/system/cpu`` the runner opens (cpuinfo sizes its tables by
    them, and so the runner's heap) is served from the guest root's view: none of the host's
    leaks into an instruction count. qemu's ``-strace`` lists what the guest opened."""
    artifact = export_model(get_model("toy_cnn").for_emulation(), "fp32")
    prefix = [*qemu_command(toolchain, sme2=True), "-strace"]
    result = run_runner(
        aarch64_runner,
        RunnerCall(artifact.pte, artifact.inputs, Executions(runs=1, warmup=0), tmp_path),
        Launch(prefix=prefix, isolated=True, default_timeout_s=900),
    )
    opened = set(re.findall(r'openat\(AT_FDCWD,"(/sys/devices/system/cpu/[^"]+)"', result.log))
    assert {"/sys/devices/system/cpu/possible", "/sys/devices/system/cpu/kernel_max"} <= opened
    assert {path for path in opened if not (toolchain.sysroot / path[1:]).is_file()} == set()
    assert set(CPU_VIEW) >= {path[1:] for path in opened}


def test_fp32_gemms_are_packed_with_sme2_and_plain_when_hidden(
    toolchain: QemuToolchain, aarch64_runner: Path, tmp_path: Path
) -> None:
    no_sme = [str(toolchain.qemu), "-cpu", "max,sme=off", "-L", str(toolchain.sysroot)]
    on, on_out = _run(aarch64_runner, "fp32", qemu_command(toolchain, sme2=True), tmp_path / "on")
    off, off_out = _run(
        aarch64_runner, "fp32", qemu_command(toolchain, sme2=False), tmp_path / "off"
    )
    cpu, cpu_out = _run(aarch64_runner, "fp32", no_sme, tmp_path / "no-sme")
    assert any("PF32" in name for name in on), on
    assert not any("PF32" in name for name in off), off
    assert [name.replace("PF32", "F32") for name in on] == off
    # the shim is indistinguishable from a CPU without SME: same kernels, same bits
    assert off == cpu
    assert all(np.array_equal(a, b) for a, b in zip(off_out, cpu_out, strict=True))
    assert all(
        np.allclose(a, b, rtol=1e-5, atol=1e-5) for a, b in zip(on_out, off_out, strict=True)
    )


def test_dynamic_int8_runs_sme2_kernels_only_when_sme2_is_visible(
    toolchain: QemuToolchain, aarch64_runner: Path, tmp_path: Path
) -> None:
    libraries = sorted((toolchain.executorch_dir / "lib").glob("*.so"))
    counts, names = {}, {}
    for variant, sme2 in (("on", True), ("off", False)):
        log = tmp_path / f"{variant}.log"
        # 128-bit vectors, where SME2 emulates fastest: the kernels are the same
        prefix = qemu_command(toolchain, sme2=sme2, exec_log=log, sme_vector_length=16)
        names[variant], _ = _run(aarch64_runner, "int8-dynamic", prefix, tmp_path / variant)
        counts[variant] = count_instructions(log, libraries)
        log.unlink()  # ~100 MB
    # the dynamically quantized linear's name cannot tell (QP8 on both sides; toy_cnn's
    # convolutions stay fp32 and do show PF32) ...
    qp8 = {variant: [name for name in found if "QP8" in name] for variant, found in names.items()}
    assert qp8["on"] == qp8["off"] != []
    # ... the executed instructions can: SME2 KleidiAI int8 kernels ran, and only with SME2 on
    sme2_int8 = [f for f in counts["on"].sme_functions if f.startswith("kai_") and "sme2" in f]
    assert any("qai8dxp" in f for f in sme2_int8), counts["on"].sme_functions
    assert counts["off"].sme == 0
    assert not any("sme" in f for f in counts["off"].functions if f.startswith("kai_kernel"))


# --- the macOS shim (no Mac here: compile checks only) -----------------------------------------

MAC_SHIM = Path(__file__).resolve().parents[2] / "pytest_sme2/devices/shim/mac_hide_sme.c"


def test_mac_shim_is_valid_c() -> None:
    warnings = ["-Wall", "-Wextra", "-Werror", "-std=c11"]
    subprocess.run(["cc", "-fsyntax-only", *warnings, str(MAC_SHIM)], check=True)


@pytest.mark.skipif(shutil.which("clang") is None, reason="needs clang to target macOS arm64")
def test_mac_shim_compiles_to_a_macho_interpose_table(tmp_path: Path) -> None:
    target = ["-target", "arm64-apple-macos11", "-Wall", "-Wextra", "-Werror"]
    subprocess.run(
        ["clang", *target, "-c", "-o", str(tmp_path / "shim.o"), str(MAC_SHIM)], check=True
    )
    obj = (tmp_path / "shim.o").read_bytes()
    assert obj[:4] == b"\xcf\xfa\xed\xfe"  # 64-bit Mach-O
    assert b"__interpose" in obj and b"_sysctlbyname" in obj
