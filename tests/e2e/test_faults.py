"""Hangs: every runner call has a deadline, and on it the whole process group goes.

A real hang needs no double: a process that never returns. For qemu-sme2 the hang is a user's
qemu (``--sme2-qemu``) that answers ``--version`` and runs the provisioning probe like the real
one, but never returns for one model; the other model runs through it for real.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_sme2 import progress
from pytest_sme2.cache import cache_root
from pytest_sme2.collection import COUNT_AHEAD_PREFIX
from pytest_sme2.devices import provision
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.errors import RunnerError
from pytest_sme2.export.exporter import export_model
from pytest_sme2.judge.baseline_file import load
from pytest_sme2.judge.moves import Tolerances
from pytest_sme2.judge.policy import Policy
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.runner.invoke import run_process, run_step
from tests.inner import INNER_TEST, inner_conftest, through_qemu
from tests.judge.host_case import case_check, host_device, measure_on_host
from tests.judge.small_model import small_model
from tests.processes import alive_after, processes_mentioning

pytest_plugins = ["pytester"]

#: This module's tests on one xdist worker: most of their time is waiting (a hung runner's
#: deadline, a hung hwcap probe's, kills checked seconds later), and spread over both workers
#: they waited at once — a warm `.ci/run`'s two cores 30–87 % idle for 80 s (`vmstat`). On one
#: worker, the other keeps computing meanwhile.
pytestmark = pytest.mark.xdist_group("faults")

#: Resolved at import, before pytester points HOME elsewhere: inner runs reuse the real caches.
CACHE = cache_root()


def _alive(marker: str) -> list[str]:
    """Live processes that mention ``marker``, this test's own pytest and its ancestors aside."""
    return processes_mentioning(marker)


def test_alive_finds_a_process_under_the_tests_temporary_directory(tmp_path: Path) -> None:
    """The check the fault tests end with can fail: a leftover process whose command line names
    a path under ``tmp_path`` (``/tmp/pytest-of-…``) is found, and gone once killed."""
    script = tmp_path / "left-behind.sh"
    script.write_text("#!/bin/sh\nsleep 3600.5737\n")  # sh stays, naming the script
    script.chmod(0o755)
    left = subprocess.Popen(["sh", str(script)], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not _alive(str(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive(str(tmp_path)), "a process naming tmp_path was not found"
    finally:
        os.killpg(left.pid, signal.SIGKILL)
        left.wait()
    # SIGKILL reaches the group's other member (sh's fork) later
    assert alive_after(str(tmp_path), 10) == []


def test_the_deadline_kills_the_whole_process_group() -> None:
    """A command whose child outlives it (a wrapper and what it wraps) is killed with it."""
    marker = "313.5717"  # a sleep length nobody else uses
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        run_process(["sh", "-c", f"echo started >&2; sleep {marker} & sleep {marker}"], timeout_s=2)
    assert time.monotonic() - started < 10
    assert "started" in caught.value.stderr
    assert alive_after(marker, 10) == []


def test_an_interrupted_wait_kills_the_group_too() -> None:
    marker = "313.5718"
    code = (
        "import signal, sys\n"
        "from pytest_sme2.runner.invoke import run_process\n"
        "signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))\n"
        "signal.alarm(2)\n"
        f"run_process(['sh', '-c', 'sleep {marker} & sleep {marker}'], timeout_s=600)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "KeyboardInterrupt" in proc.stderr
    assert alive_after(marker, 10) == []


#: Where a run counted ahead of a one-process session's first case runs (a shell pattern).
COUNTED_AHEAD = f"*/{COUNT_AHEAD_PREFIX}*"


def hanging_qemu(tmp_path: Path, qemu_device, marker: str, model: str = "hangs") -> Path:
    """A user's qemu-aarch64 (``--sme2-qemu``) that never returns for the model named ``model``
    (it sleeps ``marker`` seconds, a length nobody else uses) and runs the real one otherwise.

    Counted ahead (:data:`COUNTED_AHEAD`), the model's run fails at once instead: that count is
    left to its case, whose own run then hangs — after the cases before it were judged."""
    wrapper = tmp_path / "qemu-aarch64"
    wrapper.write_text(
        "#!/bin/sh\n"
        # runs are isolated: the run directory's model.pte links to the program
        f'case "$(readlink -f model.pte 2>/dev/null)" in *{model}_xnnpack*)\n'
        f'  case "$PWD" in {COUNTED_AHEAD}) exit 1;; esac\n'
        f"  exec sleep {marker};;\n"
        "esac\n"
        f'exec {qemu_device.guest.toolchain.qemu} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def _through(pytester: pytest.Pytester, qemu: Path, tmp_path: Path, *args: str) -> pytest.RunResult:
    """An inner qemu-sme2 session through the user's ``qemu``, recording fresh baselines."""
    return pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--sme2-device=qemu-sme2",
        f"--sme2-qemu={qemu}",
        f"--sme2-baseline-dir={tmp_path / 'baselines'}",
        "--sme2-update-baselines",
        *args,
        timeout=1200,
    )


FAULTS = ("killed", "truncated", "empty_timings", "bad_timings", "shape")
#: Every run's deadline in the session of :data:`FAULTS`: the hung runner is killed at it, and
#: the others' counted runs of a small model take 1–2 s under qemu beside the other xdist worker
HANG_DEADLINE_S = 10

#: A qemu-aarch64 that runs the real one and, for the counted runs of the model named after a
#: fault, does to them what a crashing runner or a broken device does. The runner really runs;
#: only what it left behind is damaged (or its process dies by a real signal once it ran). For
#: the model named ``hangs`` it never returns: it sleeps ``hang`` seconds (a length nobody else
#: uses), in every run. Counted ahead (:data:`COUNTED_AHEAD`), these models' runs fail at once: a
#: count made there would be read back by the case, which would then meet no fault.
FAULTY_QEMU = """#!{python}
import fnmatch, os, signal, subprocess, sys
from pathlib import Path

REAL = {real!r}
args = sys.argv[1:]


def path(flag):  # runs are isolated: names relative to the run directory, links resolved
    return Path(args[args.index(flag) + 1]).resolve()


model = str(path("--model_path")) if "--model_path" in args else ""
fault = next((f for f in {faults!r} if f + "_xnnpack" in model), None)
if (fault or "hangs_xnnpack" in model) and fnmatch.fnmatch(os.getcwd(), {ahead!r}):
    sys.exit(1)  # counted ahead: left to the case, which meets the fault
if "hangs_xnnpack" in model:
    os.execvp("sleep", ["sleep", {hang!r}])
counted = "--etdump_path" in args and path("--etdump_path").parent.name.endswith("-counted")
if fault is None or not counted:
    os.execv(REAL, [REAL, *args])
code = subprocess.run([REAL, *args]).returncode
if fault == "killed":
    # The runner's process dies by SIGSEGV once the run is over. Not a signal sent to qemu while
    # it runs: qemu-user catches SIGSEGV itself once started and a tiny run can end within any
    # fixed delay, so such a kill raced (another run died instead, in CI).
    code = -signal.SIGSEGV
if code < 0:  # die the way the runner died
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
if code != 0:
    sys.exit(code)
if fault == "truncated":
    data = path("--etdump_path").read_bytes()
    path("--etdump_path").write_bytes(data[: len(data) // 2])
elif fault == "empty_timings":
    path("--timings").write_text("")
elif fault == "bad_timings":
    path("--timings").write_text(path("--timings").read_text()[:-4])
elif fault == "shape":
    from pytest_sme2.runner.tensors import read_tensors, write_tensors
    outputs = path("--outputs")
    write_tensors(outputs, [tensor[..., :1] for tensor in read_tensors(outputs)])
"""

#: What each fault's one line says after "qemu-sme2 (sme2-on): ".
FAULT_SENTENCES = {
    "hangs": rf"the runner did not finish within its {HANG_DEADLINE_S} s deadline "
    r"\(--sme2-timeout\): killed it and its process group; last output: .*",
    "killed": r"runner killed by SIGSEGV: .*; command: cd \S+ && .* env -i \S*qemu-aarch64 .*",
    "truncated": r"\S+/\.sme2-runs/sme2-on-counted/run\.etdp: .*",
    "empty_timings": r"\S+/timings\.json: runner timings unreadable \(Expecting value.*",
    "bad_timings": r"\S+/timings\.json: runner timings unreadable \(.*",
    "shape": r"\S+/outputs\.tensors: the outputs do not fit the program: output 0 has shape "
    r"\(1, 1\), eager PyTorch's is \(1, 16\)",
}


def test_a_crash_garbage_or_a_hang_of_the_runner_fails_that_case_alone_with_one_line(
    pytester: pytest.Pytester,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    qemu_device,
    recorded_kept: Path,
) -> None:
    """A runner killed by a signal in its counted run, a truncated ETDump, an empty and a
    malformed timings file, outputs of the wrong shape, a runner that never returns: each fails
    its own test with one line naming the device, the variant and what went wrong — the hang at
    its deadline, with the runner's process group killed — and the session goes on: the healthy
    model passes.

    And it is the session after one killed -9 at a baseline's rename (:func:`_killed_at_rename`):
    it removes the complete temporary file left beside the baseline, saying so, and the baseline
    itself stays as it was."""
    baselines = tmp_path / "baselines"
    kept = baselines / "host" / recorded_kept.name
    kept.parent.mkdir(parents=True)
    kept.write_bytes(recorded_kept.read_bytes())
    stranded, before = _killed_at_rename(kept), kept.read_bytes()
    hang = "3600.5719"
    wrapper = tmp_path / "qemu-aarch64"
    real = str(qemu_device.guest.toolchain.qemu)
    wrapper.write_text(
        FAULTY_QEMU.format(
            python=sys.executable, real=real, faults=FAULTS, hang=hang, ahead=COUNTED_AHEAD
        )
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("SME2_CACHE_DIR", str(CACHE))
    pytester.makeconftest(inner_conftest("fine", *FAULTS, "hangs"))  # all exported before any run
    pytester.makepyfile(test_broken=INNER_TEST)
    junit = tmp_path / "junit.xml"
    result = _through(
        pytester, wrapper, tmp_path, f"--sme2-timeout={HANG_DEADLINE_S}", f"--junitxml={junit}"
    )
    result.assert_outcomes(passed=1, errors=len(FAULT_SENTENCES))
    cases = {case.get("name"): case for case in ET.parse(junit).iter("testcase")}
    for fault, sentence in FAULT_SENTENCES.items():
        error = cases[f"test_model[{fault}-fp32]"].find("error")
        message = error.get("message") if error is not None else None
        assert message is not None and "\n" not in message.strip(), message
        assert re.fullmatch(
            r"failed on setup with \"Failed: qemu-sme2 \(sme2-on\): " + sentence + '"',
            message.strip(),
        ), (fault, message)
    # its deadline and little else: every model was exported before the first ran
    assert float(cases["test_model[hangs-fp32]"].get("time")) < HANG_DEADLINE_S + 15
    assert alive_after(hang, 10) == [] and _alive(str(wrapper)) == []
    assert f"pytest-sme2 removed {stranded}: a temporary file of a session killed" in (
        result.stdout.str()
    )
    assert list((baselines / "host").iterdir()) == [kept] and kept.read_bytes() == before


#: The small model as tests/e2e/test_disk.py's project registers ``kept``: one export serves
#: both files.
KEPT = small_model("kept", 2)


@pytest.fixture(scope="module")
def recorded_kept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The baseline of the small model ``kept`` on the host, recorded as a session under
    ``--sme2-update-baselines`` records it: measured, and judged through ``CaseCheck``. (Before
    any test's ``pytester``, which at its end forgets the modules imported since it began: torch
    imports some as it exports, and cannot import them twice.)"""
    directory = tmp_path_factory.mktemp("kept")
    device, spec = host_device(), KEPT

    def measured(label: str) -> Measurement:
        return measure_on_host(device, spec, directory / "kept" / label)

    check = case_check(directory, Policy(Tolerances(), update=True), measured, model="kept")
    assert check.check(measured("record")).failure is None
    return check.path


#: Saves the baseline in argv[1] again, as a session re-recording it does, and is killed -9 at the
#: rename that would put it in place: the temporary file is complete, the rename never happens
#: (the kill is delivered at exactly that system call, every time).
KILLED_AT_THE_RENAME = """
import os, signal, sys
from pathlib import Path
from pytest_sme2.judge.baseline_file import load, save

path = Path(sys.argv[1])
_replace = os.replace


def _killed_at_the_rename(source, target, *args, **kwargs):
    if Path(target) == path:
        os.kill(os.getpid(), signal.SIGKILL)
    return _replace(source, target, *args, **kwargs)


os.replace = _killed_at_the_rename
save(path, load(path))
"""


def _killed_at_rename(baseline: Path) -> Path:
    """The temporary file a process writing ``baseline`` left, killed -9 at its rename."""
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AT_THE_RENAME, str(baseline)],
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (stranded,) = (path for path in baseline.parent.iterdir() if path != baseline)
    assert re.fullmatch(r"kept-fp32\.json\.\d+\.\w+\.tmp", stranded.name), stranded.name
    assert json.loads(stranded.read_text())["model"] == "kept"  # complete, and never renamed
    return stranded


@pytest.mark.parametrize("workers", [0, 2], ids=["one-process", "xdist"])
def test_sigterm_in_the_middle_of_the_suite_leaves_the_report_the_baselines_and_no_process(
    pytester: pytest.Pytester,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    qemu_device,
    workers: int,
) -> None:
    """CI's SIGTERM while one case's runner is running, after another case was judged: the
    session unwinds as after Ctrl-C. report.md lists the judged case, every baseline parses,
    and no process the session started is left."""
    marker = f"3600.572{workers}"
    wrapper = hanging_qemu(tmp_path, qemu_device, marker)
    monkeypatch.setenv("SME2_CACHE_DIR", str(CACHE))
    pytester.makeconftest(inner_conftest("fine", "hangs"))  # judged, then cut in its run
    pytester.makepyfile(test_cut=INNER_TEST)
    baselines, artifacts = tmp_path / "baselines", tmp_path / "artifacts"
    workers_args = ["-n", str(workers)] if workers else []
    session = _inner_session(pytester, wrapper, tmp_path, "-v", *workers_args)
    output = _Output(session)
    try:
        deadline = time.monotonic() + 300
        # fine's report has reached the session's controller (it says PASSED: under xdist, the
        # worker's report arrives after the case ends) and hangs's runner runs
        while not (_said_passed(output, "test_model[fine-fp32]") and _alive(marker)):
            assert session.poll() is None, "".join(output)
            assert time.monotonic() < deadline, "never reached both cases:\n" + "".join(output)
            time.sleep(0.1)
        session.send_signal(signal.SIGTERM)
        session.wait(timeout=120)
    finally:
        if session.poll() is None:  # this test failed: leave nothing behind either
            session.kill()
            subprocess.run(["pkill", "-f", marker], check=False)
    text = output.finished()
    assert session.returncode == pytest.ExitCode.INTERRUPTED, text
    assert "SIGTERM: pytest-sme2 stopped the session" in text
    assert (artifacts / "report.md").is_file(), text
    report = (artifacts / "report.md").read_text()
    assert "fine" in report and "hangs" not in report
    stored = sorted(baselines.rglob("*.json"))
    assert [path.name for path in stored] == ["fine-fp32.json"]
    for path in stored:
        assert load(path) is not None
    assert alive_after(marker, 10) == [] and alive_after(str(wrapper), 10) == []


class _Output(list[str]):
    """A running session's output lines, read on a thread of their own as they come."""

    def __init__(self, session: subprocess.Popen[bytes]) -> None:
        super().__init__()
        self._reader = threading.Thread(target=self._read, args=(session,), daemon=True)
        self._reader.start()

    def _read(self, session: subprocess.Popen[bytes]) -> None:
        assert session.stdout is not None
        for line in session.stdout:
            self.append(line.decode(errors="replace"))

    def finished(self) -> str:
        """All of it, once the session's output has ended."""
        self._reader.join(timeout=60)
        return "".join(self)


def _said_passed(output: list[str], test: str) -> bool:
    """Whether the session's verbose output has reported ``test`` passed.

    Under xdist the verdict and the test id share a line. In one process the id is written when
    the test starts and its verdict when it ends, and in between the plugin's progress lines (an
    export, a runner build: from an empty cache) end that line — so the verdict is the first one
    after the id, wherever it falls."""
    text = "".join(list(output))
    if any(test in line and "PASSED" in line for line in text.splitlines()):
        return True
    _, started, after = text.partition(test)
    verdict = re.search(r"\b(PASSED|FAILED|ERROR)\b", after)
    return bool(started and verdict and verdict.group(1) == "PASSED")


@pytest.mark.parametrize(
    ("guard", "marker"), [("compiled", "3600.5731"), ("preexec_fn", "3600.5732")]
)
def test_kill_9_of_a_process_in_a_runner_call_leaves_no_runner_alive(
    tmp_path: Path, guard: str, marker: str
) -> None:
    """A kill -9 runs no ``finally``: the runner (here a process that runs for an hour) gets the
    parent-death signal instead of running on, re-parented to PID 1 — armed by the compiled
    guard, and by Python's ``preexec_fn`` where there is no C compiler."""
    no_compiler = "import shutil; shutil.which = lambda name, *a, **k: None\n"
    code = (
        (no_compiler if guard == "preexec_fn" else "")
        + "from pytest_sme2.runner.invoke import run_process\n"
        f"run_process(['sleep', '{marker}'], timeout_s=7200)\n"
    )
    caller = subprocess.Popen([sys.executable, "-c", code])
    runner = f"sleep {marker}"  # the runner's command line; the caller's says ['sleep', '…']
    try:
        deadline = time.monotonic() + 60
        while not _alive(runner):
            assert time.monotonic() < deadline and caller.poll() is None
            time.sleep(0.1)
        caller.kill()
        caller.wait()
        assert alive_after(runner, 5) == []
    finally:
        caller.kill()
        subprocess.run(["pkill", "-f", f"sleep {marker}"], check=False)


def _inner_session(
    pytester: pytest.Pytester, wrapper: Path, tmp_path: Path, *extra: str
) -> subprocess.Popen[bytes]:
    """An inner qemu-sme2 session through ``wrapper`` updating the baselines under ``tmp_path``,
    started in the background (its output on ``stdout``)."""
    return pytester.popen(
        [sys.executable, "-m", "pytest", *extra, *through_qemu(wrapper, tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _session_until(
    pytester: pytest.Pytester, wrapper: Path, marker: str, tmp_path: Path
) -> subprocess.Popen[bytes]:
    """An inner qemu-sme2 session through ``wrapper``, returned once ``marker`` runs."""
    session = _inner_session(pytester, wrapper, tmp_path)
    deadline = time.monotonic() + 300
    while not _alive(marker):
        assert session.poll() is None, session.stdout.read().decode()
        assert time.monotonic() < deadline, "the session never reached the runner"
        time.sleep(0.5)
    return session


#: Runs the program in argv[3] (inputs argv[4]) SME2-on through the qemu-sme2 device a session
#: builds from ``--sme2-qemu=argv[1]``, its files under argv[2]: a runner call as a session's
#: case makes it.
RUN_THROUGH_QEMU = """
import sys
from pathlib import Path
from pytest_sme2.devices.base import RunRequest
from pytest_sme2.devices import provision
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.records.device import Variant
from pytest_sme2.runner import Executions

qemu, workdir, program, inputs = sys.argv[1:]
device = QemuSme2Device.from_options({"sme2_qemu": qemu}.get)
device.prepare()
call = Path(program), Path(inputs), Executions(runs=1), Path(workdir)
device.run(RunRequest(*call, variant=Variant.ON))
"""


def test_kill_9_of_the_process_in_a_long_qemu_runner_call_leaves_no_runner_5_s_later(
    tmp_path: Path, qemu_device
) -> None:
    """A session's process killed -9 runs no ``finally``: the runner it started through the
    user's qemu (which never returns for this model) dies with it — the qemu-sme2 device's call
    is armed like every runner call (the guard itself: the test above)."""
    marker = "3600.5736"  # each test its own: a pkill in one must not hit the other worker's
    wrapper = hanging_qemu(tmp_path, qemu_device, marker, model=KEPT.name)
    hangs = export_model(KEPT, "fp32")
    files = (wrapper, tmp_path / "run", hangs.pte, hangs.inputs)
    caller = subprocess.Popen([sys.executable, "-c", RUN_THROUGH_QEMU, *map(str, files)])
    try:
        deadline = time.monotonic() + 300
        while not _alive(marker):
            assert caller.poll() is None, "the runner call ended"
            assert time.monotonic() < deadline, "the runner never started"
            time.sleep(0.5)
        caller.kill()
        caller.wait(timeout=60)
        assert alive_after(marker, 5) == []
    finally:
        caller.kill()
        subprocess.run(["pkill", "-f", marker], check=False)


def test_sigterm_before_any_case_was_judged_promises_no_report(
    pytester: pytest.Pytester,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    qemu_device,
) -> None:
    """The interrupt line used to say "the cases judged so far are in its report.md": with
    none judged there is none."""
    marker = "3600.5733"
    wrapper = hanging_qemu(tmp_path, qemu_device, marker)
    monkeypatch.setenv("SME2_CACHE_DIR", str(CACHE))
    pytester.makeconftest(inner_conftest("hangs"))
    pytester.makepyfile(test_cut=INNER_TEST)
    session = _session_until(pytester, wrapper, marker, tmp_path)
    try:
        session.send_signal(signal.SIGTERM)
        session.wait(timeout=120)
    finally:
        if session.poll() is None:
            session.kill()
        subprocess.run(["pkill", "-f", marker], check=False)
    text = session.stdout.read().decode(errors="replace")
    assert "SIGTERM: pytest-sme2 stopped the session" in text
    assert "report.md" not in text and not (tmp_path / "artifacts" / "report.md").exists()
    assert _alive(marker) == []


def test_a_qemu_that_hangs_on_every_call_fails_preparing_naming_the_probe_at_its_deadline(
    tmp_path: Path, qemu_device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It answers --version and hangs on anything else, the hwcap probe included: the device
    fails to prepare at the probe's own deadline (30 s; 2 s here, which the probe never needs
    once the device is prepared), not the 900 s of a build, naming it in one line. (Its case
    then fails with that line, as every device error of a case does through
    ``session.or_fail``: the faulty qemu's session above; test_fleet: auto's emulated device,
    which the user did not name, is skipped saying why.)"""
    marker = "3600.5734"
    real = qemu_device.guest.toolchain.qemu
    wrapper = tmp_path / "qemu-aarch64"
    wrapper.write_text(
        f'#!/bin/sh\ncase "$1" in --version) exec {real} --version;; esac\nexec sleep {marker}\n'
    )
    wrapper.chmod(0o755)
    device = QemuSme2Device.from_options({"sme2_qemu": str(wrapper)}.get)
    monkeypatch.setattr(provision, "PROBE_TIMEOUT_S", 2)
    monkeypatch.setattr(progress, "_SINK", None)  # its provisioning's lines are this test's
    with pytest.raises(RunnerError) as refused:
        device.prepare()
    progress.take_finished()  # nor is its failed provisioning a cost of the outer session
    message = str(refused.value)
    assert "\n" not in message and re.fullmatch(
        r"the hwcap probe under qemu did not finish within its 2 s deadline: killed it; "
        rf"last output: .*; command: {re.escape(str(wrapper))} .*hwcap_probe.*",
        message,
    ), message
    assert alive_after(marker, 10) == [] and _alive(str(wrapper)) == []


def test_a_hung_step_is_one_line_naming_the_step_its_deadline_and_the_command() -> None:
    marker = "313.5735"
    started = time.monotonic()
    with pytest.raises(RunnerError) as caught:
        run_step(["sh", "-c", f"echo probing >&2; exec sleep {marker}"], "the probe", timeout_s=1)
    assert time.monotonic() - started < 10
    assert str(caught.value) == (
        "the probe did not finish within its 1 s deadline: killed it; last output: probing; "
        f"command: sh -c 'echo probing >&2; exec sleep {marker}'"
    )
    with pytest.raises(RunnerError, match=r"^the probe could not run \(No such file"):
        run_step(["/nonexistent/qemu-aarch64"], "the probe", timeout_s=1)
    assert alive_after(marker, 10) == []
