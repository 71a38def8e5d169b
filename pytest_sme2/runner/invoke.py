"""Run the native runner once and collect what it wrote (timings, ETDump, outputs).

Why a subprocess: running models in a separate native process isolates the Python bindings'
crashes, lets a device wrap the command (:class:`Launch`: qemu, taskset, a remote shell) and
measures the same binary everywhere. What one process is asked to run is a :class:`RunnerCall`;
each call uses fresh files in its work directory, so a failed run can never be mistaken for the
previous one's results.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sme2.errors import ConfigError, RunnerError
from pytest_sme2.records.evidence import CpuSeen
from pytest_sme2.runner import dies_with_parent, stoppable
from pytest_sme2.runner.staging import (
    SEARCHED,
    STAGED_BINARY,
    STAGED_INPUTS,
    STAGED_MODEL,
    linked,
    staged_files,
    staged_libraries,
)

#: The deadline of a native run when none is given (``--sme2-timeout``): generous, since a run
#: may hold hundreds of inferences; an emulating device sets a longer one of its own.
DEFAULT_TIMEOUT_S = 900.0

#: The deadline of a question a tool answers at once (``--version``, ``sysctl``): seconds, so a
#: tool that hangs is named in one line at once rather than holding the session.
ANSWER_TIMEOUT_S = 15.0

TIMINGS_NAME = "timings.json"
ETDUMP_NAME = "run.etdp"
OUTPUTS_NAME = "outputs.tensors"
#: The runner's stdout and stderr, kept in the run directory whatever the run's outcome: a
#: failure line carries the last of it, the file all of it (a kernel's check that failed).
LOG_NAME = "runner.log"
# ExecuTorch's log lines at error level: "E 00:00:00.001678 executorch:program.cpp:114] ..."
_ET_ERROR_LOG = re.compile(r"^E \d\d:\d\d:\d\d")
_ARGUMENT_DUMP = re.compile(r"^arg \d+ with type id \d+$")


@dataclass(frozen=True)
class Executions:
    """What one runner process executes: ``runs`` measured executions after ``warmup`` unmeasured
    ones, on ``threads``, within a deadline.

    ``traced`` attaches the ETDump event tracer (its overhead is in those latencies); timing-only
    runs attach nothing. Warm-up executions are traced too and precede the measured ones. (How
    much a whole measurement runs is :class:`pytest_sme2.measure.plan.MeasurePlan`.)
    """

    runs: int
    warmup: int = 1
    threads: int = 1
    traced: bool = False
    #: the run's deadline in seconds; None: the device's default (:data:`DEFAULT_TIMEOUT_S`)
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ConfigError(f"runs must be >= 1, got {self.runs}")
        if self.warmup < 0:
            raise ConfigError(f"warmup must be >= 0, got {self.warmup}")
        if self.threads < 1:
            raise ConfigError(f"threads must be >= 1, got {self.threads}")


@dataclass(frozen=True)
class RunnerCall:
    """One runner process: the program, its inputs, what it executes, and the directory its
    results and log land in (fresh files each call, so a failed run is never mistaken for the
    previous one's results)."""

    program: Path
    #: the inputs file; None only to see the runner refuse to run without one
    inputs: Path | None
    executions: Executions
    workdir: Path


@dataclass(frozen=True)
class Launch:
    """How a device starts the runner: the same for every call it makes of one kind."""

    #: wraps the command (``qemu-aarch64 -cpu max …``, ``taskset -c 0``, ``ssh board --``)
    prefix: tuple[str, ...] = ()
    #: variables added to the inherited environment (``LD_PRELOAD``); the whole environment of an
    #: ``isolated`` run
    env: Mapping[str, str] = field(default_factory=dict)
    #: run in the work directory under fixed names with ``env`` as the whole environment (see
    #: :func:`run_runner`)
    isolated: bool = False
    #: kernel libraries the runner loads first (:mod:`pytest_sme2.runner.kernel_libraries`)
    libraries: tuple[Path, ...] = ()
    #: the deadline of a call whose executions name none: longer under emulation
    default_timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class LoadStats:
    """What loading cost one runner process, and the memory it held (the runner's timings)."""

    program_load_ms: float  # read and verify the .pte
    method_init_ms: float  # memory plan and delegate init: XNNPACK/KleidiAI pack weights here
    planned_bytes: int  # the memory plan's arenas: activations, inputs, mutable buffers
    #: the process's own peak resident memory (libraries, weights, arenas); None where the runner
    #: could not read it, or gave ``ru_maxrss`` (a runner that names no ``peak_rss_source``),
    #: which holds the high-water mark of the process that started it
    peak_rss_bytes: int | None

    @classmethod
    def from_timings(cls, timings: Mapping[str, Any]) -> LoadStats | None:
        """From a timings file; None where a runner built elsewhere (``--sme2-runner-on``) wrote
        none of it."""
        try:
            own = "peak_rss_source" in timings and int(timings["peak_rss_bytes"]) > 0
            return cls(
                program_load_ms=float(timings["program_load_ms"]),
                method_init_ms=float(timings["method_init_ms"]),
                planned_bytes=int(timings["planned_bytes"]),
                peak_rss_bytes=int(timings["peak_rss_bytes"]) if own else None,
            )
        except KeyError:
            return None


@dataclass(frozen=True)
class RunResult:
    """What one runner process produced."""

    latencies_ms: tuple[float, ...]  # measured runs only (warm-up dropped), in order
    warmup: int  # how many warm-up executions precede them (also in the ETDump when traced)
    etdump: Path | None  # traced runs only
    outputs: Path  # tensor file of the last execution's outputs
    log: str  # runner stdout+stderr
    command: tuple[str, ...]
    traced: bool
    #: load times and memory, where the runner reports them
    load: LoadStats | None = None
    #: each measured run's thread CPU time, and its involuntary context switches: how much a busy
    #: machine took from it (:mod:`pytest_sme2.measure.cpu_load`); empty where not reported
    cpu_ms: tuple[float, ...] = ()
    preemptions: tuple[int, ...] = ()
    #: what the process saw of the CPU, where the runner reports it
    seen: CpuSeen | None = None


def runner_command(binary: Path, call: RunnerCall, libraries: Sequence[Path] = ()) -> list[str]:
    """The runner's argument list (without a device prefix) for ``call``, as its paths are
    where the runner runs; ``libraries`` are kernel libraries the runner loads first
    (:mod:`pytest_sme2.runner.kernel_libraries`)."""
    executions, workdir = call.executions, call.workdir
    command = [
        str(binary),
        "--model_path",
        str(call.program),
        "--num_executions",
        str(executions.runs),
        "--warmup",
        str(executions.warmup),
        "--cpu_threads",
        str(executions.threads),
        "--timings",
        str(workdir / TIMINGS_NAME),
    ]
    if executions.traced:
        command += ["--etdump_path", str(workdir / ETDUMP_NAME)]
    if call.inputs is not None:
        command += ["--inputs", str(call.inputs)]
    command += ["--outputs", str(workdir / OUTPUTS_NAME)]
    for library in libraries:
        command += ["--kernel_library", str(library)]
    return command


def run_runner(binary: Path, call: RunnerCall, launch: Launch = Launch()) -> RunResult:
    """Run ``call`` as ``launch`` says; RunnerError (stderr tail + command) if anything fails.

    ``launch.prefix`` wraps the command (e.g. ``qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu``);
    ``launch.env`` adds variables to the inherited environment (e.g. an ``LD_PRELOAD``); the runner
    loads ``launch.libraries`` first. The deadline is the executions', else the launch's default
    (the device's: longer under emulation).

    An ``isolated`` launch runs the runner in the work directory under fixed names
    (:data:`STAGED_BINARY` and the model and inputs linked in) with ``env`` as its whole
    environment. Why: the runner's heap holds its paths, and the process's stack its environment,
    so their lengths move what libc's allocator and string functions execute: by 10–200
    instructions of an inference or a method init between two run directories. A device that
    counts instructions runs isolated, so the same program counts the same in any directory,
    checkout, session or pytest test.
    """
    workdir = call.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    for name in (TIMINGS_NAME, ETDUMP_NAME, OUTPUTS_NAME, LOG_NAME):
        (workdir / name).unlink(missing_ok=True)
    libraries = launch.libraries
    if not launch.isolated:
        command = runner_command(binary, call, libraries)
        environment = {**os.environ, **launch.env} if launch.env else None
        return _run_in(call, [*launch.prefix, *command], environment, None, launch)
    staged = staged_files(binary, call.program, call.inputs, libraries)
    inputs = None if call.inputs is None else STAGED_INPUTS
    here = RunnerCall(STAGED_MODEL, inputs, call.executions, Path())
    command = runner_command(STAGED_BINARY, here, staged_libraries(len(libraries)))
    # a name alone would be looked up on PATH (the binary) or the library path (dlopen)
    command = [f"./{part}" if part in SEARCHED else part for part in command]
    with linked(workdir, staged):
        return _run_in(call, [*launch.prefix, *command], dict(launch.env), staged, launch)


def _run_in(
    call: RunnerCall,
    command: Sequence[str],
    env: Mapping[str, str] | None,
    staged: Mapping[Path, Path] | None,
    launch: Launch,
) -> RunResult:
    """Run the full ``command`` (in the work directory with the ``staged`` links when isolated)
    and collect what it wrote; a failure names the real files, not the links."""
    workdir = call.workdir
    shown = shlex.join(command)
    real = staged or {}
    cwd = workdir.resolve() if staged is not None else None
    if cwd is not None:  # what reproduces the isolated run in a shell
        variables = [f"{name}={value}" for name, value in (env or {}).items()]
        links = [f"ln -sf {shlex.quote(str(t.resolve()))} {name} && " for name, t in real.items()]
        shown = f"cd {shlex.quote(str(cwd))} && {''.join(links)}env -i " + shlex.join(
            [*variables, *command]
        )

    def said(text: str) -> str:
        tail = runner_tail(text)
        for name, target in real.items():
            tail = re.sub(rf"(?<![\w/.]){re.escape(str(name))}\b", str(target), tail)
        return tail

    deadline = call.executions.timeout_s or launch.default_timeout_s
    try:
        proc = run_process(command, timeout_s=deadline, env=env, cwd=cwd)
    except subprocess.TimeoutExpired as err:
        saved = save_log(workdir, f"{err.stdout or ''}{err.stderr or ''}")
        raise RunnerError(
            f"the runner did not finish within its {deadline:g} s deadline (--sme2-timeout): "
            f"killed it and its process group; last output: {said(err.stderr or '')}; "
            f"full log: {saved}; command: {shown}"
        ) from None
    except OSError as err:
        raise RunnerError(f"cannot start the runner ({err.strerror}); command: {shown}") from err
    log = proc.stdout + proc.stderr
    saved = save_log(workdir, log)
    if proc.returncode != 0:
        raise RunnerError(
            f"runner {exit_reason(proc.returncode)}: {said(proc.stderr)}; "
            f"full log: {saved}; command: {shown}"
        )
    return collect_result(workdir, call.executions, log, command)


def run_process(
    command: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in a process group of its own and wait at most ``timeout_s``.

    Why a group: a wrapped runner is several processes (qemu and the guest, adb and the shell, a
    runner's own children); killing the one we started would leave the others running and
    holding the session's pipes. On the deadline, and on anything that interrupts the wait
    (Ctrl-C, SIGTERM turned into an exception), the whole group is killed before the error
    propagates, so no process outlives the call; so it is when another thread stops this one's
    calls (:mod:`pytest_sme2.runner.stoppable`: the call raises its ``Stopped``). Raises
    ``subprocess.TimeoutExpired`` carrying what the command wrote.

    A kill -9 of pytest runs none of that: on Linux the process also gets SIGKILL when its
    parent dies (:mod:`pytest_sme2.runner.dies_with_parent`), so a runner or qemu never runs on
    for minutes, re-parented to PID 1. Elsewhere it is left to the process group's other
    deadlines.
    """
    stoppable.refuse_if_stopped(command)
    started, preexec = dies_with_parent.guarded(command)
    proc = subprocess.Popen(
        started,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",  # a corrupt model can make the runtime log raw bytes
        env=dict(env) if env is not None else None,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=preexec,
    )
    with stoppable.running(proc, command):
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stoppable.kill_group(proc)
            stdout, stderr = proc.communicate()
            raise subprocess.TimeoutExpired(command, timeout_s, stdout, stderr) from None
        except BaseException:
            stoppable.kill_group(proc)
            proc.communicate()
            raise
    dies_with_parent.raise_if_not_started(proc.returncode, stderr, command)
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def run_step(
    command: Sequence[str],
    what: str,
    *,
    timeout_s: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run one preparation step (a build, a download, a probe) under its own deadline.

    A hang becomes one RunnerError naming the step, its deadline and the command; a command that
    cannot start, one naming the step and why. The exit status is the caller's to judge.
    """
    shown = shlex.join(command)
    try:
        return run_process(command, timeout_s=timeout_s, env=env, cwd=cwd)
    except subprocess.TimeoutExpired as err:
        said = runner_tail(err.stderr or err.stdout or "")
        raise RunnerError(
            f"{what} did not finish within its {timeout_s:g} s deadline: killed it; "
            f"last output: {said}; command: {shown}"
        ) from None
    except OSError as err:
        problem = err.strerror or err
        raise RunnerError(f"{what} could not run ({problem}); command: {shown}") from None


def exit_reason(returncode: int) -> str:
    """ "killed by SIGSEGV" / "failed (exit 1)"; a signal is a negative code, as subprocess says."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"failed (exit {returncode})"


def save_log(workdir: Path, log: str) -> str:
    """Keep a run's output as ``runner.log`` in its run directory; its path, or why it could not
    be kept (a full disk): the run's own failure, which the log would explain, comes first."""
    path = workdir / LOG_NAME
    try:
        path.write_text(log)
    except OSError as err:
        path.unlink(missing_ok=True)
        return f"not kept ({path}: {err.strerror})"
    return str(path)


def runner_tail(stderr: str, lines: int = 3) -> str:
    """The runner's stderr as one line: its ``error:`` line after the runtime's own error log
    lines that say why (a kernel's failed check, the operator that failed), else the last lines.

    ExecuTorch follows a failed kernel call with one ``arg N with type id T`` line per argument;
    those are dropped, or they would push the failed check out of the line."""
    text = [line.strip() for line in stderr.splitlines() if line.strip()]
    ours = [line for line in text if line.startswith("error:")]
    if ours:
        runtime = [line.split("] ", 1)[-1] for line in text if _ET_ERROR_LOG.match(line)]
        telling = [line for line in runtime if not _ARGUMENT_DUMP.match(line)]
        return " | ".join(telling[-(lines - 1) :] + ours[-1:])
    return " | ".join(text[-lines:]) or "(no output on stderr)"


def collect_result(
    workdir: Path, executions: Executions, log: str, command: Sequence[str]
) -> RunResult:
    """The RunResult of a finished run whose files are in ``workdir`` (written there, or pulled
    from a device): timings checked against ``executions``, and every promised file present."""
    shown = shlex.join(command)
    timings_path = workdir / TIMINGS_NAME
    try:
        timings = json.loads(timings_path.read_text())
        latencies = [float(value) for value in timings["latencies_ms"]]
        warmup = int(timings["warmup"])
        load = LoadStats.from_timings(timings)
        seen = CpuSeen.from_timings(timings)
        cpu_ms = tuple(float(value) for value in timings.get("cpu_ms", ())[warmup:])
        preemptions = tuple(int(value) for value in timings.get("preemptions", ())[warmup:])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise RunnerError(
            f"{timings_path}: runner timings unreadable ({err}); command: {shown}"
        ) from err
    expected = executions.warmup + executions.runs
    if warmup != executions.warmup or len(latencies) != expected:
        raise RunnerError(
            f"{timings_path}: expected {executions.warmup} warm-up + {executions.runs} runs, got "
            f"{warmup} warm-up and {len(latencies)} latencies; command: {shown}"
        )
    etdump = workdir / ETDUMP_NAME if executions.traced else None
    outputs = workdir / OUTPUTS_NAME
    for produced in (etdump, outputs):
        if produced is not None and not produced.is_file():
            raise RunnerError(f"{produced}: the runner did not write it; command: {shown}")
    return RunResult(
        latencies_ms=tuple(latencies[warmup:]),
        warmup=warmup,
        etdump=etdump,
        outputs=outputs,
        log=log,
        command=tuple(command),
        traced=executions.traced,
        load=load,
        cpu_ms=cpu_ms,
        preemptions=preemptions,
        seen=seen,
    )
