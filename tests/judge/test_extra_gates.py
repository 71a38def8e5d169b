"""Gates a plugin adds (``pytest_sme2_gates`` → ``Policy.gates``): judged after the built-in ones,
on the same :class:`Judging`, and their verdicts treated as any other's — they fail the test, a
skip fails under ``--sme2-strict``, a failure of a wall-clock one alone is confirmed by a fresh
measurement (and of another kind is not), and a disturbed measurement's wall-clock ones are not
judged."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_sme2.judge.baseline import Tolerances, from_measurement
from pytest_sme2.judge.baseline_file import Stored
from pytest_sme2.judge.expectations import Expectations
from pytest_sme2.judge.gate import Gate, Judging
from pytest_sme2.judge.gates import Judge
from pytest_sme2.judge.lifecycle import decide
from pytest_sme2.judge.policy import Policy
from pytest_sme2.judge.time_gates import DISTURBED
from pytest_sme2.records.disturbance import Disturbance, Series
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Status, Verdict
from tests.measurements import SME2_DEVICE, measurement

TOL = Tolerances()


@dataclass(frozen=True)
class SlowestRunCeiling:
    """A team's own gate: each variant's slowest timed run under a ceiling (a tail-latency
    budget), where the stored baseline has a time record (else skipped, saying so)."""

    ceiling_ms: float
    name: str = "slowest-run"
    wall_clock: bool = True

    def check(self, judging: Judging) -> Iterator[Verdict]:
        if judging.record is None:
            yield Verdict(self.name, Status.SKIP, "no time record to judge against")
            return
        for variant, vm in judging.measurement.variants.items():
            slowest = max(vm.latencies_ms)
            ok = slowest <= self.ceiling_ms
            yield Verdict(
                f"{self.name}[{variant}]",
                Status.PASS if ok else Status.FAIL,
                f"slowest run {slowest:g} ms {'≤' if ok else '>'} {self.ceiling_ms:g} ms",
            )


@dataclass(frozen=True)
class NoParity:
    """A gate of another kind (not wall-clock): fails whenever the case has no parity check."""

    name: str = "needs-parity"

    def check(self, judging: Judging) -> list[Verdict]:
        ok = judging.measurement.parity is not None
        return [
            Verdict(
                self.name,
                Status.PASS if ok else Status.FAIL,
                "parity checked" if ok else "no parity",
            )
        ]


def decided(m: Measurement, policy: Policy, remeasure=None):
    stored = Stored(from_measurement(measurement(SME2_DEVICE), TOL))
    return decide(m, stored, Path("b.json"), Expectations(), policy, remeasure)


def test_a_plugins_gates_are_judged_after_the_built_in_ones_as_any_other() -> None:
    ceiling = SlowestRunCeiling(ceiling_ms=8.0)
    assert isinstance(ceiling, Gate) and isinstance(NoParity(), Gate)
    m = measurement(SME2_DEVICE)
    policy = Policy(TOL, gates=(ceiling,))
    stored = from_measurement(m, TOL)
    verdicts = Judge(policy, stored, Expectations())(m)
    built_in = Judge(Policy(TOL), stored, Expectations())(m)
    assert verdicts[: len(built_in)] == built_in
    assert [(v.gate, v.status) for v in verdicts[len(built_in) :]] == [
        ("slowest-run[sme2-on]", Status.PASS),
        ("slowest-run[sme2-off]", Status.FAIL),
    ]
    # it fails the test with its sentence, as a built-in gate would
    decision = decided(m, policy)
    assert decision.failure == "slowest run 10.1 ms > 8 ms"
    # where it cannot judge, it says why in a skip
    no_record = Judge(policy, replace(stored, machines={}), Expectations())(m)
    assert ("slowest-run", Status.SKIP) in [(v.gate, v.status) for v in no_record]


def test_a_plugins_wall_clock_failure_alone_is_confirmed_and_another_is_not() -> None:
    spiky = (10.0, 10.1, 9.9, 10.05, 9.95, 20.0)  # one run a neighbour delayed
    slow, fresh = measurement(SME2_DEVICE, off_latencies=spiky), measurement(SME2_DEVICE)
    taken = []

    def remeasure() -> tuple[Measurement, str]:
        taken.append(fresh)
        return fresh, "after a pause"

    policy = Policy(TOL, gates=(SlowestRunCeiling(ceiling_ms=15.0),))
    cleared = decided(slow, policy, remeasure)
    assert taken == [fresh] and cleared.failure is None and cleared.measurement == fresh
    assert cleared.remeasured_after == "slowest run 20 ms > 15 ms"

    taken.clear()
    stays = decided(slow, Policy(TOL, gates=(NoParity(),)), remeasure)
    assert taken == [] and stays.failure == "no parity"


def test_a_plugins_skip_fails_under_strict_and_its_wall_clock_gates_skip_when_disturbed() -> None:
    ceiling = SlowestRunCeiling(ceiling_ms=8.0)
    m = measurement(SME2_DEVICE)
    unrecorded = Stored(replace(from_measurement(m, TOL), machines={}))
    strict = decide(
        m,
        unrecorded,
        Path("b.json"),
        Expectations(),
        Policy(TOL, strict=True, gates=(ceiling,)),
        None,
    )
    assert strict.failure is not None
    assert "gate skipped under --sme2-strict: no time record to judge against" in strict.failure

    busy = replace(m, disturbance=Disturbance((Series("sme2-off timing", 20, 17),)))
    verdicts = Judge(
        Policy(TOL, gates=(ceiling, NoParity())), from_measurement(m, TOL), Expectations()
    )(busy)
    gates = {v.gate: v for v in verdicts}
    assert not [gate for gate in gates if gate.startswith("slowest-run")]
    assert "slowest-run" in gates[DISTURBED].details[0]
    assert gates["needs-parity"].status is Status.FAIL  # not wall-clock: judged as ever
