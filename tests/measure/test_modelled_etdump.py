"""The kit's ETDump on an emulated device: a real ETDump's run re-timed by an instruction-timed
copy of it, read back by our reader and by ExecuTorch's own deserialiser (what Inspector uses).

The instruction-timed runs here are made by hand (every time mapped through a line, so nesting
holds); tests/report/test_kit_layout.py checks a real qemu-sme2 case end to end. The writer patches
the source's bytes itself (no executorch import): what ExecuTorch reads of it is checked against
what ExecuTorch's own writer made of the same run and times, the module's writer until then.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from etdump_builder import Alloc, Block, Debug, Prof, build_etdump, default_block, execute_block

from pytest_sme2.analysis.trace import Run, Trace, parse_etdump, read_etdump
from pytest_sme2.errors import TraceError
from pytest_sme2.measure.modelled_etdump import (
    MODELLED_NAME,
    modelled_etdump,
    write_modelled_etdump,
)

DATA = Path(__file__).parents[1] / "data"
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


def _executorch_modelled(data: bytes, run_index: int, origin: int) -> object:
    """What ExecuTorch's own (de)serialisation made of the run ``run_index`` of ``data`` with
    every time mapped as :func:`_counted` maps it (the module's writer before its own), read
    back by ExecuTorch."""
    from executorch.devtools.etdump.schema_flatcc import ETDumpFlatCC
    from executorch.devtools.etdump.serialize import (
        deserialize_from_etdump_flatcc,
        serialize_to_etdump_flatcc,
    )

    document = deserialize_from_etdump_flatcc(data)
    block = [b for b in document.run_data if b.name == "Execute"][run_index]
    for event in block.events:
        if (timed := event.profile_event) is not None:
            timed.start_time = 3 * (timed.start_time - origin) + 5
            timed.end_time = 3 * (timed.end_time - origin) + 5
    written = serialize_to_etdump_flatcc(ETDumpFlatCC(version=document.version, run_data=[block]))
    return deserialize_from_etdump_flatcc(written, size_prefixed=False)


#: Besides the real traces: what they hold none of — allocation and debug events, allocators,
#: a schema version, delegate ids by number and by name.
SYNTHETIC = build_etdump(
    [
        default_block(start=500),
        execute_block(Prof("aten::add", 1_010, 1_020), start=1_000),
        Block(
            "Execute",
            [
                Prof(
                    "Method::execute",
                    2_000,
                    2_400,
                    [
                        Alloc(allocator_id=0, size=64),
                        Prof(
                            "DELEGATE_CALL",
                            2_010,
                            2_300,
                            [Prof(None, 2_010, 2_100, delegate_int=7)],
                        ),
                        Debug("aten::mul", value=42),
                        Prof(None, 2_310, 2_390, delegate_str="softmax", instruction_id=3),
                    ],
                )
            ],
            allocators=("method",),
        ),
    ],
    version=3,
)


@pytest.mark.parametrize("name", [*FIXTURES, "synthetic"])
def test_executorch_reads_what_its_own_writer_wrote(name: str, tmp_path: Path):
    path = DATA / name if name in FIXTURES else tmp_path / "run.etdp"
    if name == "synthetic":
        path.write_bytes(SYNTHETIC)
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    source = read_etdump(path)
    last = len(source.runs) - 1
    written = modelled_etdump(path, last, _counted(source, last))
    expected = _executorch_modelled(path.read_bytes(), last, source.runs[last].events[0].start_ns)
    assert deserialize_from_etdump_flatcc(written) == expected


def test_writing_it_imports_no_executorch(tmp_path: Path):
    """Importing executorch's (de)serialisation took 4.6–9.4 s a process, the most of a warm
    qemu-sme2 session: the writer does without it."""
    shutil.copyfile(DATA / FIXTURES[0], tmp_path / "run.etdp")
    script = (
        "import sys\n"
        "from pytest_sme2.analysis.trace import Trace, read_etdump\n"
        "from pytest_sme2.measure.modelled_etdump import write_modelled_etdump\n"
        f"trace = read_etdump({str(tmp_path / 'run.etdp')!r})\n"
        "write_modelled_etdump(Trace(trace.path, trace.runs[-1:], ()))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'executorch', 'torch'}))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "[]"
    assert (
        read_etdump(tmp_path / MODELLED_NAME).runs[0].events
        == read_etdump(tmp_path / "run.etdp").runs[-1].events
    )


def test_a_time_left_out_as_zero_is_not_invented(tmp_path: Path):
    """flatbuffers leaves out a field at its default: a run whose clock read 0 has no slot for
    its counted time (no real clock reads 0; the writer refuses rather than guess)."""
    source = tmp_path / "run.etdp"
    source.write_bytes(build_etdump([execute_block(Prof("aten::add", 0, 20), start=0)]))
    trace = read_etdump(source)
    with pytest.raises(TraceError, match="left out"):
        modelled_etdump(source, 0, _counted(trace, 0))  # aten::add's start: 0 → 5
    # a counted time of 0 where the source's was left out needs no slot
    as_is = Trace(source, trace.runs, ())
    assert parse_etdump(modelled_etdump(source, 0, as_is)).runs == trace.runs


def test_a_source_without_its_size_gets_it(tmp_path: Path):
    source = tmp_path / "run.etdp"
    source.write_bytes(
        build_etdump([execute_block(Prof("aten::add", 1_010, 1_020))], size_prefixed=False)
    )
    counted = _counted(read_etdump(source), 0)
    data = modelled_etdump(source, 0, counted)
    assert struct.unpack_from("<I", data) == (len(data) - 4,) and data[8:12] == b"ED00"
    assert len(data) % 8 == 0 and parse_etdump(data).runs[0].events == counted.runs[0].events
