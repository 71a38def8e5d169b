"""The mac device off the Mac: what it reads from sysctl, how it builds the SME2-off environment
and the shim, and that it refuses to run anywhere but macOS on Apple Silicon.

Its variant logic is exercised by telling it it is on a Mac (sysctl text as an M4 and an M3
print it) and letting it run the host runner, which is what it runs on a Mac too.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_sme2.devices import mac
from pytest_sme2.devices.base import RunRequest, evidence_request
from pytest_sme2.devices.mac import (
    DYLD_INSERT,
    SHIM_SOURCE,
    MacDevice,
    parse_sysctl,
    shim_compile_command,
    variant_environment,
)
from pytest_sme2.errors import ConfigError
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.model_spec import get_model
from pytest_sme2.records.device import Variant
from pytest_sme2.runner.build import build_runner
from pytest_sme2.runner.invoke import Executions

# `sysctl machdep.cpu.brand_string hw.model ... hw.optional.arm.FEAT_SME2` on a Mac mini M4
# (macOS 15) and on a MacBook Air M3 with a macOS that does not know the SME keys yet.
M4_SYSCTL = """\
machdep.cpu.brand_string: Apple M4
hw.model: Mac16,10
kern.osproductversion: 15.3.1
hw.perflevel0.physicalcpu: 4
hw.perflevel1.physicalcpu: 6
hw.ncpu: 10
hw.optional.arm.FEAT_SME: 1
hw.optional.arm.FEAT_SME2: 1
"""
M3_SYSCTL = """\
machdep.cpu.brand_string: Apple M3
hw.model: Mac15,12
kern.osproductversion: 14.6
hw.perflevel0.physicalcpu: 4
hw.perflevel1.physicalcpu: 4
hw.ncpu: 8
"""


def test_sysctl_output_gives_the_chip_and_sme2() -> None:
    m4 = parse_sysctl(M4_SYSCTL)
    assert m4.has_sme2 and m4.label == "Apple M4 (Mac16,10)"
    assert m4.values["macos"] == "15.3.1" and m4.values["performance_cores"] == "4"
    m3 = parse_sysctl(M3_SYSCTL)
    assert not m3.has_sme2 and "FEAT_SME2" not in m3.values
    assert m3.values["cores"] == "8"


def test_sme2_off_inserts_the_shim_and_nothing_else() -> None:
    shim = Path("/cache/mac_hide_sme.dylib")
    assert variant_environment(Variant.OFF, shim) == {DYLD_INSERT: str(shim)}
    assert variant_environment(Variant.ON, shim) == {}
    assert variant_environment(Variant.OFF, None) == {}  # a runner pair needs no shim


@pytest.mark.skipif(shutil.which("clang") is None, reason="needs clang to target macOS arm64")
def test_the_shim_compiles_for_macos_with_the_devices_flags(tmp_path: Path) -> None:
    command = shim_compile_command("clang", SHIM_SOURCE, tmp_path / "shim.dylib")
    # off the Mac there is no SDK to link a dylib: compile with the same warnings, -c
    command = [
        "clang",
        "-target",
        "arm64-apple-macos11",
        "-c",
        *[flag for flag in command[1:-3] if flag != "-dynamiclib"],
        "-o",
        str(tmp_path / "shim.o"),
        str(SHIM_SOURCE),
    ]
    subprocess.run(command, check=True)
    assert (tmp_path / "shim.o").read_bytes()[:4] == b"\xcf\xfa\xed\xfe"  # Mach-O 64


@pytest.mark.skipif(platform.system() == "Darwin", reason="checks the refusal off macOS")
def test_prepare_off_a_mac_says_where_the_device_runs() -> None:
    with pytest.raises(ConfigError, match=r"runs on macOS on Apple Silicon.*qemu-sme2"):
        MacDevice.from_options({}.get).prepare()


def test_options_name_the_runner_pair(tmp_path: Path) -> None:
    options = {"sme2_runner_on": str(tmp_path / "on"), "sme2_runner_off": str(tmp_path / "off")}
    device = MacDevice.from_options(options.get)
    assert (device.runner_on, device.runner_off) == (tmp_path / "on", tmp_path / "off")


@pytest.fixture
def as_a_mac(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(mac, "_on_a_mac", lambda: True)
    return monkeypatch


def test_a_mac_without_sme2_runs_sme2_off_only(
    as_a_mac: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    as_a_mac.setattr(mac, "_sysctl", lambda *keys: M3_SYSCTL)
    device = MacDevice()
    device.prepare()
    info = device.info()
    assert info.variants == (Variant.OFF,) and not info.has_sme2
    assert info.limits["speedup"].startswith("Apple M3 (Mac15,12) has no SME2")
    artifact = export_model(get_model("toy_cnn"), "fp32")
    result = device.run(
        RunRequest(artifact.pte, artifact.inputs, Executions(runs=2), tmp_path, variant=Variant.OFF)
    )
    assert len(result.latencies_ms) == 2 and DYLD_INSERT not in " ".join(result.command)
    assert (
        device.evidence(
            evidence_request(artifact.pte, artifact.inputs, tmp_path, variant=Variant.OFF)
        )
        is None
    )


def test_a_runner_pair_needs_no_shim(as_a_mac: pytest.MonkeyPatch, tmp_path: Path) -> None:
    as_a_mac.setattr(mac, "_sysctl", lambda *keys: M4_SYSCTL)
    runner = build_runner("host")
    device = MacDevice(runner_on=runner, runner_off=runner)
    device.prepare()
    info = device.info()
    assert info.has_sme2 and info.variants == (Variant.ON, Variant.OFF)
    assert info.fingerprint["chip"] == "Apple M4" and info.fingerprint["sme2_off"] == "runner pair"
    assert info.machine_class["chip"] == "Apple M4" and info.machine_class["FEAT_SME2"] == "1"
    assert "macos" in info.notes and info.class_id.startswith("apple-m4-")
    with pytest.raises(ConfigError, match=r"--sme2-runner-off=.*no such file"):
        MacDevice(runner_on=runner, runner_off=tmp_path / "missing").prepare()
