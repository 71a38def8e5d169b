"""Stored counted runs on qemu-sme2: read back only where nothing that can move a count changed.

The key is tested on files (any byte of any keyed file or directory changes it), the store on
the real aarch64 runner under real qemu: a run read back equals the run counted, another input
is counted afresh, a recount replaces the entry, a damaged entry is counted again, a count of a
thread pool is never stored, and the device the plugin builds keeps its counts in the cache, its
measurement's report saying when they were read back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import models  # noqa: F401  (registers the examples)
from pytest_sme2.analysis.trace import read_etdump
from pytest_sme2.devices.base import CountedRun, RunRequest, evidence_request
from pytest_sme2.devices.qemu import QemuSme2Device
from pytest_sme2.devices.qemu_count import CountStore, counted_run
from pytest_sme2.devices.qemu_guest import QemuGuest
from pytest_sme2.devices.stored_counts import (
    content_digest,
    count_key,
    portable_arguments,
    store_dir,
)
from pytest_sme2.export.exporter import export_model
from pytest_sme2.measure.plan import MeasurePlan
from pytest_sme2.records.device import Variant
from pytest_sme2.report.evidence import evidence_lines
from pytest_sme2.runner.tensors import read_tensors, write_tensors
from tests.judge.small_model import small_model
from tests.measurements import measure_toy_cnn


def _files(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "guest-root"
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "libc.so.6").write_bytes(b"libc")
    (tmp_path / "program.pte").write_bytes(b"program")
    return {"guest root": root, "program": tmp_path / "program.pte"}


def test_the_key_moves_with_any_byte_of_any_keyed_file_or_setting(tmp_path: Path) -> None:
    files = _files(tmp_path)
    settings = {"plan": "runs=1 warmup=1 threads=1"}
    key = count_key(files, settings)
    assert count_key(files, settings) == key
    changed = []
    (tmp_path / "program.pte").write_bytes(b"programme")  # another size
    changed.append(count_key(files, settings))
    (tmp_path / "program.pte").write_bytes(b"PROGRAM")  # same size, other bytes
    changed.append(count_key(files, settings))
    (tmp_path / "program.pte").write_bytes(b"program")
    assert count_key(files, settings) == key
    (files["guest root"] / "lib" / "libm.so.6").write_bytes(b"libm")  # a file the guest may load
    changed.append(count_key(files, settings))
    (files["guest root"] / "lib" / "libm.so.6").unlink()
    assert count_key(files, settings) == key
    changed.append(count_key(files, {"plan": "runs=1 warmup=0 threads=1"}))
    changed.append(count_key({**files, "inputs": tmp_path / "not-there"}, settings))
    assert len({key, *changed}) == 1 + len(changed)


def test_a_linked_file_is_keyed_by_what_it_points_to(tmp_path: Path) -> None:
    """The guest root links the cross toolchain's libraries: an upgraded libc behind the same
    link is another key."""
    target = tmp_path / "libc-2.36.so"
    target.write_bytes(b"old libc")
    root = tmp_path / "root"
    root.mkdir()
    (root / "libc.so.6").symlink_to(target)
    before = content_digest(root)
    target.write_bytes(b"new libc!")
    assert content_digest(root) != before
    assert content_digest(tmp_path / "nothing") == "missing"


def test_a_command_is_keyed_without_the_paths_of_its_files() -> None:
    files = {"qemu": Path("/cache/a/qemu-aarch64"), "guest root": Path("/cache/a/root")}
    here = ["/cache/a/qemu-aarch64", "-cpu", "max", "-L", "/cache/a/root"]
    there = ["/home/ci/.cache/qemu-aarch64", "-cpu", "max", "-L", "/home/ci/root"]
    moved = {"qemu": Path(there[0]), "guest root": Path(there[4])}
    assert portable_arguments(here, files) == portable_arguments(there, moved)
    assert "<qemu>" in portable_arguments(here, files)
    assert portable_arguments([*here[:2], "max,sve=off", *here[3:]], files) != (
        portable_arguments(here, files)
    )


#: What the store's tests count: any program does, and one convolution counts in 1.5 s where
#: toy_cnn takes 3.6 s (qemu-sme2 on a 2-core EPYC; five counts in one test).
STORED = small_model("stored", 1)


@dataclass
class Storing:
    """The provisioned qemu-sme2 guest, keeping its counts in a store of this test's own (or
    counting again and replacing them: ``recount``)."""

    guest: QemuGuest
    store: Path
    recount: bool = False

    def counted_run(self, request: RunRequest) -> CountedRun:
        return counted_run(self.guest, request, CountStore(self.store, self.recount))


@pytest.fixture
def storing(qemu_device: QemuSme2Device, tmp_path: Path) -> Storing:
    return Storing(qemu_device.guest, tmp_path / "store")


def test_a_stored_run_reads_back_as_the_run_counted(storing: Storing, tmp_path: Path) -> None:
    artifact = export_model(STORED, "fp32")
    first = storing.counted_run(
        evidence_request(artifact.pte, artifact.inputs, tmp_path / "a", variant=Variant.ON)
    )
    assert first.evidence.stored_count_at == ""
    assert len(list((tmp_path / "store").iterdir())) == 1
    again = storing.counted_run(
        evidence_request(artifact.pte, artifact.inputs, tmp_path / "b", variant=Variant.ON)
    )
    assert again.evidence.stored_count_at.endswith("UTC")
    for field in ("instructions", "sme_instructions", "init_instructions", "sme2_kernels"):
        assert getattr(again.evidence, field) == getattr(first.evidence, field)
    assert again.evidence.operator_kernels == first.evidence.operator_kernels
    assert again.evidence.instruction_trace is not None
    assert first.evidence.instruction_trace is not None
    assert again.evidence.instruction_trace.runs == first.evidence.instruction_trace.runs
    assert again.run.etdump == tmp_path / "b" / "run.etdp"
    assert read_etdump(again.run.etdump).runs[-1] == read_etdump(first.run.etdump).runs[-1]
    assert again.run.outputs is not None and first.run.outputs is not None
    assert again.run.outputs.read_bytes() == first.run.outputs.read_bytes()
    assert again.run.load == first.run.load


def test_other_inputs_a_recount_and_a_damaged_entry_are_counted(
    storing: Storing, tmp_path: Path
) -> None:
    artifact = export_model(STORED, "fp32")
    off = storing.counted_run(
        evidence_request(artifact.pte, artifact.inputs, tmp_path / "a", variant=Variant.OFF)
    )
    other = tmp_path / "other.tensors"
    write_tensors(other, [np.flip(array, -1).copy() for array in read_tensors(artifact.inputs)])
    counted = storing.counted_run(
        evidence_request(artifact.pte, other, tmp_path / "b", variant=Variant.OFF)
    )
    assert counted.evidence.stored_count_at == ""
    assert counted.run.outputs is not None and off.run.outputs is not None
    assert counted.run.outputs.read_bytes() != off.run.outputs.read_bytes()
    entries = sorted((tmp_path / "store").iterdir())
    assert len(entries) == 2
    # a recount counts and replaces the entry
    storing.recount = True
    before = {entry: entry.stat().st_ino for entry in entries}
    recounted = storing.counted_run(
        evidence_request(artifact.pte, other, tmp_path / "c", variant=Variant.OFF)
    )
    assert recounted.evidence.stored_count_at == ""
    assert recounted.evidence.instructions == counted.evidence.instructions
    # the new entry is built before the old one goes, so a replaced entry is another inode
    assert sum(entry.stat().st_ino != before[entry] for entry in entries) == 1
    # a damaged entry (its record cut short, or a file of the run gone) is counted again, and
    # replaced by a whole one
    storing.recount = False
    for entry in entries:
        (entry / "count.json").write_text('{"format": 1, "counted_at"')
    damaged = storing.counted_run(
        evidence_request(artifact.pte, artifact.inputs, tmp_path / "d", variant=Variant.OFF)
    )
    assert damaged.evidence.stored_count_at == ""
    assert damaged.evidence.instructions == off.evidence.instructions
    whole = [e for e in entries if (e / "count.json").read_text().endswith("}")]
    assert len(whole) == 1
    (whole[0] / "run.etdp").unlink()
    again = storing.counted_run(
        evidence_request(artifact.pte, artifact.inputs, tmp_path / "e", variant=Variant.OFF)
    )
    assert again.evidence.stored_count_at == ""
    assert (whole[0] / "run.etdp").is_file()


def test_a_thread_pools_count_is_never_stored(storing: Storing, tmp_path: Path) -> None:
    """With two threads the pool's spinning is in the count, which then varies run to run."""
    artifact = export_model(STORED, "fp32")
    storing.counted_run(
        evidence_request(
            artifact.pte, artifact.inputs, tmp_path / "a", variant=Variant.ON, threads=2
        )
    )
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())


def test_the_plugins_device_reads_back_what_it_counted_and_the_report_says_so(
    narrow_qemu_device: QemuSme2Device, tmp_path: Path
) -> None:
    """The device as the plugin builds it keeps its counts in the cache (``--sme2-recount``:
    count and replace); a measurement that reads them back counts the same and its report says
    when they were counted. At 128-bit vectors (``--sme2-qemu-vl=16``), where SME2 emulates
    fastest."""
    vl = str(narrow_qemu_device.sme_vector_length)
    counting = QemuSme2Device.from_options({"sme2_recount": True, "sme2_qemu_vl": vl}.get)
    reading = QemuSme2Device.from_options({"sme2_qemu_vl": vl}.get)
    assert counting.counts == CountStore(store_dir(), recount=True)
    assert reading.counts == CountStore(store_dir(), recount=False)
    plan = MeasurePlan(runs=1, warmup=0, rounds=1, traced_runs=1)
    counted = measure_toy_cnn(counting, plan, tmp_path / "counted")
    read = measure_toy_cnn(reading, plan, tmp_path / "read")
    for variant in (Variant.ON, Variant.OFF):
        was, now = counted.variants[variant].evidence, read.variants[variant].evidence
        assert was is not None and now is not None
        assert was.stored_count_at == "" and now.stored_count_at.endswith("UTC")
        assert now.instructions == was.instructions
    assert read.instruction_ratio == counted.instruction_ratio
    said = "\n".join(evidence_lines(read))
    assert "Counts read back from the run(s) counted 20" in said
    assert "--sme2-recount counts again" in said
    assert "Counts read back" not in "\n".join(evidence_lines(counted))
