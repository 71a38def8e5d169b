"""The case record: everything measured for one model × dtype × threads on one device.

``measure`` produces it; ``gates``, ``baseline`` and every part of ``report`` consume it. It is
the one thing that crosses a process boundary: under pytest-xdist a worker saves it in the test's
``manifest.json`` and the controller's session report is rebuilt from it, so its JSON form is
lossless (``Measurement.from_json(m.to_json(base), base) == m``) and lives only here. A report
made from the saved record therefore says what the gates judged: the device's instruction counts
and executed kernels, parity, the category overrides.

What the record holds of a run is what the stages downstream read: latencies, the analysed
profile, and the paths of the files the run left (ETDump, outputs). Runner logs and commands stay
with the run. The parsed trace, which the few places that lay out every event read (timelines,
Perfetto trace), is kept on the record in memory where the measurement parsed it, and read back
from the ETDump otherwise (a saved record, a counted run).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_sme2.analysis.attribution import OperatorKernels
from pytest_sme2.analysis.efficiency import Peak
from pytest_sme2.analysis.kernel_names import ExecutedKernel
from pytest_sme2.analysis.numerics import ExportNumerics, Numerics
from pytest_sme2.analysis.profile import Comparison, Profile, compare
from pytest_sme2.analysis.trace import Trace, read_etdump
from pytest_sme2.analysis.work import OperatorWork
from pytest_sme2.records.device import DeviceInfo, Variant
from pytest_sme2.records.disturbance import Disturbance
from pytest_sme2.records.evidence import CpuSeen, Sme2Evidence

#: Bytes in a mebibyte: how planned and resident memory are shown.
MIB = 1024 * 1024


@dataclass(frozen=True)
class LoadMeasurement:
    """What loading the program cost one variant, and the memory it held.

    XNNPACK and KleidiAI pack the weights when the method is initialised, and SME2 on and off
    pack differently, so init is measured per variant: as time (the fastest timing-only runner
    process) where time means something, as the guest instructions of ``Method::init`` where the
    device counts them (exact, like an inference's). The planned memory is the program's (the
    same on every machine); peak resident memory is the runner process's, max over its
    processes, and includes the runner's copy of the planned memory (as large again) that
    restores it before each execution; emulated, it would be qemu's own and is not kept.
    """

    planned_bytes: int
    peak_rss_bytes: int | None = None
    program_load_ms: float | None = None
    method_init_ms: float | None = None
    init_instructions: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoadMeasurement:
        """From :meth:`to_json`, or from a record written while the runner's copy of the plan
        was kept apart (``state_copy_bytes``, always the planned bytes): a history line or a
        kit's manifest of then still reads."""
        return cls(**{key: value for key, value in data.items() if key != "state_copy_bytes"})


@dataclass(frozen=True)
class VariantMeasurement:
    """One variant's latencies and its traced run, analysed.

    Where the device's time is not meaningful, or the ETDump was made elsewhere, there are no
    timing-only runs: ``latencies_ms`` are then the traced runs' E2E (recorded, never judged) and
    ``timing_warmup`` is None.
    """

    variant: Variant
    latencies_ms: tuple[float, ...]
    #: warm-up executions before each round of timing-only runs; None where there were none
    timing_warmup: int | None
    profile: Profile
    #: the traced run's ETDump and (where the runner wrote them) its outputs
    etdump: Path
    outputs: Path | None = None
    #: kernels/instruction counts, from devices that can show them (qemu exec log, kernel log);
    #: the counted inference's trace is summarised in ``profile``, not kept here
    evidence: Sme2Evidence | None = None
    #: load and init cost and memory, where the runner reports them
    load: LoadMeasurement | None = None
    #: where time means nothing and the device counted instructions per event: the counted
    #: inference's ETDump re-timed in instructions (:mod:`pytest_sme2.measure.modelled_etdump`), the
    #: one the kit's tools are given; ``etdump`` stays as the runner wrote it
    modelled_etdump: Path | None = None
    #: what the variant's runner saw of the CPU (SME, SME2, its vector length, XNNPACK's SME2
    #: kernels): the proof of its label, where the runner reports it
    seen: CpuSeen | None = None
    #: each GEMM and convolution operator event of one inference with its multiply-adds, from
    #: the program's ETRecord (:mod:`pytest_sme2.analysis.work`); () where there is none
    work: tuple[OperatorWork, ...] = ()
    #: the traced run's ETDump, parsed, where the measurement parsed it: kept in memory only
    #: (neither saved nor compared) so the report and the ``sme2_trace`` fixture need not parse
    #: it again; a record read back from JSON, or one whose profile came from a counted run, has
    #: None and its ETDump is read from ``etdump``
    trace: Trace | None = field(default=None, compare=False, repr=False)

    def parsed_trace(self) -> Trace:
        """The variant's ETDump as a Trace: the one measure parsed, else read from the file."""
        return self.trace if self.trace is not None else read_etdump(self.etdump)

    def to_json(self, base: Path) -> dict[str, Any]:
        return {
            "variant": str(self.variant),
            "latencies_ms": list(self.latencies_ms),
            "timing_warmup": self.timing_warmup,
            "profile": self.profile.to_json(),
            "etdump": _relative(self.etdump, base),
            "outputs": None if self.outputs is None else _relative(self.outputs, base),
            "evidence": None if self.evidence is None else _evidence_json(self.evidence),
            "load": None if self.load is None else self.load.to_json(),
            "modelled_etdump": None
            if self.modelled_etdump is None
            else _relative(self.modelled_etdump, base),
            # only where reported: the records of runners that said nothing keep their shape
            **({"cpu_seen": self.seen.to_json()} if self.seen is not None else {}),
            **({"work": [op.to_json() for op in self.work]} if self.work else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], base: Path) -> VariantMeasurement:
        evidence = data["evidence"]
        return cls(
            variant=Variant(data["variant"]),
            latencies_ms=tuple(data["latencies_ms"]),
            timing_warmup=data["timing_warmup"],
            profile=Profile.from_json(data["profile"]),
            etdump=_resolve(data["etdump"], base),
            outputs=None if data["outputs"] is None else _resolve(data["outputs"], base),
            evidence=None if evidence is None else _evidence_from_json(evidence),
            load=None if data.get("load") is None else LoadMeasurement.from_json(data["load"]),
            modelled_etdump=None
            if data.get("modelled_etdump") is None
            else _resolve(data["modelled_etdump"], base),
            seen=CpuSeen.from_timings(data),
            work=tuple(OperatorWork.from_json(op) for op in data.get("work", ())),
        )


@dataclass(frozen=True)
class Measurement:
    """Everything measured for one model × dtype × threads on one device.

    ``comparison`` (SME2-off vs SME2-on, when the device ran both) is computed once, at
    construction: its bootstrap interval costs ~10 ms and a report reads it a dozen times.
    """

    model: str
    dtype: str
    threads: int
    device: DeviceInfo
    variants: Mapping[Variant, VariantMeasurement]
    interleaved: bool
    #: SME2-on outputs against SME2-off outputs (same program, same inputs), when both ran
    parity: Numerics | None = None
    #: the reference workload's timing-only latencies from the same rounds (machine speed)
    reference_ms: tuple[float, ...] = ()
    #: the classifier's category overrides the profiles were made with (normalised keys)
    overrides: Mapping[str, str] = field(default_factory=dict)
    #: what the export found of the program's numbers (program and quantization error,
    #: degenerate outputs); None where the measurement was not made from a checked export
    numerics: ExportNumerics | None = None
    #: tokens one inference processes (a language model's phase: prompt length, or 1 for a
    #: decode step); None for a model without tokens
    tokens: int | None = None
    #: how much other work took the CPU from the timed runs, where time is judged
    #: (:mod:`pytest_sme2.measure.cpu_load`); None where the device's time means nothing
    disturbance: Disturbance | None = None
    #: each variant's timing-only latencies at 1 thread, timed in the same rounds as
    #: ``variants``' N-thread ones where a thread-gain floor asked for them; {} otherwise
    one_thread_ms: Mapping[Variant, tuple[float, ...]] = field(default_factory=dict)
    #: the chip's peak GFLOP/s each operator's achieved GFLOP/s is shown against, where time
    #: means something (:func:`pytest_sme2.analysis.efficiency.chip_peak`); None elsewhere
    peak: Peak | None = None
    comparison: Comparison | None = field(init=False)

    def __post_init__(self) -> None:
        on, off = self.variants.get(Variant.ON), self.variants.get(Variant.OFF)
        comparison = (
            compare(
                on.profile,
                off.profile,
                on_latencies_ms=on.latencies_ms,
                off_latencies_ms=off.latencies_ms,
                interleaved=self.interleaved,
            )
            if on is not None and off is not None
            else None
        )
        object.__setattr__(self, "comparison", comparison)

    @property
    def headline(self) -> Variant:
        """The variant a single number describes and share limits apply to: SME2-on where
        measured (the shipped configuration), else SME2-off."""
        return Variant.ON if Variant.ON in self.variants else Variant.OFF

    @property
    def instruction_ratio(self) -> float | None:
        """Guest instructions per inference, SME2-off ÷ SME2-on, where the device counts them.

        Where time is not meaningful (emulation) this is the measure of what SME2 saves.
        """
        on, off = self.variants.get(Variant.ON), self.variants.get(Variant.OFF)
        counts = [vm.evidence.instructions if vm and vm.evidence else None for vm in (on, off)]
        if None in counts or not counts[0]:
            return None
        return counts[1] / counts[0]

    @property
    def emulated_threads(self) -> bool:
        """Counted by an emulator with more than one thread: the instructions include the thread
        pool's spin-wait, which varies run to run (such counts are never stored either:
        ``devices.stored_counts``), so they are shown but neither judged nor recorded."""
        return not self.device.time_meaningful and self.threads > 1

    def to_json(self, base: Path) -> dict[str, Any]:
        """The record as plain JSON, its file paths relative to ``base`` (the test's directory:
        the saved record stays valid when the directory is copied elsewhere)."""
        return {
            "model": self.model,
            "dtype": self.dtype,
            "threads": self.threads,
            "device": _device_json(self.device),
            "variants": [vm.to_json(base) for vm in self.variants.values()],
            "interleaved": self.interleaved,
            "parity": None if self.parity is None else asdict(self.parity),
            "numerics": None if self.numerics is None else self.numerics.to_json(),
            "reference_ms": list(self.reference_ms),
            "overrides": dict(self.overrides),
            "tokens": self.tokens,
            "disturbance": None if self.disturbance is None else self.disturbance.to_json(),
            # only where timed: the records of cases without a thread-gain floor keep their shape
            **(
                {"one_thread_ms": {str(v): list(ms) for v, ms in self.one_thread_ms.items()}}
                if self.one_thread_ms
                else {}
            ),
            **({"peak": self.peak.to_json()} if self.peak is not None else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], base: Path) -> Measurement:
        device = data["device"]
        variants = (VariantMeasurement.from_json(v, base) for v in data["variants"])
        return cls(
            model=data["model"],
            dtype=data["dtype"],
            threads=data["threads"],
            device=DeviceInfo(**{**device, "variants": tuple(map(Variant, device["variants"]))}),
            variants={vm.variant: vm for vm in variants},
            interleaved=data["interleaved"],
            parity=None if data["parity"] is None else Numerics(**data["parity"]),
            numerics=None
            if data.get("numerics") is None
            else ExportNumerics.from_json(data["numerics"]),
            reference_ms=tuple(data["reference_ms"]),
            overrides=dict(data["overrides"]),
            tokens=data.get("tokens"),
            disturbance=None
            if data.get("disturbance") is None
            else Disturbance.from_json(data["disturbance"]),
            one_thread_ms={
                Variant(v): tuple(ms) for v, ms in data.get("one_thread_ms", {}).items()
            },
            peak=Peak.from_json(data["peak"]) if data.get("peak") else None,
        )


def _device_json(device: DeviceInfo) -> dict[str, Any]:
    return {
        "name": device.name,
        "fingerprint": dict(device.fingerprint),
        "has_sme2": device.has_sme2,
        "variants": [str(v) for v in device.variants],
        "time_meaningful": device.time_meaningful,
        "limits": dict(device.limits),
        "machine_class": dict(device.machine_class),
    }


#: the evidence JSON's format: 2 added ``kernels`` and ``operator_kernels`` (a format-1 record,
#: written before, reads with neither)
EVIDENCE_FORMAT = 2


def _evidence_json(evidence: Sme2Evidence) -> dict[str, Any]:
    return {
        "format": EVIDENCE_FORMAT,
        "instructions": evidence.instructions,
        "sme_instructions": evidence.sme_instructions,
        "sme2_kernels": list(evidence.sme2_kernels),
        "sme_kernels": list(evidence.sme_kernels),
        "source": evidence.source,
        "kernels": [asdict(kernel) for kernel in evidence.kernels],
        "operator_kernels": [op.to_json() for op in evidence.operator_kernels],
        "init_instructions": evidence.init_instructions,
        "stored_count_at": evidence.stored_count_at,
        **({"sme_functions": dict(evidence.sme_functions)} if evidence.sme_functions else {}),
    }


def _evidence_from_json(data: Mapping[str, Any]) -> Sme2Evidence:
    version = data.get("format", 1)
    if version > EVIDENCE_FORMAT:
        raise ValueError(
            f"evidence format {version}, this pytest-sme2 reads up to {EVIDENCE_FORMAT}: "
            "update pytest-sme2 or re-run the tests that wrote it"
        )
    return Sme2Evidence(
        instructions=data["instructions"],
        sme_instructions=data["sme_instructions"],
        sme2_kernels=tuple(data["sme2_kernels"]),
        sme_kernels=tuple(data["sme_kernels"]),
        source=data["source"],
        kernels=tuple(ExecutedKernel(**kernel) for kernel in data.get("kernels", ())),
        operator_kernels=tuple(
            OperatorKernels.from_json(op) for op in data.get("operator_kernels", ())
        ),
        init_instructions=data.get("init_instructions"),
        stored_count_at=data.get("stored_count_at", ""),
        sme_functions=dict(data.get("sme_functions", {})),
    )


def _relative(path: Path, base: Path) -> str:
    return os.path.relpath(path, base)


def _resolve(relative: str, base: Path) -> Path:
    return Path(os.path.normpath(base / relative))
