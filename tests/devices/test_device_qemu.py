"""The qemu-sme2 device for real: provisioned qemu, the cross-built runner, real exports, and
instruction counts per inference from qemu's execution log streamed through a FIFO.

Also the per-call counting it relies on (:func:`count_calls`), on a small guest program whose
calls are known: every call counted alike, one-time work before the first call and work after
the last one left out.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pytest_sme2.analysis.kernel_names import is_unnamed_code
from pytest_sme2.analysis.trace import read_etdump
from pytest_sme2.devices.base import EVIDENCE_WARMUP, RunRequest, evidence_request
from pytest_sme2.devices.log_fifo import read_while
from pytest_sme2.devices.provision import QemuToolchain, provision_qemu, qemu_command
from pytest_sme2.devices.qemu import DEFAULT_SME_VECTOR_LENGTH, QemuSme2Device
from pytest_sme2.devices.qemu_count import EVIDENCE_SOURCE
from pytest_sme2.devices.qemu_log import count_calls, count_instructions
from pytest_sme2.errors import ConfigError, RunnerError, TraceError
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.model_spec import get_model
from pytest_sme2.measure.case import MeasurePlan
from pytest_sme2.records.device import Variant
from pytest_sme2.runner.invoke import Executions
from pytest_sme2.runner.tensors import read_tensors
from tests.measurements import measure_toy_cnn

_WORK = """\
long work(long n) {
    volatile long sum = 0;
    for (long i = 0; i < n; i++) sum += i;
    return sum;
}
"""
# Set-up before the loop and work after it that must not count; the loop reads the clock around
# each call as a benchmark loop does; then a file is opened, as the runner opens its outputs.
_MAIN = """\
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
long work(long n);
static long busy(long n) { volatile long s = 0; for (long i = 0; i < n; i++) s ^= i; return s; }
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    int calls = atoi(argv[2]);
    struct timespec t;
    busy(50 * n);
    for (int i = 0; i < calls; i++) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        work(n);
        clock_gettime(CLOCK_MONOTONIC, &t);
    }
    busy(50 * n);
    FILE *f = fopen("/dev/null", "w");
    busy(50 * n);
    return f == NULL;
}
"""


@pytest.fixture(scope="module")
def toolchain() -> QemuToolchain:
    return provision_qemu(log=lambda _: None)


@pytest.fixture(scope="module")
def work_program(toolchain: QemuToolchain, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("work")
    (out / "work.c").write_text(_WORK)
    (out / "main.c").write_text(_MAIN)
    cc = str(toolchain.cc)
    library = [cc, "-O1", "-shared", "-fPIC", "-o", str(out / "libwork.so"), str(out / "work.c")]
    subprocess.run(library, check=True)
    main = [cc, "-O1", "-o", str(out / "main"), str(out / "main.c"), f"-L{out}", "-lwork"]
    subprocess.run([*main, f"-Wl,-rpath,{out}"], check=True)
    return out / "main"


def _calls(toolchain: QemuToolchain, program: Path, n: int, calls: int, log: Path) -> list[int]:
    command = [*qemu_command(toolchain, sme2=True, exec_log=log), str(program), str(n), str(calls)]
    subprocess.run(command, check=True, timeout=300)
    counted = count_calls(log, [program.with_name("libwork.so")], "work")
    assert all(count.functions["work"] > n for count in counted)
    return [count.total for count in counted]


def test_each_call_is_counted_alone(
    toolchain: QemuToolchain, work_program: Path, tmp_path: Path
) -> None:
    small = _calls(toolchain, work_program, 1000, 3, tmp_path / "small.log")
    large = _calls(toolchain, work_program, 3000, 3, tmp_path / "large.log")
    assert len(small) == len(large) == 3
    # every call of work(n) costs the same loop, whatever came before or after it: the set-up
    # and the work after the loop (50 n iterations each) are in no call
    per_iteration, remainder = divmod(large[0] - small[0], 2000)
    assert remainder == 0 and per_iteration >= 3
    for counts, n in ((small, 1000), (large, 3000)):
        assert max(counts) - min(counts) < 100  # the benchmark loop's own few instructions
        assert n * per_iteration <= min(counts) < n * per_iteration + 200
    # the whole run holds the set-up and tail work as well (3 x 50 n iterations)
    whole = count_instructions(tmp_path / "large.log")
    assert whole.total > sum(large) + 150 * 3000 * per_iteration // 2


def test_each_clock_read_knows_the_functions_executed_since_the_last_one(
    toolchain: QemuToolchain, work_program: Path, tmp_path: Path
) -> None:
    """What splits an operator's instructions between its kernels: per interval between clock
    reads, the instructions of each function, summing to the interval exactly."""
    log = tmp_path / "work.log"
    command = [*qemu_command(toolchain, sme2=True, exec_log=log), str(work_program), "1000", "3"]
    subprocess.run(command, check=True, timeout=300)
    counted = count_calls(log, [work_program.with_name("libwork.so")], "work")
    assert len(counted) == 3
    for count in counted:
        assert len(count.interval_functions) == len(count.clock_reads) >= 1
        before = 0
        for read, functions in zip(count.clock_reads, count.interval_functions, strict=True):
            assert sum(functions.values()) == read.instructions - before
            before = read.instructions
        assert before == count.total
        # work() runs before the clock read that follows it returning; libc's clock_gettime
        # has no symbol table given: its code counts under its library
        assert count.interval_functions[0]["work"] == count.functions["work"]
        assert any(is_unnamed_code(f) for functions in count.interval_functions for f in functions)


def test_a_function_that_never_runs_is_an_error(
    toolchain: QemuToolchain, work_program: Path, tmp_path: Path
) -> None:
    log = tmp_path / "none.log"
    command = [*qemu_command(toolchain, sme2=True, exec_log=log), str(work_program), "10", "0"]
    subprocess.run(command, check=True, timeout=300)
    with pytest.raises(TraceError, match="never ran"):
        count_calls(log, [work_program.with_name("libwork.so")], "work")
    with pytest.raises(TraceError, match="no function 'nope'"):
        count_calls(log, [work_program.with_name("libwork.so")], "nope")


# --- the device ---------------------------------------------------------------------------------


def test_options_pick_qemu_and_vector_length(tmp_path: Path) -> None:
    options = {"sme2_qemu": str(tmp_path / "qemu-aarch64"), "sme2_qemu_vl": "32"}
    chosen = QemuSme2Device.from_options(options.get)
    assert chosen.qemu == tmp_path / "qemu-aarch64" and chosen.sme_vector_length == 32
    default = QemuSme2Device.from_options({}.get)
    assert default.qemu is None and default.sme_vector_length == DEFAULT_SME_VECTOR_LENGTH
    for bad in ("128", "wide"):
        with pytest.raises(ConfigError, match="--sme2-qemu-vl"):
            QemuSme2Device.from_options({"sme2_qemu_vl": bad}.get)
    with pytest.raises(ConfigError, match="qemu-aarch64"):  # a missing user qemu, named
        chosen.prepare()


def test_info_says_what_emulation_can_and_cannot_prove(qemu_device: QemuSme2Device) -> None:
    info = qemu_device.info()
    assert info.has_sme2 and info.variants == (Variant.ON, Variant.OFF)
    assert not info.time_meaningful
    assert "instruction ratio" in info.limits["speedup"] and "latency" in info.limits
    print_ = info.fingerprint
    assert int(print_["qemu"].split(".")[0]) >= 11
    assert print_["sme_vector_length"] == str(DEFAULT_SME_VECTOR_LENGTH)
    assert print_["executorch_aarch64"].startswith(print_["executorch"])
    assert print_["runner"].startswith("aarch64-")


@pytest.mark.parametrize("dtype", ["fp32", "int8-dynamic"])
def test_sme2_on_runs_sme2_kernels_and_fewer_instructions(
    stored_qemu_device: QemuSme2Device, dtype: str, tmp_path: Path
) -> None:
    artifact = export_model(get_model("toy_cnn"), dtype)
    on = stored_qemu_device.evidence(
        evidence_request(artifact.pte, artifact.inputs, tmp_path / "on", variant=Variant.ON)
    )
    off = stored_qemu_device.evidence(
        evidence_request(artifact.pte, artifact.inputs, tmp_path / "off", variant=Variant.OFF)
    )
    assert on.source == off.source == EVIDENCE_SOURCE
    assert on.sme2_kernels and all(k.startswith("kai_kernel_") for k in on.sme2_kernels)
    assert on.sme_instructions and on.instructions
    assert off.sme2_kernels == off.sme_kernels == () and off.sme_instructions == 0
    assert off.instructions and off.instructions > on.instructions
    if dtype == "int8-dynamic":  # the proof names cannot give: the int8 SME2 kernel ran
        assert any("qai8dxp" in kernel for kernel in on.sme2_kernels)
    assert not list(tmp_path.rglob("*.fifo"))  # the log never stays behind


def test_measure_on_qemu_shows_packed_names_on_only_and_equal_outputs(
    stored_qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    plan = MeasurePlan(runs=1, warmup=0, rounds=1, traced_runs=1)
    measured = measure_toy_cnn(stored_qemu_device, plan, tmp_path)
    on, off = measured.variants[Variant.ON], measured.variants[Variant.OFF]
    assert on.profile.packed_operators and not off.profile.packed_operators
    assert on.outputs is not None and off.outputs is not None
    for a, b in zip(read_tensors(on.outputs), read_tensors(off.outputs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # one run per variant: the counted run is the traced run, its outputs the variant's
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sme2-off-counted", "sme2-on-counted"]
    assert on.outputs.parent.name == "sme2-on-counted"
    assert on.evidence is not None and on.evidence.instructions
    assert on.load is not None and on.load.init_instructions == on.evidence.init_instructions


def test_the_counted_run_is_a_traced_run_with_the_inferences_outputs(
    narrow_qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    """Its ETDump holds the warm-up and the counted execution, its count is the last one's, and
    its outputs are what a plain run computes."""
    artifact = export_model(get_model("toy_cnn"), "fp32")
    counted = narrow_qemu_device.counted_run(
        evidence_request(artifact.pte, artifact.inputs, tmp_path / "c", variant=Variant.ON)
    )
    run, evidence = counted
    assert run.traced and run.warmup == EVIDENCE_WARMUP and run.etdump is not None
    assert len(read_etdump(run.etdump).runs) == EVIDENCE_WARMUP + 1
    assert evidence.instruction_trace is not None
    assert evidence.instructions == evidence.instruction_trace.runs[0].e2e_ns > 0
    assert evidence.init_instructions and evidence.sme2_kernels
    plain = narrow_qemu_device.run(
        RunRequest(
            artifact.pte,
            artifact.inputs,
            Executions(runs=1, warmup=0),
            tmp_path / "plain",
            variant=Variant.ON,
        )
    )
    assert run.outputs is not None and plain.outputs is not None
    for a, b in zip(read_tensors(run.outputs), read_tensors(plain.outputs), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_failing_run_fails_the_evidence_without_hanging(
    qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    not_a_model = tmp_path / "broken.pte"
    not_a_model.write_bytes(b"not a program")
    artifact = export_model(get_model("toy_cnn"), "fp32")
    with pytest.raises(RunnerError, match="not an ExecuTorch program"):
        qemu_device.evidence(
            evidence_request(not_a_model, artifact.inputs, tmp_path, variant=Variant.ON)
        )


def test_a_writer_that_never_starts_does_not_block_the_reader(tmp_path: Path) -> None:
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)

    def never_starts() -> None:
        raise RunnerError("cannot start qemu")

    with pytest.raises(RunnerError, match="cannot start qemu"):
        read_while(fifo, lambda: fifo.read_bytes(), never_starts)


def test_run_uses_the_same_binary_for_both_variants(
    qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    artifact = export_model(get_model("toy_cnn"), "int8")
    plan = Executions(runs=1, warmup=0)
    on = qemu_device.run(
        RunRequest(artifact.pte, artifact.inputs, plan, tmp_path / "on", variant=Variant.ON)
    )
    off = qemu_device.run(
        RunRequest(artifact.pte, artifact.inputs, plan, tmp_path / "off", variant=Variant.OFF)
    )
    runner = [word for word in on.command if word.endswith("sme2_runner")]
    assert runner and runner == [word for word in off.command if word.endswith("sme2_runner")]
    assert any("hide_sme.so" in word for word in off.command)
    assert not any("hide_sme.so" in word for word in on.command)
