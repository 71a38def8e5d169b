"""The ETDump reader: real traces (cross-checked with ExecuTorch's Inspector) and synthetic ones."""

from __future__ import annotations

import re
import struct
import time
import tracemalloc
from collections import defaultdict
from pathlib import Path

import pytest
from etdump_builder import (
    Alloc,
    Block,
    Debug,
    Prof,
    aliased_etdump,
    build_etdump,
    default_block,
    execute_block,
)
from etdump_fuzz import fuzz
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_sme2.analysis.trace import Event, Run, Trace, parse_etdump, read_etdump
from pytest_sme2.errors import TraceError

DATA = Path(__file__).parents[1] / "data"
REAL = sorted(DATA.glob("*.etdp"))
_INSTANCE = re.compile(r" #\d+$")


def _xnnpack(name: str, start: int, end: int, instruction: int = 0) -> Prof:
    """An XNNPACK operator event as ETDumpGen records it: the name in delegate_debug_id_str."""
    return Prof(None, start, end, delegate_str=name, instruction_id=instruction)


def _children(run: Run, index: int) -> list[Event]:
    return [e for e in run.events if e.parent == index]


# --- real traces -------------------------------------------------------------------------


@pytest.fixture(params=REAL, ids=[p.stem for p in REAL], scope="module")
def real(request: pytest.FixtureRequest) -> tuple[Path, Trace]:
    return request.param, read_etdump(request.param)


def test_real_fixtures_exist() -> None:
    assert len(REAL) >= 2, "tests/data/*.etdp missing: run tests/data/make_fixtures.py"


def test_real_trace_has_one_run_per_forward(real: tuple[Path, Trace]) -> None:
    path, trace = real
    forwards = int(re.search(r"_(\d+)runs$", path.stem)[1])
    assert trace.path == path
    assert [r.index for r in trace.runs] == list(range(forwards))


def test_real_setup_events_are_load_and_init(real: tuple[Path, Trace]) -> None:
    _, trace = real
    names = [(e.name, e.parent, e.depth) for e in trace.setup_events]
    assert names == [("Program::load_method", -1, 0), ("Method::init", 0, 1)]


def test_real_runs_nest_execute_calls_and_operators(real: tuple[Path, Trace]) -> None:
    _, trace = real
    for run in trace.runs:
        root = run.events[0]
        assert (root.name, root.parent, root.depth) == ("Method::execute", -1, 0)
        assert run.e2e_ns == root.end_ns - root.start_ns > 0
        assert all(e.parent >= 0 for e in run.events[1:])
        for event in run.events[1:]:
            parent = run.events[event.parent]
            assert event.depth == parent.depth + 1
            if event.delegated:
                assert parent.name == "DELEGATE_CALL"
                assert _INSTANCE.search(event.name), event.name
                assert event.delegate_debug_id == event.name
            elif event.name.startswith("native_call_"):
                assert parent.name == "OPERATOR_CALL"
            else:
                assert event.name in ("DELEGATE_CALL", "OPERATOR_CALL")
                assert parent.name == "Method::execute"
            if not event.delegated:
                assert parent.start_ns <= event.start_ns <= event.end_ns <= parent.end_ns


def test_real_wrappers_contain_their_kernels(real: tuple[Path, Trace]) -> None:
    """Every OPERATOR_CALL wraps one native kernel; every DELEGATE_CALL at least one operator."""
    _, trace = real
    for run in trace.runs:
        for index, event in enumerate(run.events):
            kids = _children(run, index)
            if event.name == "OPERATOR_CALL":
                assert [k.name.startswith("native_call_") for k in kids] == [True]
                assert kids[0].instruction_id == event.instruction_id
            elif event.name == "DELEGATE_CALL":
                assert kids and all(k.delegated for k in kids)
                assert {k.instruction_id for k in kids} == {event.instruction_id}


def test_real_runs_have_the_same_operators(real: tuple[Path, Trace]) -> None:
    _, trace = real
    first = [e.name for e in trace.runs[0].events]
    assert all([e.name for e in run.events] == first for run in trace.runs)


# --- cross-check with ExecuTorch's Inspector ---------------------------------------------


@pytest.fixture(scope="module")
def inspector_cls() -> type:
    """ExecuTorch's Inspector (slow import: once per module, for the tests that compare)."""
    from executorch.devtools import Inspector

    return Inspector


@pytest.mark.filterwarnings("ignore")
def test_matches_inspector(real: tuple[Path, Trace], inspector_cls: type) -> None:
    """Per-run ``Method::execute`` durations and per operator-kind totals equal Inspector's."""
    path, trace = real
    inspector = inspector_cls(etdump_path=str(path))
    theirs_e2e: list[float] = []
    theirs_total: dict[str, float] = defaultdict(float)
    for block in inspector.event_blocks:
        if block.name != "Execute":
            continue
        for event in block.events:
            if event.perf_data is None:
                continue
            if event.name == "Method::execute":
                theirs_e2e.extend(event.perf_data.raw)
            theirs_total[_INSTANCE.sub("", event.name)] += sum(event.perf_data.raw)
    ours_total: dict[str, float] = defaultdict(float)
    for run in trace.runs:
        for event in run.events:
            ours_total[_INSTANCE.sub("", event.name)] += event.duration_ms
    assert sorted(theirs_e2e) == pytest.approx(sorted(r.e2e_ms for r in trace.runs), rel=1e-12)
    assert ours_total.keys() == theirs_total.keys()
    for kind, total in ours_total.items():
        assert total == pytest.approx(theirs_total[kind], rel=1e-9, abs=1e-12), kind


# --- synthetic traces: structure ---------------------------------------------------------


def test_nesting_by_post_order_and_time() -> None:
    ops = [
        _xnnpack("Convolution (NHWC, F32) IGEMM #1", 1100, 1140),
        _xnnpack("Transpose (ND, X32) #1", 1140, 1140),  # 0 µs, at the previous end
        _xnnpack("Fully Connected (NC, F32) GEMM #1", 1140, 1160),
    ]
    native = Prof("native_call_mean.out", 1210, 1290, instruction_id=1)
    data = build_etdump(
        [
            default_block(),
            execute_block(
                Prof("DELEGATE_CALL", 1050, 1150, ops, instruction_id=0),
                Prof("OPERATOR_CALL", 1200, 1300, [native], instruction_id=1),
            ),
        ]
    )
    (run,) = parse_etdump(data).runs
    got = [(e.name, e.parent, e.depth, e.delegated) for e in run.events]
    assert got == [
        ("Method::execute", -1, 0, False),
        ("DELEGATE_CALL", 0, 1, False),
        ("Convolution (NHWC, F32) IGEMM #1", 1, 2, True),
        ("Transpose (ND, X32) #1", 1, 2, True),
        # Ends after its DELEGATE_CALL (synthetic start offsets): still inside it.
        ("Fully Connected (NC, F32) GEMM #1", 1, 2, True),
        ("OPERATOR_CALL", 0, 1, False),
        ("native_call_mean.out", 5, 2, False),
    ]
    assert run.events[6].instruction_id == 1


def test_consecutive_delegate_calls_keep_their_own_operators() -> None:
    first = Prof("DELEGATE_CALL", 1010, 1100, [_xnnpack("Add (ND) #1", 1020, 1030)])
    second = Prof("DELEGATE_CALL", 1100, 1200, [_xnnpack("Add (ND) #1", 1100, 1300)])
    (run,) = parse_etdump(build_etdump([execute_block(first, second, end=1400)])).runs
    assert [(e.name, e.parent) for e in run.events] == [
        ("Method::execute", -1),
        ("DELEGATE_CALL", 0),
        ("Add (ND) #1", 1),
        ("DELEGATE_CALL", 0),
        ("Add (ND) #1", 3),
    ]


def test_each_execute_block_is_a_run_and_load_is_setup() -> None:
    blocks = [default_block(0), execute_block(start=1_000, end=1_500)]
    blocks.append(execute_block(start=2_000, end=2_700))
    trace = parse_etdump(build_etdump(blocks), Path("x.etdp"))
    assert trace.path == Path("x.etdp")
    assert [(r.index, r.e2e_ns, r.e2e_ms) for r in trace.runs] == [(0, 500, 5e-4), (1, 700, 7e-4)]
    assert [e.name for e in trace.setup_events] == ["Program::load_method", "Method::init"]


def test_several_executes_in_one_block_sum_into_one_run() -> None:
    block = Block(
        "Execute",
        [
            Prof("Method::execute", 100, 400, [Prof("DELEGATE_CALL", 150, 350)]),
            Prof("Method::execute", 500, 600),
        ],
    )
    (run,) = parse_etdump(build_etdump([block])).runs
    assert run.e2e_ns == 300 + 100
    assert [(e.name, e.parent, e.depth) for e in run.events] == [
        ("Method::execute", -1, 0),
        ("DELEGATE_CALL", 0, 1),
        ("Method::execute", -1, 0),
    ]


def test_events_outside_execute_are_setup() -> None:
    block = Block("Execute", [Prof("Method::step", 10, 20), Prof("Method::execute", 30, 90)])
    trace = parse_etdump(build_etdump([block]))
    assert [e.name for e in trace.setup_events] == ["Method::step"]
    assert trace.runs[0].e2e_ns == 60


def test_allocation_and_debug_events_are_skipped_and_allocators_ignored() -> None:
    block = Block(
        "Execute",
        [
            Prof(
                "Method::execute",
                0,
                100,
                [Alloc(0, 4096), Debug("out", 7), Prof("MOVE_CALL", 10, 20)],
            )
        ],
        allocators=["method allocator", "temp"],
    )
    (run,) = parse_etdump(build_etdump([block])).runs
    assert [e.name for e in run.events] == ["Method::execute", "MOVE_CALL"]


@pytest.mark.parametrize("wrapper", ["MOVE_CALL", "FREE_CALL", "JF_CALL", "Unknown Thing 42"])
def test_other_framework_and_unknown_events_nest_like_any_event(wrapper: str) -> None:
    block = execute_block(Prof(wrapper, 1100, 1200, [Prof("native_call_add.out", 1110, 1190)]))
    (run,) = parse_etdump(build_etdump([block])).runs
    assert [(e.name, e.depth) for e in run.events] == [
        ("Method::execute", 0),
        (wrapper, 1),
        ("native_call_add.out", 2),
    ]


def test_unnamed_events_get_a_readable_name() -> None:
    ops = [Prof(None, 1100, 1110, delegate_int=7), Prof(None, 1110, 1120, delegate_int=0)]
    block = execute_block(Prof("DELEGATE_CALL", 1050, 1150, ops), Prof(None, 1200, 1210))
    (run,) = parse_etdump(build_etdump([block])).runs
    got = [(e.name, e.delegated, e.delegate_debug_id) for e in run.events[1:]]
    assert got == [
        ("DELEGATE_CALL", False, None),
        ("delegate#7", True, "7"),
        ("delegate#0", True, "0"),
        ("<unnamed>", False, None),
    ]


def test_not_size_prefixed_is_accepted() -> None:
    data = build_etdump([execute_block(end=2_000)], size_prefixed=False)
    assert parse_etdump(data).runs[0].e2e_ns == 1_000


def test_block_without_events_vector_is_skipped() -> None:
    trace = parse_etdump(build_etdump([Block("Default", None), execute_block(end=1_100)]))
    assert len(trace.runs) == 1
    assert trace.setup_events == ()


def test_event_duration_ms() -> None:
    event = Event("x", 1_000, 2_501_000, -1, 0, False, None, -1)
    assert event.duration_ms == 2.5


# --- malformed input ----------------------------------------------------------------------


def _problem(data: bytes) -> str:
    with pytest.raises(TraceError) as info:
        parse_etdump(data, Path("bad.etdp"))
    assert info.value.path == Path("bad.etdp")
    message = str(info.value)
    assert message.startswith("bad.etdp: ") and "\n" not in message
    return info.value.problem


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file") as info:
        read_etdump(tmp_path / "nope.etdp")
    assert info.value.path == tmp_path / "nope.etdp"


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="directory"):
        read_etdump(tmp_path)


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty.etdp").write_bytes(b"")
    with pytest.raises(TraceError, match="empty file"):
        read_etdump(tmp_path / "empty.etdp")


def test_wrong_identifier() -> None:
    data = bytearray(build_etdump([execute_block()]))
    data[8:12] = b"PTE0"
    assert "not an ETDump" in _problem(bytes(data))
    assert "not an ETDump" in _problem(b'{ "json": "not a flatbuffer at all" }')


def test_no_run_data() -> None:
    assert "no run data" in _problem(build_etdump([]))


def test_no_execute() -> None:
    assert "no Method::execute" in _problem(build_etdump([default_block()]))
    assert "no Method::execute" in _problem(build_etdump([Block("Execute", [])]))


def test_event_ending_before_it_starts() -> None:
    block = execute_block(Prof("DELEGATE_CALL", 1500, 1200))
    assert "ends before it starts" in _problem(build_etdump([block]))


def _parses_or_trace_error(data: bytes) -> None:
    try:
        trace = parse_etdump(data)
    except TraceError as err:
        assert "\n" not in str(err)
    else:
        assert trace.runs


def test_every_truncation_of_a_real_trace() -> None:
    data = REAL[0].read_bytes()
    for size in range(len(data)):
        assert ("empty file" if size == 0 else "truncated") in _problem(data[:size])


def test_truncated_with_a_rewritten_size_prefix() -> None:
    """A cut that the header does not betray: the walk must still fail cleanly, or succeed."""
    data = REAL[0].read_bytes()
    problems = set()
    for size in range(12, len(data), 3):
        try:
            parse_etdump(struct.pack("<I", size - 4) + data[4:size])
        except TraceError as err:
            problems.add(err.problem.split(":")[0])
    assert "corrupt ETDump" in problems


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=512))
def test_random_bytes_never_crash(data: bytes) -> None:
    _parses_or_trace_error(data)


@settings(max_examples=400, deadline=None)
@given(body=st.binary(min_size=4, max_size=512), root=st.integers(0, 600))
def test_random_body_behind_a_valid_header_never_crashes(body: bytes, root: int) -> None:
    payload = struct.pack("<I", root) + b"ED00" + body
    _parses_or_trace_error(struct.pack("<I", len(payload)) + payload)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_corrupted_real_trace_never_crashes(data: st.DataObject) -> None:
    trace = bytearray(REAL[0].read_bytes())
    edits = data.draw(
        st.lists(st.tuples(st.integers(12, len(trace) - 1), st.integers(0, 255)), max_size=8)
    )
    for position, value in edits:
        trace[position] = value
    _parses_or_trace_error(bytes(trace))


# --- hostile files: bounded time and memory --------------------------------------------


@pytest.mark.parametrize(("runs", "events"), [(5_000, 5_000), (2_000, 2_000), (1, 3_000)])
def test_offsets_aliasing_one_run_and_one_event_are_a_trace_error_at_once(
    runs: int, events: int
) -> None:
    """A 40 KB file whose run-data entries all share one run, whose entries all share one event:
    25 M events to a reader that follows every offset (a MemoryError after 93 s)."""
    data = aliased_etdump(runs, events)
    assert len(data) < 4 * (runs + events) + 200
    # memory, not a clock, tells a reader that follows every offset (25 M events) from one that
    # refuses at once: deterministic on any machine, however busy
    tracemalloc.start()
    with pytest.raises(TraceError, match=r"more events .* than its size can hold"):
        parse_etdump(data)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 10 * len(data) + 1_000_000, peak


def test_a_few_aliased_events_within_what_the_file_holds_still_parse() -> None:
    trace = parse_etdump(aliased_etdump(2, 4))
    assert [len(run.events) for run in trace.runs] == [4, 4]


def test_events_sharing_one_long_name_are_a_trace_error_at_once() -> None:
    """Strings may be shared too: 2,000 events naming one 100 KB string would copy 200 MB."""
    long = "x" * 100_000
    ops = [_xnnpack(long, 1_010 + i, 1_011 + i) for i in range(2_000)]
    block = execute_block(Prof("DELEGATE_CALL", 1_005, 4_000, ops))
    data = build_etdump([block], share_strings=True)
    tracemalloc.start()
    with pytest.raises(TraceError, match="longer strings than its size can hold"):
        parse_etdump(data)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 10 * len(data) + 1_000_000, peak  # no 200 MB of copies


def test_an_event_with_a_200_kb_name_is_parsed_and_profiled_like_a_short_one() -> None:
    """Linear in the name: a pattern that backtracks over 200 KB of spaces would take minutes.
    Timed against the same trace with a short name, interleaved, so a busy machine slows both."""
    from pytest_sme2.analysis.profile import profile

    def trace_named(name: str) -> bytes:
        op = _xnnpack(name, 1_010, 1_020)
        return build_etdump([execute_block(Prof("DELEGATE_CALL", 1_005, 1_090, [op]))])

    name = "a" + " " * 200_000 + "b"
    long, short = trace_named(name), trace_named("ab")

    def parse_and_profile(data: bytes) -> float:
        start = time.perf_counter()
        profile(parse_etdump(data))  # classifies every event name
        return time.perf_counter() - start

    times = {"long": [], "short": []}
    for _ in range(3):
        times["long"].append(parse_and_profile(long))
        times["short"].append(parse_and_profile(short))
    floor = 1e-3  # below this a trace's time is the timer's and the interpreter's noise
    ratio = min(times["long"]) / max(min(times["short"]), floor)
    assert ratio < 100, f"a 200 KB name took {ratio:.0f}× a short one's time"
    assert name in [event.name for event in parse_etdump(long).runs[0].events]


def test_structured_mutations_of_real_traces_parse_or_fail_in_one_line() -> None:
    """~1,000 mutated real ETDumps (aliased offsets, grown lengths, moved vtable slots, extreme
    times; tests/etdump_fuzz.py): each a Trace or a one-line TraceError, none slow.
    ``benchmarks/fuzz_etdump.py`` runs 10,000 and prints the counts."""
    outcome = fuzz(1_000, seed=19)
    assert sum(outcome.counts.values()) == 1_000
    parsed = sum(n for kind, n in outcome.counts.items() if kind.startswith("parsed"))
    assert 0 < parsed < 1_000  # both answers occur: the mutations reach the reader's checks
    # none slow, relative to the others (a busy machine slows them all): the slowest mutation
    # within 200× the mean; one that made the reader walk a huge structure takes 10⁴× and more
    mean_s = outcome.total_s / 1_000
    assert outcome.slowest_s < 200 * max(mean_s, 1e-4), (outcome.slowest_s, mean_s)
