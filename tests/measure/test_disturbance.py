"""Time that a busy machine moved is neither judged nor recorded, and says so.

Real where it can be: the runner's preemption counts come from a real runner pinned to one CPU
beside real spinning processes, the machine's load from this machine's ``/proc/stat``, and the
verdict on a real host measurement taken while the machine is oversubscribed, judged through
``CaseCheck`` as ``sme2_judge`` judges it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.errors import ConfigError
from pytest_sme2.judge.baseline import Tolerances, from_measurement
from pytest_sme2.judge.baseline_file import Stored
from pytest_sme2.judge.calibration import calibrate
from pytest_sme2.judge.decision import failure_report
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gates import judge
from pytest_sme2.judge.lifecycle import decide
from pytest_sme2.judge.policy import Policy
from pytest_sme2.judge.time_gates import DISTURBED
from pytest_sme2.measure.case import fastest
from pytest_sme2.measure.cpu_load import local_load, lost_cpu, series
from pytest_sme2.records.disturbance import MAX_PREEMPTED_SHARE, Disturbance, MachineLoad, Series
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status
from tests.judge.host_case import case_check, host_device, measure_case, measure_on_host, toy_cnn
from tests.measurements import HOST, measurement

TOL = Tolerances()
QUIET = Disturbance((Series("sme2-off timing", 20, 0), Series("reference workload", 20, 0)))
BUSY = Disturbance(
    (Series("sme2-off timing", 20, 17), Series("reference workload", 20, 1)),
    MachineLoad(cores=2, waiting_percent=64.0, load_average=3.4, steal_percent=0.0),
)
linux_only = pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="reads /proc/stat")


def _spin(seconds: float, cpu: int | None, spinning: Any) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    spinning.release()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@contextmanager
def spinners(count: int, seconds: float, cpu: int | None = None) -> Iterator[None]:
    """``count`` processes that only burn CPU for at most ``seconds`` (on ``cpu`` if given):
    a neighbour that makes more threads runnable than there are cores. The block starts once
    every one of them spins: a spawned interpreter can take seconds to start on a busy machine
    (a fixed wait of 0.3 s once let a 30-run measurement finish before they did)."""
    context = multiprocessing.get_context("spawn")
    spinning = context.Semaphore(0)
    procs = [context.Process(target=_spin, args=(seconds, cpu, spinning)) for _ in range(count)]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            assert spinning.acquire(timeout=60), "a spinner did not start within 60 s"
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.join()


# ---- the rule --------------------------------------------------------------------------------


def test_runs_that_kept_the_cpu_are_undisturbed():
    assert QUIET.reason is None
    share = int(20 * MAX_PREEMPTED_SHARE)  # at the limit: still judged
    assert Disturbance((Series("sme2-on timing", 20, share),)).reason is None


def test_runs_that_lost_the_cpu_say_how_many_and_what_the_machine_did():
    assert BUSY.reason == (
        "17 of 20 sme2-off timing runs lost the CPU to other work (threads waited for a CPU 64% "
        "of the time, load average 3.4 on 2 cores during the measurement)"
    )
    unknown = Disturbance((Series("sme2-on traced", 10, 6),))
    assert unknown.reason == (
        "6 of 10 sme2-on traced runs lost the CPU to other work (the machine's load unknown)"
    )


def test_an_oversubscribed_or_robbed_machine_is_disturbed_without_a_switch_seen():
    crowded = Disturbance(QUIET.series, MachineLoad(cores=2, waiting_percent=31.0))
    assert crowded.reason == "threads waited for a CPU 31% of the time during the measurement"
    robbed = Disturbance(QUIET.series, MachineLoad(cores=2, waiting_percent=0.2, steal_percent=6.5))
    assert robbed.reason == (
        "threads waited for a CPU 0% of the time, 6.5% of CPU time stolen by the hypervisor "
        "during the measurement"
    )
    # a neighbour on the other core is the reference workload's to cancel, not a disturbance
    assert Disturbance(QUIET.series, MachineLoad(cores=2, waiting_percent=0.4)).reason is None
    # pinned to one core beside it, the session's own threads wait a little (3–9 % measured)
    assert Disturbance(QUIET.series, MachineLoad(cores=2, waiting_percent=9.4)).reason is None
    mac = MachineLoad(cores=10, load_average=2.4)
    assert mac.describe() == "load average 2.4 on 10 cores during the measurement"
    assert Disturbance(QUIET.series, mac).reason is None  # a load average alone decides nothing


def test_a_run_lost_the_cpu_when_switched_out_for_more_than_a_blip():
    assert series("sme2-on timing", (), (), ()) is None
    wall = (7.0, 7.0, 7.0, 9.5, 0.9, 7.0)
    cpu = (7.0, 6.99, 6.9, 7.0, 0.81, 7.0)
    # switched out for 10 µs (a kernel thread), 0.1 ms, 2.5 ms (a time slice), 90 µs of a 0.9 ms
    # run (under the 0.2 ms floor); and never
    found = series("sme2-on timing", (0, 1, 2, 1, 1, 0), wall, cpu)
    assert found == Series("sme2-on timing", 6, 1)
    assert lost_cpu(1, 7.0, None)  # without CPU time, a switch is a loss
    assert not lost_cpu(0, 9.5, 7.0)  # slow without a switch: the caches' or the code's


@pytest.mark.parametrize(("lost", "judged"), [(4, True), (6, False)])
def test_a_neighbour_that_starts_mid_measurement_refuses_it_once_it_took_a_quarter(lost, judged):
    """The last ``lost`` of 20 runs each lose a 3 ms slice to a neighbour that started late: the
    early runs stay undisturbed (and the fastest run is one of them) until over a quarter lost."""
    wall = [7.0] * (20 - lost) + [10.0] * lost
    cpu = [7.0] * 20
    preempted = [0] * (20 - lost) + [2] * lost
    timing = series("sme2-off timing", preempted, wall, cpu)
    assert (Disturbance((timing,)).reason is None) is judged


def test_the_disturbance_survives_the_saved_record(tmp_path: Path):
    m = replace_disturbance(measurement(HOST), BUSY)
    again = Measurement.from_json(json.loads(json.dumps(m.to_json(tmp_path))), tmp_path)
    assert again.disturbance == BUSY and again.disturbance.reason == BUSY.reason


# ---- the verdicts ----------------------------------------------------------------------------


def replace_disturbance(m: Measurement, disturbance: Disturbance | None) -> Measurement:
    return replace(m, disturbance=disturbance)


def test_a_disturbed_measurement_judges_no_time_gate_and_says_why():
    base = from_measurement(measurement(HOST), TOL)
    slower = (12.0, 12.1, 11.9, 12.05, 11.95, 12.0)  # +20 %: a failure when judged
    m = replace_disturbance(measurement(HOST, off_latencies=slower), BUSY)
    expectations = Expectations(max_share={"Convolution": 0.3})
    verdicts = judge(m, base, expectations, TOL)
    gates = {v.gate for v in verdicts}
    assert not any(g.startswith(("latency", "shares", "share-limits")) for g in gates)
    assert "structure[sme2-off]" in gates  # portable gates stand
    (skip,) = [v for v in verdicts if v.gate == DISTURBED]
    assert skip.status is Status.SKIP
    assert skip.message.startswith(
        "time gates not judged for toy[fp32] on host: 17 of 20 sme2-off timing runs lost the CPU"
    )
    assert skip.details == ("not judged: share-limits, shares, latency, latency-sensitivity",)
    assert failure_report(verdicts, strict=False) is None
    assert "gate skipped under --sme2-strict: time gates not judged" in (
        failure_report(verdicts, strict=True) or ""
    )
    judged = judge(m, base, expectations, TOL, judge_disturbed=True)
    assert {v.gate: v.status for v in judged}["latency[sme2-off]"] is Status.FAIL


def test_a_quiet_measurement_is_judged_as_before():
    base = from_measurement(measurement(HOST), TOL)
    slower = (12.0, 12.1, 11.9, 12.05, 11.95, 12.0)
    m = replace_disturbance(measurement(HOST, off_latencies=slower), QUIET)
    assert {v.gate: v.status for v in judge(m, base, Expectations(), TOL)}[
        "latency[sme2-off]"
    ] is Status.FAIL


def test_a_disturbed_measurement_records_no_time(tmp_path: Path):
    m = replace_disturbance(measurement(HOST), BUSY)
    path, update = tmp_path / "b.json", Policy(TOL, update=True)

    def updated(m: Measurement, stored: Stored, policy: Policy = update):
        return decide(m, stored, path, Expectations(), policy, remeasure=None)

    first = updated(m, Stored(None))
    assert first.baseline is not None and first.baseline.machines == {}
    assert first.changes[-1] == (f"[{m.device.class_id}] time record not written: {BUSY.reason}")
    quiet = updated(replace_disturbance(m, QUIET), Stored(None))
    assert quiet.baseline is not None
    # a busy update keeps the class's quiet record, to the byte
    kept = updated(m, Stored(quiet.baseline))
    assert kept.baseline is not None and kept.baseline.machines == quiet.baseline.machines
    forced = updated(m, Stored(None), Policy(TOL, update=True, judge_disturbed=True))
    assert forced.baseline is not None and m.device.class_id in forced.baseline.machines


def test_a_confirmation_trusts_the_undisturbed_measurement():
    calm = replace_disturbance(measurement(HOST, reference_ms=(0.2,)), QUIET)
    busy = replace_disturbance(measurement(HOST, reference_ms=(0.1,)), BUSY)
    assert fastest(calm, busy) is calm
    assert fastest(busy, replace_disturbance(busy, BUSY)) is busy


def test_a_calibration_leaves_the_disturbed_measurements_out(tmp_path: Path):
    calm = [replace_disturbance(measurement(HOST, reference_ms=(0.1,)), QUIET) for _ in range(2)]
    busy = replace_disturbance(
        measurement(HOST, off_latencies=(30.0,) * 6, reference_ms=(0.1,)), BUSY
    )
    stored = from_measurement(calm[0], TOL)
    kw = {"path": tmp_path / "b.json", "when": "2026-11-25T18:00:00+00:00"}
    result = calibrate([*calm, busy], stored, Policy(TOL), **kw)
    assert result.calibration.runs == 2 and result.calibration.noise_percent == 0.0
    with pytest.raises(ConfigError, match=r"ran undisturbed in 1 of 2 measurements, 2 are needed"):
        calibrate([calm[0], busy], stored, Policy(TOL), **kw)
    forced = calibrate([calm[0], busy], stored, Policy(TOL, judge_disturbed=True), **kw)
    assert forced.calibration.runs == 2 and forced.calibration.noise_percent > 50


# ---- on this machine -------------------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/pressure/cpu").is_file(), reason="reads Linux PSI")
def test_the_machine_load_is_read_while_measuring():
    cores = os.cpu_count() or 1
    with spinners(cores + 2, seconds=5.0), local_load() as found:
        time.sleep(1.0)
    (load,) = found
    assert load.cores == cores
    assert load.waiting_percent is not None and load.waiting_percent > 50
    assert load.load_average is not None and load.steal_percent is not None
    assert load.oversubscribed()
    assert Disturbance((), load).reason == load.describe()


#: What the runner's own clock reads may add to an execution's CPU time but not to its wall clock
#: (the thread clock is read after the wall clock stops, each read a system call): 0.0076 ms was
#: seen on the Xeon 6/207 VM (0.752 ms CPU for 0.745 ms wall, a toy_cnn execution). A CPU clock
#: that counted another thread's time would be off by the spinners' slices, milliseconds.
CLOCK_READS_MS = 0.02


@linux_only
def test_the_runner_counts_the_executions_that_lost_the_cpu(tmp_path: Path):
    """The real runner pinned to one CPU with two spinners on it: its executions lose the CPU
    and it says so; CPU time never exceeds the wall clock."""
    from pytest_sme2.export.exporter import export_model
    from pytest_sme2.export.model_spec import get_model
    from pytest_sme2.runner import Executions, Launch, RunnerCall, build_runner, run_runner

    artifact = export_model(get_model("toy_cnn"), "fp32")
    cpu = min(os.sched_getaffinity(0))
    plan = Executions(runs=30, warmup=1, threads=1)
    with spinners(2, seconds=30.0, cpu=cpu):
        busy = run_runner(
            build_runner(),
            RunnerCall(artifact.pte, artifact.inputs, plan, tmp_path / "busy"),
            Launch(prefix=["taskset", "-c", str(cpu)]),
        )
    assert len(busy.preemptions) == len(busy.cpu_ms) == 30
    lost = [i for i, p in enumerate(busy.preemptions) if p]
    assert lost, busy.preemptions
    for cpu_ms, wall_ms in zip(busy.cpu_ms, busy.latencies_ms, strict=True):
        assert 0 < cpu_ms <= wall_ms * 1.01 + CLOCK_READS_MS
    # the slices given to the spinners are wall clock the run's CPU time does not have (a switch
    # is counted from before the run's restore step too, which leaves its caches cold)
    away = [busy.latencies_ms[i] - busy.cpu_ms[i] for i in lost]
    assert max(away) > 1.0, away


@linux_only
def test_a_case_measured_on_an_oversubscribed_machine_passes_saying_time_was_not_judged(
    tmp_path: Path,
):
    """Recorded with its time kept whatever the machine did (as this suite's sessions record,
    under ``--sme2-judge-disturbed``), then measured while more processes spin than there are
    cores and judged as a user's CI judges it, without that option: the case passes saying its
    time was not judged, and an update writes no time record, keeping the recorded one."""
    device = host_device()

    def quiet(label: str) -> Measurement:
        return measure_on_host(device, toy_cnn(), tmp_path / label)

    def as_found(label: str) -> Measurement:
        return measure_case(device, toy_cnn(), tmp_path / label)

    recorder = case_check(tmp_path, Policy(TOL, update=True), quiet)
    recorder.check(quiet("record"))
    recorded = json.loads(recorder.path.read_text())["machines"]
    cores = os.cpu_count() or 1
    with spinners(cores + 2, seconds=120.0):
        busy = case_check(tmp_path, Policy(TOL), as_found).check(as_found("busy"))
        update = case_check(tmp_path, Policy(TOL, update=True), as_found).check(as_found("update"))
    assert busy.failure is None
    (skip,) = [v for v in busy.verdicts if v.gate == DISTURBED]
    assert skip.status is Status.SKIP
    assert re.match(
        r"time gates not judged for toy_cnn\[fp32\] on host: "
        r".*threads waited for a CPU \d+% of the",
        skip.message,
    ), skip.message
    assert update.failure is None and busy.measurement is not None
    (kept,) = [change for change in update.changes if "time record not written" in change]
    assert kept.startswith(f"[{busy.measurement.device.class_id}] time record not written: ")
    stored = json.loads(recorder.path.read_text())["machines"]
    assert stored == recorded  # the quiet-enough record is kept
