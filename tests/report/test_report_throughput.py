"""Throughput of a language model's phase: tokens/s (instructions per token where emulated) and
what bounds the phase, in every report; nothing of it for a model without tokens."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sme2.records.device import Variant
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.report import markdown
from pytest_sme2.report.content import summary_row
from pytest_sme2.report.throughput import per_token, phase_line, throughput_table
from tests.measurements import SME2_DEVICE, counted_measurement, measurement


def test_tokens_per_second_from_the_median_timing_only_run() -> None:
    """Off median 10.0 ms and on median 4.0 ms, 64 tokens an inference: 6,400 and 16,000
    tokens/s, a gain of 2.5×."""
    m = replace(measurement(SME2_DEVICE), tokens=64)
    assert per_token(m, Variant.OFF) == pytest.approx(6400.0)
    assert per_token(m, Variant.ON) == pytest.approx(16000.0)
    table = throughput_table(m)
    assert table is not None
    assert table.rows[-1][0] == "SME2 gain" and table.rows[-1][2] == "2.50×"
    assert "16,000.0 tokens/s" in table.markdown()


def test_instructions_per_token_where_time_is_emulated() -> None:
    m = replace(counted_measurement(), tokens=1)
    on = m.variants[Variant.ON].evidence
    off = m.variants[Variant.OFF].evidence
    assert on is not None and off is not None and on.instructions and off.instructions
    assert per_token(m, Variant.ON) == on.instructions
    table = throughput_table(m)
    assert table is not None and table.headers[2] == "instructions/token"
    assert table.rows[-1][2] == f"{off.instructions / on.instructions:.2f}×"


def test_the_phase_line_names_the_shape_and_the_largest_category() -> None:
    """A decode step whose transposes outweigh its GEMMs says so, beside the GEMM share."""
    ops = (("Fully Connected (NC, PF32) GEMM", 1.0), ("Transpose (ND, X32)", 3.0))
    decode = replace(measurement(SME2_DEVICE, on_ops=ops), tokens=1)
    line = phase_line(decode)
    assert line is not None
    assert line.startswith(
        "1 token per inference (a decode step), linear layers matrix × vector (GEMV):"
    )
    assert "Bottleneck: Data Movement" in line and "; GEMM " in line
    prefill = replace(measurement(SME2_DEVICE), tokens=64)
    assert (phase_line(prefill) or "").startswith("64 tokens per inference, linear layers")


def test_reports_show_it_for_token_models_only(tmp_path: Path) -> None:
    plain = measurement(SME2_DEVICE)
    tokens = replace(plain, tokens=16)
    assert "## Throughput" in markdown.case_report(tokens, [])
    assert "## Throughput" not in markdown.case_report(plain, [])
    assert "per token (on)" in summary_row(tokens, [])
    assert "per token (on)" not in summary_row(plain, [])
    assert Measurement.from_json(tokens.to_json(tmp_path), tmp_path).tokens == 16
