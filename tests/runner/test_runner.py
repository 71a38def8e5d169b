"""The native runner: its cached build, and real runs of real programs through run_runner."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_sme2.errors import ConfigError, RunnerError
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.runner import Executions, Launch, RunnerCall, build_runner, run_runner
from pytest_sme2.runner.build import (
    RUNNER_SOURCE_DIR,
    build_key,
    executorch_package_dir,
    find_cmake,
)
from pytest_sme2.runner.invoke import ETDUMP_NAME, OUTPUTS_NAME, TIMINGS_NAME
from pytest_sme2.runner.tensors import read_tensors, write_tensors


@dataclass(frozen=True)
class Program:
    """A tiny exported program with real inputs and the eager outputs to compare against."""

    pte: Path
    inputs: Path
    eager: tuple[np.ndarray, ...]


def _tiny() -> Any:
    """conv + linear on an 8×8 image: small enough that shape errors are easy to provoke."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 8 * 8, 10),
    ).eval()


def _tiny_inputs(seed: int) -> tuple[Any, ...]:
    import torch

    return (torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(seed)),)


# Not registered: the suite must not parametrize over a test's private model.
TINY = ModelSpec(
    name="runner_tiny",
    factory=_tiny,
    inputs=_tiny_inputs,
    description=_tiny.__doc__ or "",
    dtypes=("fp32", "fp16"),
)


@pytest.fixture(scope="session")
def programs() -> dict[str, Program]:
    """The tiny model in fp32 and fp16 through the (cached) export stage."""
    pytest.importorskip("executorch.exir")
    programs = {}
    for dtype in TINY.dtypes:
        artifact = export_model(TINY, dtype)
        eager = tuple(read_tensors(artifact.expected_outputs))
        programs[dtype] = Program(artifact.pte, artifact.inputs, eager)
    return programs


@pytest.fixture(scope="session")
def runner() -> Path:
    """The host runner from the user's cache, as the plugin gets it."""
    return build_runner()


# ---- build ----------------------------------------------------------------------------------


def test_build_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SME2_CACHE_DIR", str(tmp_path))
    binary = build_runner()
    assert binary.is_file()
    assert binary.parent.parent == tmp_path / "runner"
    built = binary.stat()
    assert build_runner() == binary
    again = binary.stat()
    assert (again.st_ino, again.st_mtime_ns) == (built.st_ino, built.st_mtime_ns)
    assert json.loads((binary.parent / "build.json").read_text())["target"] == "host"


def test_source_change_changes_the_key(tmp_path: Path) -> None:
    copy = tmp_path / "src"
    shutil.copytree(RUNNER_SOURCE_DIR, copy, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    assert build_key(source_dir=copy) == build_key()
    with (copy / "sme2_runner.cpp").open("a") as source:
        source.write("\n// changed\n")
    assert build_key(source_dir=copy) != build_key()


def test_wheel_change_changes_the_key(tmp_path: Path) -> None:
    """A reinstalled or different wheel (other library files) must not reuse the old binary."""
    fake = tmp_path / "executorch"
    shutil.copytree(executorch_package_dir() / "share", fake / "share")
    (fake / "lib").mkdir()
    library = fake / "lib" / "libexecutorch.so"
    library.write_bytes(b"1")
    before = build_key(executorch_dir=fake)
    library.write_bytes(b"22")
    assert build_key(executorch_dir=fake) != before


def test_build_failure_reports_the_compiler_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SME2_CACHE_DIR", str(tmp_path / "cache"))
    broken = tmp_path / "src"
    shutil.copytree(RUNNER_SOURCE_DIR, broken, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    with (broken / "sme2_runner.cpp").open("a") as source:
        source.write("\nint this_does_not_compile = ;\n")
    with pytest.raises(RunnerError, match=r"build of the host runner failed.*error") as info:
        build_runner(source_dir=broken)
    log = Path(str(info.value).rsplit("full log: ", 1)[1])
    assert "this_does_not_compile" in log.read_text()
    assert not list((tmp_path / "cache" / "runner").glob("host-*/sme2_runner"))


def test_missing_cmake_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cmake", None)  # the PyPI package is not importable
    monkeypatch.setenv("PATH", "")
    with pytest.raises(RunnerError, match=r'pip install "cmake>=3.28"'):
        find_cmake()


def test_unknown_target() -> None:
    with pytest.raises(ConfigError, match="unknown runner target 'riscv'"):
        build_runner("riscv")


def test_cross_target_needs_a_wheel_directory() -> None:
    with pytest.raises(ConfigError, match="aarch64 runner needs executorch_dir"):
        build_runner("aarch64")


# ---- runs -----------------------------------------------------------------------------------


def test_timing_only_run(runner: Path, programs: dict[str, Program], tmp_path: Path) -> None:
    program = programs["fp32"]
    result = run_runner(
        runner, RunnerCall(program.pte, program.inputs, Executions(runs=5), tmp_path)
    )
    assert len(result.latencies_ms) == 5
    assert all(latency > 0 for latency in result.latencies_ms)
    assert result.etdump is None
    assert not result.traced
    assert "--etdump_path" not in result.command
    assert not (tmp_path / "run.etdump").exists()
    timings = json.loads((tmp_path / TIMINGS_NAME).read_text())
    assert timings["traced"] is False
    assert timings["executorch_version"].startswith("1.")
    assert "Model executed successfully 5 time(s)" in result.log


def test_traced_run_writes_an_etdump_with_every_execution(
    runner: Path, programs: dict[str, Program], tmp_path: Path
) -> None:
    program = programs["fp32"]
    plan = Executions(runs=4, warmup=2, traced=True)
    result = run_runner(runner, RunnerCall(program.pte, program.inputs, plan, tmp_path))
    assert result.traced
    assert result.etdump is not None
    data = result.etdump.read_bytes()
    assert data[8:12] == b"ED00"  # size-prefixed flatbuffer with the ETDump identifier
    # Warm-up executions are traced too: one Method::execute event per execution. (A byte count
    # until the trace stage's reader can be used here.)
    assert data.count(b"Method::execute") == plan.warmup + plan.runs
    assert len(result.latencies_ms) == plan.runs


def test_outputs_match_eager_fp32(
    runner: Path, programs: dict[str, Program], tmp_path: Path
) -> None:
    program = programs["fp32"]
    result = run_runner(
        runner, RunnerCall(program.pte, program.inputs, Executions(runs=2), tmp_path)
    )
    assert result.outputs is not None
    outputs = read_tensors(result.outputs)
    assert len(outputs) == len(program.eager)
    for got, want in zip(outputs, program.eager, strict=True):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_fp16_program_takes_and_returns_half(
    runner: Path, programs: dict[str, Program], tmp_path: Path
) -> None:
    program = programs["fp16"]
    result = run_runner(
        runner, RunnerCall(program.pte, program.inputs, Executions(runs=1), tmp_path)
    )
    assert result.outputs is not None
    (got,) = read_tensors(result.outputs)
    (want,) = program.eager
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=2e-2)


def test_warmup_runs_are_dropped_from_latencies(
    runner: Path, programs: dict[str, Program], tmp_path: Path
) -> None:
    program = programs["fp32"]
    plan = Executions(runs=2, warmup=3)
    result = run_runner(runner, RunnerCall(program.pte, program.inputs, plan, tmp_path))
    timings = json.loads((tmp_path / TIMINGS_NAME).read_text())
    assert result.warmup == timings["warmup"] == 3
    assert len(timings["latencies_ms"]) == 5
    assert result.latencies_ms == tuple(timings["latencies_ms"][3:])


def test_thread_count_reaches_the_runtime(
    runner: Path, programs: dict[str, Program], tmp_path: Path
) -> None:
    program = programs["fp32"]
    run_runner(
        runner, RunnerCall(program.pte, program.inputs, Executions(runs=1, threads=2), tmp_path)
    )
    assert json.loads((tmp_path / TIMINGS_NAME).read_text())["threads"] == 2


def test_stale_results_are_not_reused(
    runner: Path, programs: dict[str, Program], tmp_path: Path
) -> None:
    """A run's files are its own: an untraced run after a traced one leaves no ETDump, and a run
    that fails leaves none of the previous run's outputs or timings to be mistaken for its own."""
    program = programs["fp32"]
    traced = run_runner(
        runner, RunnerCall(program.pte, program.inputs, Executions(runs=1, traced=True), tmp_path)
    )
    assert traced.etdump == tmp_path / ETDUMP_NAME and traced.etdump.is_file()
    result = run_runner(
        runner, RunnerCall(program.pte, program.inputs, Executions(runs=1), tmp_path)
    )
    assert result.etdump is None and not (tmp_path / ETDUMP_NAME).exists()
    assert result.outputs.is_file()
    with pytest.raises(RunnerError):
        run_runner(
            runner, RunnerCall(program.pte, tmp_path / "absent", Executions(runs=1), tmp_path)
        )
    assert not (tmp_path / OUTPUTS_NAME).exists() and not (tmp_path / TIMINGS_NAME).exists()


def test_executor_runner_command_line(
    runner: Path, programs: dict[str, Program], tmp_path: Path
) -> None:
    """The flags and success line users know from ExecuTorch's executor_runner."""
    program = programs["fp32"]
    etdump = tmp_path / "x.etdump"
    proc = subprocess.run(
        [
            str(runner),
            f"--model_path={program.pte}",
            "--num_executions",
            "3",
            "--cpu_threads",
            "1",
            "--etdump_path",
            str(etdump),
            "--inputs",
            str(program.inputs),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Model executed successfully 3 time(s) in" in proc.stdout
    assert etdump.stat().st_size > 0


def test_prefix_and_env_wrap_the_command(
    runner: Path, programs: dict[str, Program], tmp_path: Path
) -> None:
    program = programs["fp32"]
    wrapper = ("sh", "-c", 'test "$SME2_PROBE" = yes && exec "$@"', "sh")
    result = run_runner(
        runner,
        RunnerCall(program.pte, program.inputs, Executions(runs=1), tmp_path),
        Launch(prefix=wrapper, env={"SME2_PROBE": "yes"}),
    )
    assert result.command[: len(wrapper)] == wrapper
    with pytest.raises(RunnerError, match="exit 1"):
        run_runner(
            runner,
            RunnerCall(program.pte, program.inputs, Executions(runs=1), tmp_path),
            Launch(prefix=wrapper),
        )


def test_an_isolated_run_sees_only_its_files_and_environment(
    runner: Path, programs: dict[str, Program], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What makes instruction counts repeat between directories (qemu-sme2 runs isolated): the
    runner is started in its run directory with fixed file names and only the given variables,
    and the links it was given are gone afterwards."""
    program = programs["fp32"]
    monkeypatch.setenv("SME2_CALLER_ONLY", "1")
    wrapper = (
        "sh",
        "-c",
        'test -z "$SME2_CALLER_ONLY" && test "$SME2_PROBE" = yes && test "$(pwd -P)" = "$1" '
        '&& shift && exec "$@"',
        "sh",
        str(tmp_path.resolve()),
    )
    result = run_runner(
        runner,
        RunnerCall(program.pte, program.inputs, Executions(runs=1), tmp_path),
        Launch(prefix=wrapper, env={"SME2_PROBE": "yes"}, isolated=True),
    )
    assert result.command[len(wrapper) :][:3] == ("./sme2_runner", "--model_path", "model.pte")
    assert read_tensors(result.outputs)[0].shape == program.eager[0].shape
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "outputs.tensors",
        "runner.log",
        "timings.json",
    ]


def test_an_isolated_failure_names_the_real_file(
    runner: Path, programs: dict[str, Program], tmp_path: Path
) -> None:
    model = tmp_path / "notes.pte"
    model.write_text("these are not the weights you are looking for\n")
    with pytest.raises(RunnerError) as failure:
        run_runner(
            runner,
            RunnerCall(model, programs["fp32"].inputs, Executions(runs=1), tmp_path / "run"),
            Launch(isolated=True),
        )
    said = str(failure.value)
    assert f"model {model.resolve()} is not an ExecuTorch program" in said
    assert f"ln -sf {model.resolve()} model.pte" in said  # the command reproduces the run
    assert not (tmp_path / "run" / "model.pte").exists()


def test_not_a_program(runner: Path, programs: dict[str, Program], tmp_path: Path) -> None:
    model = tmp_path / "notes.pte"
    model.write_text("these are not the weights you are looking for\n")
    with pytest.raises(RunnerError, match=r"notes\.pte is not an ExecuTorch program"):
        run_runner(
            runner, RunnerCall(model, programs["fp32"].inputs, Executions(runs=1), tmp_path / "run")
        )


def test_truncated_program(runner: Path, programs: dict[str, Program], tmp_path: Path) -> None:
    model = tmp_path / "cut.pte"
    model.write_bytes(programs["fp32"].pte.read_bytes()[:4096])
    with pytest.raises(
        RunnerError, match=r"Program::load of .*cut\.pte failed: Error::InvalidProgram"
    ):
        run_runner(
            runner, RunnerCall(model, programs["fp32"].inputs, Executions(runs=1), tmp_path / "run")
        )


def test_missing_model(runner: Path, programs: dict[str, Program], tmp_path: Path) -> None:
    with pytest.raises(RunnerError, match=r"cannot open model .*absent\.pte"):
        run_runner(
            runner,
            RunnerCall(
                tmp_path / "absent.pte", programs["fp32"].inputs, Executions(runs=1), tmp_path
            ),
        )


def test_missing_input_file(runner: Path, programs: dict[str, Program], tmp_path: Path) -> None:
    with pytest.raises(RunnerError, match=r"cannot open inputs file .*absent\.inputs"):
        run_runner(
            runner,
            RunnerCall(
                programs["fp32"].pte, tmp_path / "absent.inputs", Executions(runs=1), tmp_path
            ),
        )


def test_inputs_are_required(runner: Path, programs: dict[str, Program], tmp_path: Path) -> None:
    with pytest.raises(RunnerError, match="--inputs is required"):
        run_runner(runner, RunnerCall(programs["fp32"].pte, None, Executions(runs=1), tmp_path))


def test_input_dtype_mismatch(runner: Path, programs: dict[str, Program], tmp_path: Path) -> None:
    with pytest.raises(RunnerError, match="is Half but the program expects Float"):
        run_runner(
            runner,
            RunnerCall(programs["fp32"].pte, programs["fp16"].inputs, Executions(runs=1), tmp_path),
        )


def test_input_count_mismatch(runner: Path, programs: dict[str, Program], tmp_path: Path) -> None:
    inputs = tmp_path / "two.inputs"
    (x,) = read_tensors(programs["fp32"].inputs)
    write_tensors(inputs, [x, x])
    with pytest.raises(RunnerError, match=r"holds 2 tensor\(s\) but method 'forward' takes 1"):
        run_runner(runner, RunnerCall(programs["fp32"].pte, inputs, Executions(runs=1), tmp_path))


def test_input_shape_mismatch(runner: Path, programs: dict[str, Program], tmp_path: Path) -> None:
    inputs = tmp_path / "big.inputs"
    write_tensors(inputs, [np.zeros((1, 3, 16, 16), np.float32)])
    with pytest.raises(RunnerError, match=r"shape \[1, 3, 16, 16\] but the program expects"):
        run_runner(runner, RunnerCall(programs["fp32"].pte, inputs, Executions(runs=1), tmp_path))


def test_timeout(runner: Path, programs: dict[str, Program], tmp_path: Path) -> None:
    stall = ("sh", "-c", "exec sleep 30", "sh")  # stands in for a hung device
    with pytest.raises(RunnerError, match=r"did not finish within its 0\.5 s deadline"):
        run_runner(
            runner,
            RunnerCall(
                programs["fp32"].pte,
                programs["fp32"].inputs,
                Executions(runs=1, timeout_s=0.5),
                tmp_path,
            ),
            Launch(prefix=stall),
        )


def test_bad_plan() -> None:
    with pytest.raises(ConfigError, match="runs must be >= 1"):
        Executions(runs=0)


def _lookup() -> Any:
    """An embedding lookup: token ids in, as every text model starts."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 4)).eval()


def _token_ids(seed: int) -> tuple[Any, ...]:
    import torch

    return (torch.randint(0, 16, (1, 6), generator=torch.Generator().manual_seed(seed)),)


LOOKUP = ModelSpec(
    name="runner_lookup",
    factory=_lookup,
    inputs=_token_ids,
    description=_lookup.__doc__ or "",
    dtypes=("fp32",),
)


def test_a_kernel_failure_says_why_and_keeps_the_log(runner: Path, tmp_path: Path) -> None:
    """A token id past the vocabulary: the failure line carries the kernel's failed check (not
    ExecuTorch's per-argument dump after it), and the whole output stays in the run directory."""
    artifact = export_model(LOOKUP, "fp32")
    ids = read_tensors(artifact.inputs)[0].copy()
    ids[0, 3] = 99
    inputs = tmp_path / "out_of_range.tensors"
    write_tensors(inputs, [ids])
    with pytest.raises(RunnerError) as failed:
        run_runner(runner, RunnerCall(artifact.pte, inputs, Executions(runs=1), tmp_path / "run"))
    message = str(failed.value)
    assert "Check failed" in message and "99" in message
    assert "with type id" not in message
    assert f"full log: {tmp_path / 'run' / 'runner.log'}" in message
    log = (tmp_path / "run" / "runner.log").read_text()
    assert "Check failed" in log and "error: execution 1 of 2" in log


def test_a_successful_run_keeps_its_log(
    runner: Path, programs: dict[str, Program], tmp_path: Path
) -> None:
    run_runner(
        runner,
        RunnerCall(programs["fp32"].pte, programs["fp32"].inputs, Executions(runs=2), tmp_path),
    )
    assert "Model executed successfully 2 time(s)" in (tmp_path / "runner.log").read_text()


def test_peak_memory_is_the_runners_own_whatever_holds_the_process_that_started_it(
    runner: Path, programs: dict[str, Program], tmp_path: Path
) -> None:
    """Started (by vfork, as the session starts it) from a process that holds 800 MiB more, the
    runner reports the same peak resident memory: ``ru_maxrss`` would carry the starter's
    high-water mark across exec and report 800 MiB more."""
    program = programs["fp32"]
    start = (
        "import sys\nfrom pathlib import Path\n"
        "from pytest_sme2.runner import Executions, RunnerCall, run_runner\n"
        "held = b'x' * (int(sys.argv[1]) << 20)  # written, so resident\n"
        "call = RunnerCall(Path(sys.argv[3]), Path(sys.argv[5]), Executions(runs=2), "
        "Path(sys.argv[4]))\n"
        "result = run_runner(Path(sys.argv[2]), call)\n"
        "print(result.load.peak_rss_bytes)\n"
    )
    peaks = {}
    for held in (0, 800):
        workdir = tmp_path / f"held-{held}"
        workdir.mkdir()
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                start,
                str(held),
                *map(str, (runner, program.pte)),
                *map(str, (workdir, program.inputs)),
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        peaks[held] = int(out.split()[-1])
        assert json.loads((workdir / TIMINGS_NAME).read_text())["peak_rss_source"] == "VmHWM"
    mib = {held: peak / 2**20 for held, peak in peaks.items()}
    assert mib[0] < 100, mib  # a tiny model's runner: tens of MiB, not a Python process's
    assert abs(mib[800] - mib[0]) < 16, mib  # not 800 MiB more


def test_a_runner_that_names_no_peak_memory_source_gives_no_figure() -> None:
    """A runner built before the figure was its own (or elsewhere) wrote ``ru_maxrss``: dropped."""
    from pytest_sme2.runner.invoke import LoadStats

    timings = {"program_load_ms": 1.0, "method_init_ms": 2.0, "planned_bytes": 64}
    old = LoadStats.from_timings({**timings, "peak_rss_bytes": 600 << 20})
    assert old is not None and old.peak_rss_bytes is None
    own = LoadStats.from_timings({**timings, "peak_rss_bytes": 12 << 20, "peak_rss_source": "x"})
    assert own is not None and own.peak_rss_bytes == 12 << 20
    unread = LoadStats.from_timings({**timings, "peak_rss_bytes": 0, "peak_rss_source": "VmHWM"})
    assert unread is not None and unread.peak_rss_bytes is None
