"""Export failures recorded on disk: replayed while nothing they depend on changed, never when
the machine was the cause, and a warm session that has nothing to lower forks nothing."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from filelock import FileLock

from pytest_sme2.cache import being_built
from pytest_sme2.errors import ExportError
from pytest_sme2.export import exporter as export
from pytest_sme2.export import failures as export_failures
from pytest_sme2.export import key as program_key
from pytest_sme2.export import prefetch
from pytest_sme2.export import stages as export_build
from pytest_sme2.export.exporter import artifact_dir, export_model
from pytest_sme2.export.model_spec import ModelSpec
from tests.inner import with_host_runner


def _linear(width: int = 8) -> object:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.ReLU()).eval()


def _inputs(seed: int, width: int = 8) -> tuple[object, ...]:
    import torch

    return (torch.randn(1, 8, generator=torch.Generator().manual_seed(seed)),)


#: 8da4w quantizes linear layers whose inputs divide by 32: this one has none, and is refused
#: at ``quantize``, after its key was built and traced (a model that cannot be traced has a
#: one-off key instead: tests below).
UNQUANTIZABLE = ModelSpec("unquantizable_recorded", _linear, _inputs, "", ("8da4w",))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of the test's own, and a process that remembers no failure: a new session."""
    monkeypatch.setenv("SME2_CACHE_DIR", str(with_host_runner(tmp_path)))
    monkeypatch.setattr(export, "_FAILURES", {})
    return tmp_path / "exports"


def _new_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a new process starts with: no failure remembered, every model keyed afresh."""
    monkeypatch.setattr(export, "_FAILURES", {})
    for memory in ("_FINGERPRINTS", "_BUILT", "_SIZES"):
        monkeypatch.setattr(program_key, memory, {})


def _no_lowering(monkeypatch: pytest.MonkeyPatch) -> None:
    def lowered(*args: object) -> None:
        raise AssertionError("exported again")

    monkeypatch.setattr(export, "build_export", lowered)


def test_a_failure_of_the_program_is_recorded_and_raised_again_without_exporting(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ExportError) as first:
        export_model(UNQUANTIZABLE, "8da4w")
    record = export_failures.record_path(artifact_dir(UNQUANTIZABLE, "8da4w"))
    assert json.loads(record.read_text())["stage"] == "quantize"

    _new_session(monkeypatch)
    _no_lowering(monkeypatch)
    with pytest.raises(ExportError) as again:
        export_model(UNQUANTIZABLE, "8da4w")
    assert (again.value.model, again.value.dtype, again.value.stage) == (
        "unquantizable_recorded",
        "8da4w",
        "quantize",
    )
    assert again.value.cause.startswith(first.value.cause + " (recorded ")
    assert f"delete {record} to export again" in str(again.value)


def test_a_process_that_waited_on_a_failing_export_takes_its_record_and_does_not_lower(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two xdist workers reaching one failing pair: the second waits on the entry's lock while
    the first lowers; the first records its failure before releasing the lock, and the second,
    holding it, raises that record instead of lowering the same program again."""
    directory = artifact_dir(UNQUANTIZABLE, "8da4w")
    locked_while_recording: list[bool] = []
    record_failure = export_failures.record

    def record_locked(entry: Path, err: ExportError) -> None:
        locked_while_recording.append(being_built(entry))  # the lock probe of another process
        record_failure(entry, err)

    monkeypatch.setattr(export_failures, "record", record_locked)
    with pytest.raises(ExportError):
        export_model(UNQUANTIZABLE, "8da4w")
    assert locked_while_recording == [True]  # recorded before the lock was let go
    record = export_failures.record_path(directory)
    recorded_text = record.read_text()
    record.unlink()  # as if the other worker were still lowering
    _new_session(monkeypatch)
    artifact_dir(UNQUANTIZABLE, "8da4w")  # keyed here: torch tracing is no other thread's
    _no_lowering(monkeypatch)
    checked = threading.Event()
    unrecorded = export_failures.recorded

    def recorded(entry: Path) -> ExportError | None:
        found = unrecorded(entry)
        checked.set()  # the worker looked before taking the lock, and found nothing
        return found

    monkeypatch.setattr(export_failures, "recorded", recorded)
    raised: list[BaseException] = []

    def second_worker() -> None:
        try:
            export_model(UNQUANTIZABLE, "8da4w")
        except BaseException as err:  # what it raised is the assertion
            raised.append(err)

    with FileLock(str(directory) + ".lock"):  # the first worker, lowering
        worker = threading.Thread(target=second_worker)
        worker.start()
        assert checked.wait(timeout=60)
        record.write_text(recorded_text)  # the first worker's failure, recorded under the lock
    worker.join(timeout=120)
    assert not worker.is_alive()
    (err,) = raised
    assert isinstance(err, ExportError) and "(recorded " in err.cause, repr(err)


def test_a_changed_pytest_sme2_exports_again(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ExportError):
        export_model(UNQUANTIZABLE, "8da4w")
    _new_session(monkeypatch)
    monkeypatch.setattr(export_failures, "sources_digest", lambda: "another pytest-sme2")
    _no_lowering(monkeypatch)
    with pytest.raises(AssertionError, match="exported again"):
        export_model(UNQUANTIZABLE, "8da4w")


@pytest.mark.parametrize(
    "cause",
    [
        MemoryError(),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"
        ),
        OSError(28, "No space left on device"),
        ModuleNotFoundError("No module named 'torchao'"),
        RuntimeError(
            "Only a single TORCH_LIBRARY can be used to register the namespace llama; please put"
            " all of your definitions in a single TORCH_LIBRARY block."
        ),
        # torch._inductor imported again after a pytester test dropped it from sys.modules: every
        # export of a cold CI run failed so, and was recorded as the model's (2026-12-07)
        AssertionError(
            "Artifact of type=autotune already registered in mega-cache artifact factory"
        ),
    ],
    ids=[
        "MemoryError",
        "torch out of memory",
        "OSError",
        "a package missing",
        "torch lib twice",
        "torch module twice",
    ],
)
def test_a_failure_of_the_machine_or_the_process_is_not_recorded(
    cache: Path, monkeypatch: pytest.MonkeyPatch, cause: BaseException
) -> None:
    def lower(exported: object) -> object:
        raise cause

    monkeypatch.setattr(export_build, "lower", lower)
    spec = ModelSpec("machine_failed", _linear, _inputs, "")
    with pytest.raises(ExportError) as caught:
        export_model(spec, "fp32")
    assert caught.value.stage == "lower"
    assert not export_failures.record_path(artifact_dir(spec, "fp32")).exists()


def test_an_unreadable_record_is_ignored_and_written_again(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = export_failures.record_path(artifact_dir(UNQUANTIZABLE, "8da4w"))
    record.parent.mkdir(parents=True)
    record.write_text('{"format": 1, "stage": ')  # cut short
    with pytest.raises(ExportError) as caught:
        export_model(UNQUANTIZABLE, "8da4w")
    assert "recorded" not in caught.value.cause  # it was exported, and failed, afresh
    assert json.loads(record.read_text())["cause"] == caught.value.cause


def test_a_warm_session_forks_no_export_process(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exported pairs and recorded failures are settled: nothing goes to the processes (which
    would import the lowering, 4 s, and fork the session to find that out)."""
    pairs = [
        (ModelSpec(f"warm_{w}", _linear, _inputs, "", ("fp32",), (("width", w),)), "fp32")
        for w in (8, 16)
    ]
    prefetch.prefetch([*pairs, (UNQUANTIZABLE, "8da4w")], processes=1)
    _new_session(monkeypatch)

    def forked(*args: object) -> None:
        raise AssertionError("forked export processes")

    monkeypatch.setattr(prefetch, "_export_in_processes", forked)
    prefetch.prefetch([*pairs, (UNQUANTIZABLE, "8da4w")], processes=2)
    assert export_model(*pairs[0]).pte.is_file()
    with pytest.raises(ExportError, match="recorded"):
        export_model(UNQUANTIZABLE, "8da4w")


def _broken() -> object:
    raise RuntimeError("weights file missing")


def _branchy() -> object:
    """Neither torch.fx nor torch.export can trace it: Python control flow on a tensor's value."""
    import torch

    class Branchy(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.sum() > 0 else x - 1

    return Branchy().eval()


@pytest.mark.parametrize(
    ("factory", "stage"), [(_broken, "build model"), (_branchy, "torch.export")]
)
def test_a_model_keyed_without_its_build_is_not_recorded(
    cache: Path, factory: object, stage: str
) -> None:
    """Its key is a one-off (nothing built or traced to hash): a record under it would never be
    read again, one more file in the cache each session."""
    with pytest.raises(ExportError, match=f"failed at {stage}"):
        export_model(ModelSpec("unkeyed", factory, _inputs, ""), "fp32")  # type: ignore[arg-type]
    assert list(cache.glob("*" + export_failures.SUFFIX)) == []
