"""The runner calls of one measurement (:mod:`pytest_sme2.measure.case`), and the profile made of
each variant's traced or counted run.

Every call has its deadline from the case's, leaves its files in its own directory under the
measurement's, shows its step in the progress line, and names the device, the variant and the
step when it fails: the one line a test fails with says where it happened.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from pytest_sme2 import progress
from pytest_sme2.analysis.categories import Classifier
from pytest_sme2.analysis.etrecord import delegate_backends
from pytest_sme2.analysis.profile import INSTRUCTIONS, Profile, profile
from pytest_sme2.analysis.trace import Run, Trace, read_etdump
from pytest_sme2.analysis.work import OperatorWork, ProgramWork, operator_work, read_program_work
from pytest_sme2.devices.base import (
    EVIDENCE_EXECUTIONS,
    CountedRun,
    Device,
    RunRequest,
    evidence_request,
)
from pytest_sme2.errors import DeviceLost, RunnerError, TraceError
from pytest_sme2.measure.deadline import Deadline
from pytest_sme2.measure.output_checks import check_outputs
from pytest_sme2.measure.plan import CaseProgram, MeasurePlan
from pytest_sme2.records.device import DeviceInfo, Variant
from pytest_sme2.records.evidence import Sme2Evidence
from pytest_sme2.runner.invoke import Executions, RunResult
from pytest_sme2.runner.tensors import read_tensors


@dataclass(frozen=True)
class CaseRuns:
    """One measurement's device, program and plan, and the runs it makes of them."""

    device: Device
    info: DeviceInfo
    program: CaseProgram
    plan: MeasurePlan
    workdir: Path
    deadline: Deadline
    #: the measurement's progress line
    running: progress.Task
    classifier: Classifier | None
    #: the backend of each delegate call (from the ETRecord), for the profiles
    backends: Mapping[int, str] | None
    #: the export's eager outputs, which every run's outputs must fit
    expected: Sequence[np.ndarray] | None
    #: the GEMM and convolution nodes of each delegate call (from the ETRecord), for each
    #: variant's work per operator; None without an ETRecord that has them
    program_work: ProgramWork | None = None

    @classmethod
    def start(
        cls,
        device: Device,
        info: DeviceInfo,
        program: CaseProgram,
        plan: MeasurePlan,
        workdir: Path,
        *,
        classifier: Classifier | None,
        deadline: Deadline,
        running: progress.Task,
    ) -> CaseRuns:
        """Read what every run is judged against once, before the first run."""
        etrecord, expected = program.etrecord, program.expected_outputs
        return cls(
            device=device,
            info=info,
            program=program,
            plan=plan,
            workdir=workdir,
            deadline=deadline,
            running=running,
            classifier=classifier,
            backends=delegate_backends(etrecord) if etrecord is not None else None,
            expected=read_tensors(expected) if expected is not None else None,
            program_work=_program_work(etrecord),
        )

    def apart(self) -> CaseRuns:
        """These runs with a progress task of their own, shown nowhere: for a variant run beside
        another (``pytest_sme2.measure.case._emulated_variants``)."""
        return replace(self, running=progress.Task(self.running.what))

    def executions(
        self, runs: int, *, warmup: int, traced: bool, threads: int | None = None
    ) -> Executions:
        """A runner call of ``runs`` measured executions after ``warmup`` on ``threads`` (else
        the case's), with its deadline."""
        return Executions(
            runs=runs,
            warmup=warmup,
            threads=threads or self.plan.threads,
            traced=traced,
            timeout_s=self.deadline.seconds(warmup + runs),
        )

    def request(
        self,
        variant: Variant,
        executions: Executions,
        name: str,
        program: tuple[Path, Path] | None = None,
    ) -> RunRequest:
        """What the device is asked to run: ``variant`` of the case's program (or of ``program``,
        a .pte and its inputs: the reference workload), its files under ``name``."""
        pte, inputs = program or (self.program.pte, self.program.inputs)
        return RunRequest(pte, inputs, executions, self.workdir / name, variant=variant)

    def timed(self, variant: Variant, executions: Executions, name: str) -> RunResult:
        """A timing-only run of the program, its files under ``name``."""
        with self.step(variant, stage="timing"):
            return self.device.run(self.request(variant, executions, name))

    def traced(self, variant: Variant) -> tuple[RunResult, Trace]:
        """The variant's traced run and its ETDump, parsed (once: the record keeps it), its
        outputs checked. Where time means nothing and each inference costs seconds, one
        inference: it gives the operator names, structure and outputs."""
        if self.info.time_meaningful:
            plan = self.executions(self.plan.traced_runs, warmup=self.plan.warmup, traced=True)
        else:
            plan = self.executions(1, warmup=0, traced=True)
        with self.step(variant, stage="traced run"):
            run = self.device.run(self.request(variant, plan, f"{variant}-traced"))
            assert run.etdump is not None, "a traced run always writes an ETDump"
            trace = read_etdump(run.etdump)
            check_outputs(run, self.expected)
        return run, trace

    def _evidence_request(self, variant: Variant, name: str) -> RunRequest:
        """An evidence or counted run of ``variant``, its deadline the case's for its
        executions."""
        return evidence_request(
            self.program.pte,
            self.program.inputs,
            self.workdir / f"{variant}-{name}",
            variant=variant,
            threads=self.plan.threads,
            timeout_s=self.deadline.seconds(EVIDENCE_EXECUTIONS),
        )

    def counted(self, variant: Variant) -> CountedRun | None:
        """The device's counted run (:meth:`~pytest_sme2.devices.base.Device.counted_run`),
        its outputs checked; None where the device does not count one."""
        with self.step(variant, stage="counted run"):
            counted = self.device.counted_run(self._evidence_request(variant, "counted"))
            if counted is not None:
                check_outputs(counted.run, self.expected)
        return counted

    def evidence(self, variant: Variant) -> Sme2Evidence | None:
        """The device's evidence of the kernels that ran, where it can show them."""
        with self.step(variant, "evidence run"):
            return self.device.evidence(self._evidence_request(variant, "evidence"))

    def traced_profile(self, run: RunResult, trace: Trace) -> Profile:
        """The traced run's profile, its warm-up runs dropped."""
        return profile(trace, warmup=run.warmup, classifier=self.classifier, backends=self.backends)

    def work(self, run: Run | None) -> tuple[OperatorWork, ...]:
        """The work of each GEMM and convolution operator of ``run`` (one inference of the
        variant); () where the program's ETRecord gives none."""
        if run is None or self.program_work is None:
            return ()
        return operator_work(run, self.program_work)

    def counted_profile(self, evidence: Sme2Evidence) -> Profile:
        """Where time means nothing, the profile is the counted inference's instructions."""
        assert evidence.instruction_trace is not None, "a counted run is traced"
        return profile(
            evidence.instruction_trace,
            classifier=self.classifier,
            backends=self.backends,
            unit=INSTRUCTIONS,
        )

    @contextmanager
    def step(self, variant: Variant, what: str = "", *, stage: str = "") -> Iterator[None]:
        """Prefix a failed run's error with the device and the variant (and ``what`` ran); the
        progress line shows the step (``stage``, else ``what``) while it runs."""
        self.running.stage(f"{variant} {stage or what}")
        try:
            yield
        except (RunnerError, TraceError) as err:
            where = f"{self.info.name} ({variant}{', ' + what if what else ''})"
            kind = DeviceLost if isinstance(err, DeviceLost) else RunnerError
            raise kind(f"{where}: {err}") from err


def _program_work(etrecord: Path | None) -> ProgramWork | None:
    """The ETRecord's GEMM and convolution work; None without one, or one that holds no edge
    program to read shapes from (a registered program's own ETRecord may be older): the
    measurement then shows no work, which the reports say, rather than failing."""
    if etrecord is None:
        return None
    try:
        return read_program_work(etrecord)
    except TraceError:
        return None
