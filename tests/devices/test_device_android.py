"""The android device end to end through an adb double (tests/adb_double.py) that maps the phone
onto a directory and really runs the runner: the host runner for a phone without SME2, the
aarch64 runner under qemu for a phone with it. Crashes, a lost connection and a wrong serial are
simulated the way a phone shows them.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from pathlib import Path, PurePosixPath

import numpy as np
import pytest

from pytest_sme2.analysis.trace import read_etdump
from pytest_sme2.devices.adb import Adb
from pytest_sme2.devices.android import AndroidDevice
from pytest_sme2.devices.android_bundle import (
    elf_dependencies,
    runner_libraries,
    shim_compile_command,
)
from pytest_sme2.devices.android_shell import check_cpu_mask, parse_device_facts, shell_command
from pytest_sme2.devices.base import RunRequest, evidence_request
from pytest_sme2.devices.provision import QemuToolchain, provision_qemu
from pytest_sme2.errors import ConfigError, RunnerError
from pytest_sme2.export.exporter import Artifact, export_model
from pytest_sme2.export.model_spec import get_model
from pytest_sme2.measure.case import MeasurePlan
from pytest_sme2.records.device import Variant
from pytest_sme2.report.content import coverage_text
from pytest_sme2.report.efficiency_view import efficiency_view
from pytest_sme2.runner.build import build_runner
from pytest_sme2.runner.invoke import Executions, RunnerCall, run_runner
from pytest_sme2.runner.tensors import read_tensors
from tests.adb_double import configure, install, servers_seen
from tests.measurements import measure_toy_cnn
from tests.processes import processes_mentioning

SERIAL = "R5CX12345"
_FEATURES = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma "
    "lrcpc dcpop sha3 sm3 sm4 asimddp sha512 asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg "
    "dcpodp flagm2 frint i8mm bf16 dgh bti"
)
_SME = " sme smei16i64 smef64f64 smei8i32 smef16f32 smeb16f32 smef32f32 smefa64 sme2 sme2p1"


def cpuinfo(cores: int, features: str) -> str:
    """/proc/cpuinfo as arm64 Linux prints it."""
    return "".join(
        f"processor\t: {i}\nBogoMIPS\t: 26.00\nFeatures\t: {features}\nCPU implementer\t: 0x41\n"
        f"CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd85\nCPU revision\t: 0\n\n"
        for i in range(cores)
    )


NO_SME2_PHONE = {
    "ro.product.model": "Pixel 7",
    "ro.soc.model": "GS201",
    "ro.soc.manufacturer": "Google",
    "ro.build.version.release": "14",
    "ro.product.cpu.abi": "arm64-v8a",
}
SME2_PHONE = {
    "ro.product.model": "V2509A",
    "ro.soc.model": "MT6993",
    "ro.soc.manufacturer": "Mediatek",
    "ro.build.version.release": "16",
    "ro.product.cpu.abi": "arm64-v8a",
}


# --- pure helpers -------------------------------------------------------------------------------


def test_shell_command_runs_from_the_directory_with_its_libraries() -> None:
    directory = PurePosixPath("/data/local/tmp/pytest-sme2/sme2-on")
    argv = [str(directory / "sme2_runner"), "--model_path", "/data/x y/m.pte"]
    command = shell_command(directory, argv)
    assert command == (
        f"cd {directory} && export LD_LIBRARY_PATH={directory} && exec {directory}/sme2_runner "
        "--model_path '/data/x y/m.pte'"
    )
    shim = PurePosixPath("/data/local/tmp/pytest-sme2/hide_sme.so")
    pid = PurePosixPath("/data/local/tmp/pytest-sme2/runs/1-0/runner.pid")
    pinned = shell_command(directory, argv, preload=shim, cpu_mask="80", pid_file=pid)
    steps = [shlex.split(step) for step in pinned.split(" && ")]
    assert steps[1:3] == [
        ["export", f"LD_LIBRARY_PATH={directory}", f"LD_PRELOAD={shim}"],
        ["echo", "$$", ">", str(pid)],
    ]
    assert steps[3][:3] == ["exec", "taskset", "80"]


def test_cpu_mask_must_be_nonzero_hex() -> None:
    assert check_cpu_mask("0xf0") == "0xf0"
    for bad in ("0", "cores 4-7", "g1"):
        with pytest.raises(ConfigError, match="--sme2-cpu-mask"):
            check_cpu_mask(bad)


def test_device_facts_come_from_getprop_and_every_cores_features() -> None:
    text = "".join(f"{k}={v}\n" for k, v in SME2_PHONE.items())
    text += "ro.unrelated=1\n--- cpuinfo\n" + cpuinfo(7, _FEATURES + _SME)
    text += cpuinfo(1, _FEATURES).replace("processor\t: 0", "processor\t: 7")
    facts = parse_device_facts(text)
    assert facts.properties == {
        "model": "V2509A",
        "soc": "MT6993",
        "soc_manufacturer": "Mediatek",
        "android": "16",
        "abi": "arm64-v8a",
    }
    assert facts.cores == 8
    assert not facts.has_sme2  # one core without SME2: a process may land there
    assert parse_device_facts("--- cpuinfo\n" + cpuinfo(8, _FEATURES + _SME)).has_sme2


@pytest.fixture(scope="module")
def host_runner() -> Path:
    return build_runner("host")


def test_libraries_are_found_beside_the_runner_and_on_its_runpath(host_runner: Path) -> None:
    deps = elf_dependencies(host_runner)
    assert "libexecutorch.so" in deps.needed and "$ORIGIN" in deps.search_path
    found, system = runner_libraries(host_runner)
    assert {"libexecutorch.so", "libexecutorch_backend_xnnpack.so"} <= set(found)
    assert all(path.is_file() for path in found.values())
    assert "libc.so.6" in system  # glibc's: the system's, never pushed


def test_a_runner_needing_libcxx_shared_gets_it_pushed_or_an_explanation(
    qemu_toolchain: QemuToolchain, tmp_path: Path
) -> None:
    """A real aarch64 ELF linked against ``libc++_shared.so`` (as NDK builds are)."""
    cc = str(qemu_toolchain.cc)
    (tmp_path / "lib.c").write_text("int answer(void) { return 42; }\n")
    (tmp_path / "main.c").write_text("int answer(void);\nint main(void) { return answer(); }\n")
    lib = tmp_path / "libc++_shared.so"
    shared = [cc, "-shared", "-fPIC", "-Wl,-soname,libc++_shared.so", "-o", str(lib)]
    subprocess.run([*shared, str(tmp_path / "lib.c")], check=True)
    runner = tmp_path / "runner"
    link = [cc, "-o", str(runner), str(tmp_path / "main.c"), str(lib)]
    subprocess.run(link, check=True)
    assert "libc++_shared.so" in elf_dependencies(runner).needed
    found, _ = runner_libraries(runner)
    assert found == {"libc++_shared.so": lib.resolve()}
    lib.unlink()
    assert "libc++_shared.so" in runner_libraries(runner)[1]


def test_the_ndk_shim_command_builds_hide_sme_with_the_bionic_bridge(tmp_path: Path) -> None:
    command = shim_compile_command(Path("/ndk/clang"), tmp_path / "hide_sme.so", Path("b.c"))
    assert command[1] == "--target=aarch64-linux-android28"
    assert command[-2].endswith("shim/hide_sme.c") and command[-1] == "b.c"
    assert {"-shared", "-fPIC"} <= set(command)


# --- the device through the double ------------------------------------------------------------


@pytest.fixture(scope="module")
def qemu_toolchain() -> QemuToolchain:
    return provision_qemu(log=lambda _: None)


@pytest.fixture(scope="module")
def toy() -> Artifact:
    return export_model(get_model("toy_cnn"), "fp32")


@pytest.fixture
def phone(tmp_path: Path) -> tuple[Path, Path]:
    """A phone without SME2 that runs the host runner: (adb executable, its root)."""
    root = tmp_path / "phone"
    adb = install(root, serial=SERIAL, cpuinfo=cpuinfo(8, _FEATURES), properties=NO_SME2_PHONE)
    return adb, root


def _device(adb: Path, runner: Path, **options: str) -> AndroidDevice:
    values = {"sme2_adb": str(adb), "sme2_runner_on": str(runner), **options}
    return AndroidDevice.from_options(values.get)


def test_measure_runs_end_to_end_through_adb(
    phone: tuple[Path, Path], host_runner: Path, toy: Artifact, tmp_path: Path
) -> None:
    adb, root = phone
    device = _device(adb, host_runner, sme2_cpu_mask="1")
    device.prepare()
    info = device.info()
    assert device.serial == SERIAL  # the only device, found with `adb devices`
    assert info.variants == (Variant.OFF,) and not info.has_sme2
    assert "Pixel 7" in info.limits["sme2"] and "no SME2" in info.limits["speedup"]
    assert info.fingerprint["model"] == "Pixel 7" and info.fingerprint["cores"] == "8"
    # another phone of the same model is the same machine class: serial and Android are notes
    assert info.machine_class["model"] == "Pixel 7" and info.machine_class["cpu_mask"] == "1"
    assert {"serial", "android"} <= set(info.notes) and "serial" not in info.machine_class
    pushed = root / "data/local/tmp/pytest-sme2/sme2-off"
    assert (pushed / "sme2_runner").stat().st_mode & 0o755 == 0o755
    assert (pushed / "libexecutorch_backend_xnnpack.so").is_file()

    plan = MeasurePlan(runs=4, warmup=1, rounds=2, traced_runs=2)
    measured = measure_toy_cnn(device, plan, tmp_path / "work")
    off = measured.variants[Variant.OFF]
    assert len(off.latencies_ms) == 4 and all(ms > 0 for ms in off.latencies_ms)
    assert len(read_etdump(off.etdump).runs) == 3  # 1 warm-up + 2 traced
    assert all(ms > 0 for ms in off.profile.e2e_ms)
    # the very outputs the runner computes locally with the same plan
    same = Executions(runs=2, warmup=1, traced=True)
    pinned = device.run(
        RunRequest(toy.pte, toy.inputs, same, tmp_path / "pinned", variant=Variant.OFF)
    )
    assert "taskset 1" in " ".join(pinned.command)
    local = run_runner(host_runner, RunnerCall(toy.pte, toy.inputs, same, tmp_path / "local"))
    assert off.outputs is not None and local.outputs is not None
    for a, b in zip(read_tensors(off.outputs), read_tensors(local.outputs), strict=True):
        np.testing.assert_array_equal(a, b)
    # a Release runner logs no kernels: no evidence, rather than a wrong one
    assert (
        device.evidence(evidence_request(toy.pte, toy.inputs, tmp_path, variant=Variant.OFF))
        is None
    )
    assert not list((root / "data/local/tmp/pytest-sme2/runs").iterdir())  # cleaned up


def test_a_runner_crash_fails_with_the_signal_and_the_device_log(
    phone: tuple[Path, Path], host_runner: Path, toy: Artifact, tmp_path: Path
) -> None:
    adb, root = phone
    device = _device(adb, host_runner)
    device.prepare()
    configure(root, kill_runner_with="SIGSEGV")
    with pytest.raises(RunnerError) as failure:
        device.run(
            RunRequest(toy.pte, toy.inputs, Executions(runs=20000), tmp_path, variant=Variant.OFF)
        )
    message = str(failure.value)
    assert f"runner killed by SIGSEGV on android device {SERIAL}" in message
    assert "\n" not in message
    log = tmp_path / "logcat.txt"
    assert f"device log: {log}" in message and "Fatal signal 11 (SIGSEGV)" in log.read_text()


def test_a_failing_runner_reports_its_own_error(
    phone: tuple[Path, Path], host_runner: Path, toy: Artifact, tmp_path: Path
) -> None:
    adb, _ = phone
    device = _device(adb, host_runner)
    broken = tmp_path / "broken.pte"
    broken.write_bytes(toy.pte.read_bytes()[:4096])  # a truncated program
    with pytest.raises(RunnerError, match=r"runner failed \(exit 1\) on android device .*error:"):
        device.run(
            RunRequest(broken, toy.inputs, Executions(runs=1), tmp_path, variant=Variant.OFF)
        )


def test_a_connection_lost_mid_run_is_named(
    phone: tuple[Path, Path], host_runner: Path, toy: Artifact, tmp_path: Path
) -> None:
    adb, root = phone
    device = _device(adb, host_runner)
    device.prepare()
    configure(root, lose_during_run=True)
    with pytest.raises(RunnerError, match=f"lost the connection to android device {SERIAL}"):
        device.run(
            RunRequest(toy.pte, toy.inputs, Executions(runs=20000), tmp_path, variant=Variant.OFF)
        )


def test_a_hung_shell_fails_at_the_deadline_as_hung_not_lost_and_leaves_nothing_running(
    phone: tuple[Path, Path], host_runner: Path, toy: Artifact, tmp_path: Path
) -> None:
    adb, root = phone
    device = _device(adb, host_runner)
    device.prepare()
    configure(root, hang_runner=True)
    started = time.monotonic()
    with pytest.raises(RunnerError) as failure:
        device.run(
            RunRequest(
                toy.pte, toy.inputs, Executions(runs=1, timeout_s=3), tmp_path, variant=Variant.OFF
            )
        )
    assert time.monotonic() - started < 30
    message = str(failure.value)
    assert message.startswith(
        f"android device {SERIAL} hung: adb did not finish within its 3 s deadline "
        "(--sme2-timeout), killed; last output: (no output); command: "
    )
    assert re.search(r"; the runner on the device \(pid \d+\) was killed$", message), message
    assert "lost" not in message
    # the local adb went with its deadline; the stuck runner "on the phone", in a session of its
    # own as there, went only because it was killed through adb
    assert processes_mentioning(str(root)) == []
    # and the device is still usable: the next run goes through
    assert device.run(
        RunRequest(toy.pte, toy.inputs, Executions(runs=1), tmp_path, variant=Variant.OFF)
    ).latencies_ms


def test_a_device_unplugged_while_pushing_is_named(
    phone: tuple[Path, Path], host_runner: Path
) -> None:
    adb, root = phone
    configure(root, lose_after_calls=6)  # gone in the middle of pushing the libraries
    with pytest.raises(RunnerError, match=f"lost the connection to android device {SERIAL}"):
        _device(adb, host_runner).prepare()


def test_a_serial_that_is_not_attached_is_named_with_the_server_adbs_environment_names(
    phone: tuple[Path, Path], host_runner: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """adb reads ADB_SERVER_SOCKET itself: no -H/-P is passed, and the message names it."""
    adb, root = phone
    monkeypatch.setenv("ADB_SERVER_SOCKET", "tcp:lab-host:5037")
    device = _device(adb, host_runner, sme2_adb_serial="emulator-5554")
    with pytest.raises(RunnerError) as failure:
        device.prepare()
    assert str(failure.value).startswith(
        "adb server lab-host:5037 (ADB_SERVER_SOCKET) has no android device emulator-5554: it "
        f"lists {SERIAL} (device); "
    )
    assert set(servers_seen(root)) == {"default"}


def test_missing_runner_and_adb_are_configuration_errors(
    phone: tuple[Path, Path], tmp_path: Path
) -> None:
    adb, _ = phone
    with pytest.raises(ConfigError, match="--sme2-runner-on"):
        AndroidDevice.from_options({"sme2_adb": str(adb)}.get).prepare()
    with pytest.raises(ConfigError, match="--sme2-adb"):
        AndroidDevice(adb=Adb(str(tmp_path / "no-adb")), runner_on=tmp_path).prepare()


def test_sme2_on_and_off_on_a_phone_with_sme2(
    tmp_path: Path, qemu_toolchain: QemuToolchain, toy: Artifact
) -> None:
    """The aarch64 runner under qemu behind the double: SME2-off by the preloaded shim. At
    128-bit vectors, where SME2 emulates fastest (a phone's own length is its own)."""
    root = tmp_path / "phone"
    cpu = "max,sme-default-vector-length=16"
    qemu = [str(qemu_toolchain.qemu), "-cpu", cpu, "-L", str(qemu_toolchain.sysroot)]
    adb = install(
        root,
        serial=SERIAL,
        cpuinfo=cpuinfo(8, _FEATURES + _SME),
        properties=SME2_PHONE,
        qemu=qemu,
    )
    runner = build_runner("aarch64", executorch_dir=qemu_toolchain.executorch_dir)
    device = AndroidDevice(adb=Adb(str(adb)), runner_on=runner, shim=qemu_toolchain.shim)
    device.prepare()
    info = device.info()
    assert info.has_sme2 and info.variants == (Variant.ON, Variant.OFF)
    assert "sme2" in info.fingerprint["cpu_features"].split()
    assert (root / "data/local/tmp/pytest-sme2/hide_sme.so").is_file()
    plan = MeasurePlan(runs=1, warmup=0, rounds=1, traced_runs=1)
    measured = measure_toy_cnn(device, plan, tmp_path / "work")
    on, off = measured.variants[Variant.ON], measured.variants[Variant.OFF]
    assert any("PF32" in op for op in on.profile.packed_operators)
    assert not off.profile.packed_operators
    # each variant's runner proves its label: SME2 and its vector length on, no SME off
    assert on.seen is not None and on.seen.sme2 and on.seen.svl_bytes
    assert off.seen is not None and not (off.seen.sme or off.seen.sme2)
    assert on.seen.source == off.seen.source == "getauxval(AT_HWCAP2)"
    once = Executions(runs=1, warmup=0, traced=False)
    for variant, preloaded in ((Variant.OFF, True), (Variant.ON, False)):
        run = device.run(
            RunRequest(toy.pte, toy.inputs, once, tmp_path / f"{variant}-once", variant=variant)
        )
        assert ("LD_PRELOAD" in " ".join(run.command)) is preloaded
    assert on.outputs is not None and off.outputs is not None
    for a, b in zip(read_tensors(on.outputs), read_tensors(off.outputs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # a phone shows no kernels per operator: SME2 coverage by its packed operators' names (all
    # four of toy_cnn's GEMMs and convolutions are PF32), GFLOP/s against no published peak
    assert coverage_text(measured) == "100.0%"
    assert measured.peak is not None and measured.peak.source.startswith("peak unknown for MT6993")
    view = efficiency_view(measured)
    assert view is not None and all(
        op.gflops for op in view.variants[Variant.ON] if (op.macs or 0) > 10**6
    )
