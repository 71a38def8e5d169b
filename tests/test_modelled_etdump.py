"""The kit's ETDump on an emulated device: a real ETDump's run re-timed by an instruction-timed
copy of it, read back by our reader and by ExecuTorch's own deserialiser (what Inspector uses).

The instruction-timed runs here are made by hand (every time mapped through a line, so nesting
holds); tests/test_kit_layout.py checks a real qemu-sme2 case end to end.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from pytest_sme2.analysis.trace import Run, Trace, parse_etdump, read_etdump
from pytest_sme2.errors import TraceError
from pytest_sme2.run.modelled_etdump import MODELLED_NAME, modelled_etdump, write_modelled_etdump

DATA = Path(__file__).parent / "data"
FIXTURES = ("xnnpack_cnn_fp32_3runs.etdp", "xnnpack_attention_fp16_2runs.etdp")


def _counted(trace: Trace, run_index: int) -> Trace:
    """``trace``'s run ``run_index`` as an instruction trace would give it: times from 0, here
    3 "instructions" a nanosecond plus 5 (distinct from every source time, nesting kept)."""
    run = trace.runs[run_index]
    origin = run.events[0].start_ns
    events = tuple(
        e._replace(start_ns=3 * (e.start_ns - origin) + 5, end_ns=3 * (e.end_ns - origin) + 5)
        for e in run.events
    )
    return Trace(trace.path, (Run(run.index, 3 * run.e2e_ns, events),), ())


@pytest.mark.parametrize("name", FIXTURES)
def test_the_counted_run_alone_carries_the_instruction_times(name: str):
    source = read_etdump(DATA / name)
    counted = _counted(source, len(source.runs) - 1)
    modelled = parse_etdump(modelled_etdump(DATA / name, len(source.runs) - 1, counted))
    assert modelled.setup_events == ()  # the set-up block's times are the device's clock
    (run,) = modelled.runs
    assert run.events == counted.runs[0].events
    assert run.e2e_ns == counted.runs[0].e2e_ns


def test_inspector_reads_it_as_etdumpgen_writes_it_size_prefixed():
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    source = read_etdump(DATA / FIXTURES[0])
    data = modelled_etdump(DATA / FIXTURES[0], 1, _counted(source, 1))
    document = deserialize_from_etdump_flatcc(data)  # size-prefixed, as Inspector reads it
    original = deserialize_from_etdump_flatcc((DATA / FIXTURES[0]).read_bytes())
    assert document.version == original.version
    assert [b.name for b in document.run_data] == ["Execute"]
    kept = [
        (e.profile_event.name, e.profile_event.delegate_debug_id_str)
        for e in original.run_data[2].events
    ]
    assert [
        (e.profile_event.name, e.profile_event.delegate_debug_id_str)
        for e in document.run_data[0].events
    ] == kept
    # its size, then the buffer, 8-aligned from the file's start as ETDumpGen's are
    assert struct.unpack_from("<I", data) == (len(data) - 4,) and len(data) % 8 == 0


def test_written_beside_its_source_which_stays_as_it_was(tmp_path: Path):
    source = tmp_path / "run.etdp"
    source.write_bytes((DATA / FIXTURES[1]).read_bytes())
    counted = _counted(read_etdump(source), 1)
    written = write_modelled_etdump(counted)
    assert written == tmp_path / MODELLED_NAME
    assert source.read_bytes() == (DATA / FIXTURES[1]).read_bytes()
    assert read_etdump(written).runs[0].events == counted.runs[0].events
    assert write_modelled_etdump(Trace(None, counted.runs, ())) is None


def test_a_counted_run_of_another_trace_is_refused():
    cnn, attention = (read_etdump(DATA / name) for name in FIXTURES)
    with pytest.raises(TraceError, match="not those of the counted run"):
        modelled_etdump(DATA / FIXTURES[0], 1, _counted(attention, 1))
    with pytest.raises(TraceError, match="no run 3 of 3"):
        modelled_etdump(DATA / FIXTURES[0], 3, _counted(cnn, 1))
