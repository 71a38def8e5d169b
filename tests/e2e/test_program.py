"""Bring your own program: a ``.pte`` exported by ExecuTorch's own LLM exporter, registered with
``register_program`` and gated like a model; bad programs fail their case in one line while
the others run.

The programs are exported for real (tests/llm_programs.py: the installed wheel's ``export_llm``
configuration, a tiny llama, 8da4w, XNNPACK, KV cache on): the decode step with the standard
attention ops, and one with ExecuTorch's ``llama::`` custom ops, which, renamed, no runner has
(the custom ops themselves: tests/e2e/test_custom_ops.py).
"""

from __future__ import annotations

import json
import re
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_sme2 import register_program
from pytest_sme2.analysis.numerics import ExportNumerics
from pytest_sme2.analysis.tolerances import TOLERANCES, tolerance_for
from pytest_sme2.errors import ConfigError
from pytest_sme2.export import program_files
from pytest_sme2.records.device import Variant
from pytest_sme2.records.verdict import Status
from pytest_sme2.report.from_files import load_test_dir
from tests.inner import INNER_TEST
from tests.llm_programs import DEVICES, FAST, INPUTS, NOT_EMULATED, PHASES, RecordedProject

pytest_plugins = ["pytester"]

#: This module's and tests/e2e/test_custom_ops.py's tests on one xdist worker (the outer session
#: distributes by ``loadgroup``, which the plugin chooses for a fleet with a real device): both
#: take the programs and the recorded project of tests/llm_programs.py (session fixtures), which
#: one worker makes while the other, from an empty cache, would sit waiting for them.
pytestmark = pytest.mark.xdist_group("llm-programs")


def test_an_export_llm_program_is_recorded_then_judged_unchanged(
    llm_project: RecordedProject,
) -> None:
    # run again unchanged, every recorded case passes
    cases = ["tiny_llama-8da4w", "tiny_llama-8da8w", "tiny_llama_ref-program"]
    cases += [f"custom_llama_{phase}-8da4w" for phase in PHASES]
    recorded = [f"{device}-{case}" for device in DEVICES for case in cases]
    recorded = [case for case in recorded if NOT_EMULATED not in case]
    assert {case: checked.failure for case, checked in llm_project.again.items()} == dict.fromkeys(
        recorded
    )
    host = llm_project.path / "baselines/host"
    baselines = sorted(path for path in host.iterdir() if path.name.startswith("tiny_llama"))
    assert [path.name for path in baselines] == [
        "tiny_llama-8da4w.json",
        "tiny_llama-8da8w.json",
        "tiny_llama_ref-program.json",
    ]
    # the 4-bit linears ran in XNNPACK, dynamically quantized activations as the CPU spells them
    # (QP8 on Arm, QD8/QDU8 on x86); attention in ExecuTorch's portable kernels
    operators = json.loads(baselines[0].read_text())["variants"]["sme2-off"]["operators"]
    assert any(re.match(r"Fully Connected \(NC, Q(P8|D8|DU8), F32, QB4W\)", op) for op in operators)
    assert "native_call_bmm.out" in operators, operators

    artifacts = llm_project.path / "artifacts/host"
    m, verdicts = load_test_dir(artifacts / "tiny_llama-8da4w/manifest.json")
    assert m.model == "tiny_llama" and m.dtype == "8da4w"
    numerics = {v.gate: v for v in verdicts}["numerics"]
    assert numerics.status is Status.SKIP
    assert "not judged: no reference" in numerics.message
    assert m.numerics == ExportNumerics(None, registered=True)
    report = (llm_project.path / "artifacts/report.md").read_text()
    assert "not judged: no reference" in report

    m, verdicts = load_test_dir(artifacts / "tiny_llama_ref-program/manifest.json")
    numerics = {v.gate: v for v in verdicts}["numerics"]
    assert numerics.status is Status.PASS, numerics
    assert "against the expected outputs given to register_program" in numerics.message


def test_an_export_llm_program_on_qemu_sme2_is_recorded_then_judged_in_instructions(
    llm_project: RecordedProject,
) -> None:
    """The same program emulated: instructions per inference and per operator recorded, then
    judged unchanged; SME2-on and SME2-off outputs alike.

    What it shows (ExecuTorch 1.5.1): a decode step's 4-bit linears (one token: M = 1) run
    KleidiAI's NEON dot-product GEMV with SME2 on too, so off ÷ on is 1.00× and no SME2 kernel
    executes — ``require_sme2_kernels`` would rightly fail it. A prefill (M > 1) is what SME2
    accelerates."""
    again = llm_project.again["qemu-sme2-tiny_llama-8da4w"]
    judged = {v.gate: v for v in again.verdicts}
    m = again.measurement
    assert m is not None
    for variant in (Variant.ON, Variant.OFF):
        assert judged[f"instructions[{variant}]"].status is Status.PASS, judged
    assert m.parity is not None and m.parity.ok and not m.parity.vacuous
    on = m.variants[Variant.ON]
    names = [op.name for op in on.profile.operators]
    assert any(name.startswith("Fully Connected (NC, QP8, F32, QB4W)") for name in names), names
    assert on.evidence is not None and not on.evidence.sme2_kernels, on.evidence
    assert 0.99 < m.instruction_ratio < 1.01, m.instruction_ratio


def test_a_program_under_a_label_that_is_no_builtin_dtype_is_recorded_and_judged(
    llm_project: RecordedProject,
) -> None:
    """optimum-executorch's users label their programs ``8da8w``: the label's tolerance is
    found (int8-dynamic's), so the SME2-on/off parity after the counting judges instead of
    crashing with ``KeyError: '8da8w'``, and the record reaches the baseline, the report, the
    history and the kit's files under ``<name>-8da8w``, on each device."""
    for device in DEVICES:
        assert (llm_project.path / f"baselines/{device}/tiny_llama-8da8w.json").is_file()
        m, verdicts = load_test_dir(
            llm_project.path / f"artifacts/{device}/tiny_llama-8da8w/manifest.json"
        )
        assert (m.model, m.dtype) == ("tiny_llama", "8da8w")
        assert verdicts and all(v.status is not Status.FAIL for v in verdicts)
        if device == "qemu-sme2":
            assert m.parity is not None and m.parity.ok
            assert m.parity.tolerance_rel == tolerance_for("int8-dynamic").rel
    assert "tiny_llama-8da8w" in (llm_project.path / "artifacts/report.md").read_text()
    records = [
        json.loads(line)
        for path in (llm_project.path / "history").glob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    measured = [record["measurement"] for record in records]
    labelled = [m["device"]["name"] for m in measured if m["dtype"] == "8da8w"]
    assert sorted(labelled) == sorted(DEVICES), labelled  # the recording session's devices


def test_every_label_finds_a_tolerance() -> None:
    """One lookup that always answers: a built-in dtype's, a known alias's, else fp32's."""
    assert tolerance_for("int8") == TOLERANCES["int8"]
    assert tolerance_for("8da8w") == tolerance_for("INT8_DYNAMIC") == TOLERANCES["int8-dynamic"]
    assert tolerance_for("bf16") == TOLERANCES["fp16"]
    assert tolerance_for("program") == tolerance_for("whatever.v2") == TOLERANCES["fp32"]


def test_one_name_carries_several_dtypes_and_a_true_duplicate_names_both_files(
    llm_project: RecordedProject, llm_programs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``register_program`` once per dtype under one name: a case ``tiny_llama-<dtype>`` each,
    each with its baseline; the same name and dtype for another file is refused, naming both."""
    for device in DEVICES:
        stored = sorted(path.name for path in (llm_project.path / f"baselines/{device}").iterdir())
        assert [name for name in stored if name.startswith("tiny_llama-")] == [
            "tiny_llama-8da4w.json",
            "tiny_llama-8da8w.json",
        ]

    pte, other = llm_programs / "tiny_llama.pte", llm_programs / "custom_llama.pte"
    monkeypatch.setattr(program_files, "_REGISTRY", {})  # this process's registry
    with pytest.raises(ConfigError) as refused:
        register_program("dup_llama", pte=pte, inputs=lambda seed: (), dtype="fp32")
        register_program("dup_llama", pte=other, inputs=lambda seed: (), dtype="fp32")
    assert "registered twice as dtype 'fp32'" in str(refused.value)
    assert str(pte) in str(refused.value) and str(other) in str(refused.value)


def test_bad_programs_fail_in_one_line_while_a_good_one_passes(
    pytester: pytest.Pytester, llm_programs: Path, tmp_path: Path
) -> None:
    good = llm_programs / "tiny_llama.pte"
    truncated = tmp_path / "truncated.pte"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    text = tmp_path / "notes.pte"
    text.write_text("not a program\n" * 10)
    unknown = tmp_path / "unknown_ops.pte"  # custom operators renamed: no kernel library has them
    sdpa = (llm_programs / "custom_llama.pte").read_bytes()
    unknown.write_bytes(sdpa.replace(b"llama::", b"nollm::"))
    pytester.makepyfile(test_programs=INNER_TEST)
    pytester.makeconftest(
        INPUTS
        + textwrap.dedent(
            f"""
        from pytest_sme2 import register_program

        register_program("good", pte={str(good)!r}, inputs=decode_inputs)
        register_program("truncated", pte={str(truncated)!r}, inputs=decode_inputs)
        register_program("text", pte={str(text)!r}, inputs=decode_inputs)
        register_program("float_tokens", pte={str(good)!r}, inputs=float_tokens)
        register_program(
            "sdpa", pte={str(unknown)!r}, inputs=decode_inputs
        )
        register_program(
            "wrong", pte={str(good)!r}, inputs=decode_inputs,
            expected_outputs=lambda seed: (np.load({str(llm_programs / "logits.npy")!r}) + 1.0,),
        )
        """
        )
    )
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        *FAST,
        f"--sme2-baseline-dir={pytester.path / 'baselines'}",
        f"--sme2-artifacts={pytester.path / 'artifacts'}",
        "--sme2-update-baselines",
        "--junitxml=junit.xml",
    )
    # a case's fixture fails it (pytest: an error at setup), as a device that cannot be prepared
    result.assert_outcomes(passed=1, errors=5)
    failures = {
        case.get("name").split("[", 1)[1].rstrip("]"): case.find("error").text.strip()
        for case in ET.parse(pytester.path / "junit.xml").iter("testcase")
        if case.find("error") is not None
    }
    assert failures.keys() == {
        "truncated-program",
        "text-program",
        "float_tokens-program",
        "sdpa-program",
        "wrong-program",
    }
    assert all("\n" not in message for message in failures.values()), failures
    assert failures["truncated-program"] == (
        f"program truncated ({truncated}): Program::load of {truncated} failed: "
        "Error::InvalidProgram (0x23): the file is truncated or corrupt; export it again"
    )
    assert (
        f"program text ({text}): model {text} is not an ExecuTorch program (.pte)"
        in (failures["text-program"])
    )
    assert failures["float_tokens-program"] == (
        f"program float_tokens ({good}): input 0 of inputs(0) is Float but the program expects Long"
    )
    assert failures["sdpa-program"].startswith(
        f"program sdpa ({unknown}): needs operator(s) "
        "nollm::custom_sdpa.out, nollm::update_cache.out that sme2_runner does not link"
    )
    assert "outputs off the expected ones" in failures["wrong-program"]
    # before any measuring: no failed case has a run directory
    assert sorted(p.name for p in (pytester.path / "artifacts/host").iterdir()) == ["good-program"]


def test_a_missing_program_file_is_refused_at_registration(tmp_path: Path) -> None:
    missing = tmp_path / "gone.pte"
    with pytest.raises(ConfigError, match=f"program 'gone': {missing} does not exist"):
        register_program("gone", pte=missing, inputs=lambda seed: ())
